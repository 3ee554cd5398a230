#!/usr/bin/env bash
# Configures and builds tunefarm into build/ (override with BUILD_DIR). Assumes the
# packages from scripts/install-deps.sh are present.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# Unity batches (TUNEFARM_UNITY_BUILD) unless UNITY=OFF: a fresh build in about 4/5 of the time.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DTUNEFARM_UNITY_BUILD="${UNITY:-ON}" "$@" >/dev/null
ninja -C "$BUILD_DIR" -j"${JOBS:-2}"
