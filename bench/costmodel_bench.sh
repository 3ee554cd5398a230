#!/usr/bin/env bash
# Cost model quality on held-out shapes and its overhead (issue 9, benchmarks 2 and 4).
#
# 2. Measures TRIALS random configs of each of twelve shapes of the dense template into one
#    database (random, so the test sets are unbiased samples of the space), then trains on
#    the others and ranks the held-out one, for each shape in turn (bench_costmodel quality).
# 4. The time xgb spends per batch with 200 and 2,000 training records, against the wall time
#    of a batch measured by the same tuning runs (bench_costmodel overhead).
#
# usage: bench/costmodel_bench.sh [BUILD_DIR]   env: TRIALS (60), OUT (bench-out/costmodel)
set -euo pipefail
BUILD=${1:-build}
TF=$BUILD/bin/tunefarm
BENCH=$BUILD/bench/bench_costmodel
TRIALS=${TRIALS:-60}
OUT=${OUT:-bench-out/costmodel}
[ -x "$TF" ] && [ -x "$BENCH" ] || { echo "costmodel_bench: build first (scripts/build.sh)" >&2; exit 2; }
rm -rf "$OUT" && mkdir -p "$OUT"
DB="$OUT/records.db"
SHAPES=("matmul(M=512,N=512,K=512)" "matmul(M=97,N=131,K=67)" "matmul(M=1,N=1000,K=1024)"
        "matmul(M=256,N=64,K=128)" "matmul(M=64,N=384,K=96)" "batch_matmul(B=4,M=64,N=96,K=48)"
        "matmul(M=128,N=768,K=256)" "matmul(M=33,N=65,K=500)" "matmul(M=384,N=128,K=384)"
        "batch_matmul(B=2,M=128,N=64,K=128)" "matmul(M=1,N=4096,K=512)" "matmul(M=49,N=256,K=1152)")
start=$(date +%s)
seed=0
for w in "${SHAPES[@]}"; do
  # A seed per shape: the same seed would draw nearly the same configs of every shape, and
  # the held-out shape's test configs would then be the training set's configs.
  seed=$((seed + 1))
  "$TF" tune -w "$w" --local --strategy random --seed "$seed" --trials "$TRIALS" --retime-rounds 0 --db "$DB" --json \
    > "$OUT/tune.jsonl" 2> /dev/null
  echo "costmodel_bench: measured $w ($(( $(date +%s) - start )) s)" >&2
done
# A batch's wall time, from the tuning runs: elapsed / (trials / 8).
batch_s=$(/usr/bin/python3 - "$DB" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rows = c.execute("SELECT started_at, finished_at, budget FROM runs WHERE finished_at > 0").fetchall()
print(sum((f - s) / (b / 8) for s, f, b in rows) / len(rows))
PY
)
{
  "$BENCH" quality --db "$DB"
  # 2,000 records need more than this benchmark measured: the search benchmark's records
  # are added when they exist.
  if [ -f bench-out/search/db/transfer.db ] || [ -n "${EXTRA_DB:-}" ]; then
    extra=${EXTRA_DB:-bench-out/search/db/transfer.db}
    "$TF" query export --db "$extra" - | "$TF" query import --db "$DB" - > /dev/null
  fi
  "$BENCH" overhead --db "$DB" --workload "matmul(M=200,N=304,K=150)" --rows 200,2000 --batch-s "$batch_s"
} | tee "$OUT/summary.txt"
