#!/usr/bin/env bash
# The tuner's benchmarks, each against a peer or goal measured in the same run:
#   1. throughput: candidates per second end to end with the local runner (goal >= 3/s on
#      a 2-core machine), for the random and ga strategies;
#   2. search: best GFLOPS found by ga against random search after the same trials;
#   3. fidelity: the tuned best (tuned at 1 thread) re-timed in 10 fresh processes; the
#      spread of their medians, max / min - 1 (goal <= 5%), and the spread of its speedup
#      over the default schedule timed interleaved in the same processes (`run --baseline
#      default`), which cancels the machine's drift (docs/tuning.md, "Fidelity");
#   4. the tuned kernels against OpenBLAS sgemm (bench_matmul --db), 1 and 2 threads.
#
#   bench/tune_bench.sh [WORKLOAD] [TRIALS]     (defaults: matmul 512^3, 100 trials)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
T=$B/bin/tunefarm
W=${1:-matmul(M=512,N=512,K=512)}
TRIALS=${2:-100}
DIR=$(mktemp -d /tmp/tunefarm-tune-bench-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
PY=/usr/bin/python3
# OpenBLAS 0.3.21 misdetects new AVX-512 CPUs; give it its AVX-512 kernels (a value already
# in the environment, e.g. Haswell, would understate the peer).
if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi

echo "== throughput and search: $W, $TRIALS trials each, no re-timing"
for s in random ga; do
  "$T" tune -w "$W" --local --trials "$TRIALS" --strategy "$s" --retime-rounds 0 --no-db --json > "$DIR/$s.jsonl"
done
$PY - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
done = {}
for s in ("random", "ga"):
    for line in open(f"{d}/{s}.jsonl"):
        e = json.loads(line)
        if e["event"] == "done":
            done[s] = e
for s, e in done.items():
    rate = e["trials"] / e["elapsed_s"]
    print(f"{s:7s} {e['trials']} trials in {e['elapsed_s']:.1f} s: {rate:.2f} candidates/s "
          f"(goal 3/s: {rate / 3:.2f}x), best {e['best_gflops']:.1f} GFLOPS, {e['errors']} failed")
print(f"search: ga best / random best = {done['ga']['best_gflops'] / done['random']['best_gflops']:.3f}")
PY

echo "== fidelity: tune at 1 thread, then the best re-timed in 10 fresh processes"
OMP_NUM_THREADS=1 "$T" tune -w "$W" --local --trials "$TRIALS" --db "$DIR/fid.db" --json > "$DIR/fid.jsonl"
BEST=$($PY -c "import json,sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1]) if '\"done\"' in l][-1]['best_config']))" "$DIR/fid.jsonl")
for i in $(seq 10); do
  OMP_NUM_THREADS=1 "$T" run -w "$W" --config "$BEST" --baseline default --no-db --json --repeat 10 \
    --min-repeat-ms 50 > "$DIR/run$i.json"
done
$PY - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
runs = [json.load(open(f"{d}/run{i}.json")) for i in range(1, 11)]
def spread(v):
    return max(v) / min(v) - 1
m = [r["median_s"] for r in runs]
b = [r["baseline"]["median_s"] for r in runs]
x = [r["speedup"] for r in runs]
print(f"best's medians in 10 fresh processes: {min(m)*1e3:.4f} .. {max(m)*1e3:.4f} ms, spread {spread(m)*100:.1f}% "
      f"(goal 5%: {'met' if spread(m) <= 0.05 else 'missed'})")
print(f"  the default schedule's, timed alongside: {min(b)*1e3:.4f} .. {max(b)*1e3:.4f} ms, spread {spread(b)*100:.1f}% "
      f"(the machine's drift)")
print(f"  the best's speedup over it, sample pairs: {min(x):.3f} .. {max(x):.3f}x, spread {spread(x)*100:.1f}% "
      f"(goal 5%: {'met' if spread(x) <= 0.05 else 'missed'})")
PY

if [[ "$W" == matmul* ]]; then
  SHAPE=$(echo "$W" | sed -E 's/.*M=([0-9]+),N=([0-9]+),K=([0-9]+).*/\1x\2x\3/')
  echo "== tuned (at 1 thread) against OpenBLAS"
  "$B/bench/bench_matmul" --shapes "$SHAPE" --threads 1,2 --db "$DIR/fid.db"
fi
