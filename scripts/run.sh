#!/usr/bin/env bash
# Installs what is needed, builds, and runs the main job on local defaults: compile a demo
# kernel (matmul 1024^3, or the workload given as $1) for this machine with its default
# schedule, run it, check it against the reference and print its GFLOPS.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec "${BUILD_DIR:-build}"/tuner/tunefarm run --workload "${1:-matmul(M=1024,N=1024,K=1024)}"
