#!/usr/bin/env bash
# Installs every Debian package tunefarm needs to build, test and benchmark.
# Idempotent: packages already present are skipped by apt-get, and the package
# index is refreshed once per run only when something is missing.
set -euo pipefail

PACKAGES=(
  # build
  cmake ninja-build g++ pkg-config
  # the linker the build uses (CMakeLists.txt, TUNEFARM_LLD): 20x GNU ld's speed on programs linked to LLVM
  lld
  # compiler
  llvm-19 llvm-19-dev lld-19 liblld-19-dev llvm-19-tools libzstd-dev zlib1g-dev libedit-dev libxml2-dev libffi-dev libcurl4-openssl-dev
  # rocm kernels' math (tanh) from ROCm's ocml bitcode
  rocm-device-libs
  # services, database, cost model, CLI
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev libseccomp-dev
  libsqlite3-dev sqlite3 libsqlitecpp-dev libxgboost-dev libboost-dev nlohmann-json3-dev libcli11-dev
  # whole models: ONNX's protobufs (graph/), the ONNX backend node tests, PyTorch to export
  # real models at test time and as the peer of the model benchmarks
  libonnx-dev libonnx-testdata python3-torch python3-torchvision
  # tunefarm query curve draws with gnuplot
  gnuplot-nox
  # scripts/bundle.sh -o compresses with xz (priority standard: absent from minimal images)
  xz-utils
  # tests
  libgtest-dev libgmock-dev python3 python3-numpy openssl
  # the dashboard's tests and benchmark in a real browser (tests/dashboard/)
  chromium chromium-driver python3-selenium
  # fuzzing: clang with libFuzzer (scripts/fuzz.sh)
  clang-19 libclang-rt-19-dev
  # aarch64 stand-in for a Raspberry Pi
  qemu-user g++-aarch64-linux-gnu libgomp1-arm64-cross
  # the board daemon cross-built for aarch64 (scripts/build-board.sh) and run under qemu:
  # Debian's arm64 multiarch libraries (dpkg --add-architecture arm64, below)
  libgrpc++-dev:arm64 libprotobuf-dev:arm64 libssl-dev:arm64 libseccomp-dev:arm64 libgomp1:arm64
  # peers for benchmarks
  libopenblas-dev libdnnl-dev
  # parallel runtime the generated kernels link against
  libgomp1
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
# One index for both architectures: Multi-Arch "same" packages (the -dev libraries) must have
# one version on amd64 and arm64, so they are installed together from a single update.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then $SUDO dpkg --add-architecture arm64; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
