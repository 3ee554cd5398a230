#!/usr/bin/env bash
# Builds with AddressSanitizer and UndefinedBehaviorSanitizer into build-asan/ and runs the
# tests there but the slow model-sized ones, which the release pass runs (TF_RELEASE_PASS_ONLY
# in tests/CMakeLists.txt: ctest lists them as disabled, and their programs are not built).
# Kernels compiled by tunefarm, the test kernels and tunefarm-board-runner stay
# uninstrumented: they run under address-space limits that sanitizer runtimes cannot start in.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR=build-asan bash scripts/build.sh -DTUNEFARM_SANITIZE=ON
cd build-asan
# TF_SANITIZED: the Python-driven tests take fewer repetitions of one check here, as the C++
# ones do (tests/sanitized.h); the release pass (scripts/test.sh) runs them all.
# malloc_context_size=10: reports show 10 frames of where a block was allocated and freed
# (ASan's default, 30, records and hashes 30 frames at every malloc: a sixth of the time of
# an allocating run such as `tune --model`, 16.0 -> 13.4 s).
TF_SANITIZED=1 ASAN_OPTIONS=${ASAN_OPTIONS:-malloc_context_size=10} UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions=$PWD/../tests/lsan.supp \
  ctest -j"${JOBS:-2}" --output-on-failure --timeout 900
