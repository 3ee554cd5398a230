#!/usr/bin/env bash
# Installs what is needed, builds, and runs the main job on local defaults (this machine, the
# local tuning database): tune a workload (matmul 512^3, or $1) for $2 trials (default 60),
# compile and run the tuned kernel (checked against the reference), and for a matmul compare
# the default and tuned kernels with OpenBLAS in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
B=${BUILD_DIR:-build}
W=${1:-matmul(M=512,N=512,K=512)}
# The default database ($TUNEFARM_DB, else ~/.local/share/tunefarm/tuning.db, created on first use).
"$B"/tuner/tunefarm tune --workload "$W" --local --trials "${2:-60}"
"$B"/tuner/tunefarm compile --workload "$W" -o "${TMPDIR:-/tmp}/tunefarm-tuned.so"
"$B"/tuner/tunefarm run --workload "$W"
DB=${TUNEFARM_DB:-$HOME/.local/share/tunefarm/tuning.db}
if [[ "$W" == matmul\(* ]]; then
  # OpenBLAS 0.3.21 misdetects new AVX-512 CPUs: give the peer its AVX-512 kernels.
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi
  SHAPE=$(echo "$W" | sed -E 's/.*M=([0-9]+),N=([0-9]+),K=([0-9]+).*/\1x\2x\3/')
  "$B"/bench/bench_matmul --shapes "$SHAPE" --threads "$(nproc)" --db "$DB"
fi
