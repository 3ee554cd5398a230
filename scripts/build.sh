#!/usr/bin/env bash
# Configures and builds tunefarm into build/ (override with BUILD_DIR). Assumes the
# packages from scripts/install-deps.sh are present.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
ninja -C "$BUILD_DIR" -j"${JOBS:-2}"
