# Cross-compiles the board (TUNEFARM_BOARD_ONLY) for 64-bit Arm Linux, e.g. a Raspberry Pi
# 3/4/5 on 64-bit Raspberry Pi OS, with Debian's g++-aarch64-linux-gnu and arm64 multiarch
# libraries (scripts/install-deps.sh installs both; scripts/build-board.sh uses this file).
#
# Debian keeps every architecture's headers in /usr/include and the arm64 libraries in
# /usr/lib/aarch64-linux-gnu, so the search is not rooted in a sysroot: CMake finds headers
# in /usr/include and, through CMAKE_LIBRARY_ARCHITECTURE, only the arm64 libraries and
# package configs. Programs that run during the build (protoc, grpc_cpp_plugin) are the
# host's.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# pkg-config (used by gRPC's and OpenSSL's find modules) must read the arm64 .pc files.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# Tests of the cross-built programs run them under qemu-aarch64 (the multiarch loader in /).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
