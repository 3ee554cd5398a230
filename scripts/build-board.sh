#!/usr/bin/env bash
# Cross-builds the board daemon (tunefarm-rpc-server and tunefarm-board-runner) for a
# 64-bit Arm board such as a Raspberry Pi 4, and packs it as a .deb:
#   bash scripts/build-board.sh            -> build-board-aarch64/tunefarm-board_*_arm64.deb
# BUILD_DIR overrides the folder. Needs what scripts/install-deps.sh installs (the
# aarch64 cross compiler and Debian's arm64 gRPC, protobuf, OpenSSL and libseccomp).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-board-aarch64}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTUNEFARM_BOARD_ONLY=ON \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" >/dev/null
ninja -C "$BUILD_DIR" -j"${JOBS:-2}"
(cd "$BUILD_DIR" && cpack -G DEB >/dev/null)
ls "$BUILD_DIR"/tunefarm-board_*.deb
