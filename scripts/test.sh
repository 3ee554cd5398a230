#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test. The README's test command; CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/install-ort.sh  # ONNX Runtime, the peer of tests/graph/ort_test.py
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest -j"${JOBS:-2}" --output-on-failure --timeout 600
