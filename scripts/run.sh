#!/usr/bin/env bash
# Installs what is needed, builds, and runs the main job on local defaults (this machine, the
# local tuning database): starts the tuning service with one local board, submits a job that
# tunes a workload (matmul 512^3, or $1) for $2 trials (default 60) and watches it, compiles
# and runs the tuned kernel (checked against the reference), and for a matmul compares the
# default and tuned kernels with OpenBLAS in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
B=${BUILD_DIR:-build}
W=${1:-matmul(M=512,N=512,K=512)}
# The default database ($TUNEFARM_DB, else ~/.local/share/tunefarm/tuning.db, created on first use).
LOG=$(mktemp)
"$B"/bin/tunefarm-tuner --local-boards 1 --port 0 >"$LOG" 2>&1 &
SVC=$!
trap 'kill $SVC 2>/dev/null; wait $SVC 2>/dev/null || true; rm -f "$LOG"' EXIT
PORT=
for _ in $(seq 300); do
  PORT=$(sed -nE 's/.*listening on [^:]+:([0-9]+).*/\1/p' "$LOG")
  [[ -n "$PORT" ]] && break
  kill -0 $SVC 2>/dev/null || { cat "$LOG" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$PORT" ]] || { echo "tunefarm-tuner did not start" >&2; cat "$LOG" >&2; exit 1; }
export TUNEFARM_SERVER=127.0.0.1:$PORT
"$B"/bin/tunefarm submit --workload "$W" --trials "${2:-60}" --watch
"$B"/bin/tunefarm compile --server --workload "$W" -o "${TMPDIR:-/tmp}/tunefarm-tuned.so"
"$B"/bin/tunefarm run --workload "$W"
DB=${TUNEFARM_DB:-$HOME/.local/share/tunefarm/tuning.db}
if [[ "$W" == matmul\(* ]]; then
  # OpenBLAS 0.3.21 misdetects new AVX-512 CPUs: give the peer its AVX-512 kernels.
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi
  SHAPE=$(echo "$W" | sed -E 's/.*M=([0-9]+),N=([0-9]+),K=([0-9]+).*/\1x\2x\3/')
  "$B"/bench/bench_matmul --shapes "$SHAPE" --threads "$(nproc)" --db "$DB"
fi
