#!/usr/bin/env bash
# Search efficiency of the cost model (issue 9, benchmarks 1 and 3).
#
# 1. Three workloads (a square matmul, an odd matmul, a ResNet-50 conv2d layer) x SEEDS seeds
#    x the strategies xgb, random and ga, interleaved (seed by seed, workload by workload) so
#    that the machine's load hits them alike. Every run starts from an empty database, so it
#    measures search alone (xgb without transfer). For each run: the configs it measured before
#    its best-so-far came within 95% of the best speed any run found for that workload.
#    Prints the median over all runs per strategy and the ratio xgb / random.
# 3. Transfer: xgb on a new matmul shape, SEEDS seeds, starting from a copy of the databases
#    of benchmark 1 (records of other matmul shapes; env TRANSFER_DB adds a database's
#    records) against an empty database.
#
# Output (under OUT, default bench-out/search): curves.csv (every run's best-so-far),
# summary.txt, curves.png (mean of best/best-so-far per strategy and trial).
#
# Strategies are names of `tune --strategy`, or xgb-reg: xgb with --objective reg:squarederror.
#
# usage: bench/search_bench.sh [BUILD_DIR]
#   env: TRIALS (80), SEEDS (5), OUT, TRANSFER_DB, STRATEGIES ("xgb random ga"),
#        TRANSFER_STRATEGIES (benchmark 3's xgb variants, "xgb"; empty: skip benchmark 3),
#        TUNE_FLAGS (added to every tune, e.g. "--transfer-until 48"). STRATEGIES="" skips
#        benchmark 1; benchmark 3 then learns from TRANSFER_DB alone.
set -euo pipefail
BUILD=${1:-build}
TF=$BUILD/bin/tunefarm
TRIALS=${TRIALS:-80}
SEEDS=${SEEDS:-5}
OUT=${OUT:-bench-out/search}
PY=/usr/bin/python3
[ -x "$TF" ] || { echo "search_bench: $TF not built (scripts/build.sh)" >&2; exit 2; }
[ -z "${TRANSFER_DB:-}" ] || [ -f "$TRANSFER_DB" ] || { echo "search_bench: TRANSFER_DB $TRANSFER_DB: no such file" >&2; exit 2; }
command -v gnuplot > /dev/null || { echo "search_bench: gnuplot missing (scripts/install-deps.sh)" >&2; exit 2; }
if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; fi
rm -rf "$OUT" && mkdir -p "$OUT/db"

WORKLOADS=("matmul(M=512,N=512,K=512)" "matmul(M=97,N=131,K=67)"
           "conv2d_nchw(N=1,C=128,H=28,W=28,K=128,R=3,S=3,pad=1)")
read -r -a STRATEGIES <<< "${STRATEGIES-xgb random ga}"
read -r -a TRANSFER_STRATEGIES <<< "${TRANSFER_STRATEGIES-xgb}"
flags() {  # the tune flags of a strategy name
  case "$1" in
    xgb-reg) echo "--strategy xgb --objective reg:squarederror" ;;
    xgb|random|grid|ga) echo "--strategy $1" ;;
    *) echo "search_bench: unknown strategy $1 (xgb, xgb-reg, random, grid, ga)" >&2; return 2 ;;
  esac
}
for s in "${STRATEGIES[@]}" "${TRANSFER_STRATEGIES[@]}"; do flags "$s" > /dev/null || exit 2; done
NEW_SHAPE="matmul(M=200,N=304,K=150)"
read -r -a TUNE_EXTRA <<< "${TUNE_FLAGS:-}"
COMMON=(--local --trials "$TRIALS" --retime-rounds 0 --json "${TUNE_EXTRA[@]}")

echo "workload,strategy,seed,run,trial,config_s,best_s" > "$OUT/curves.csv"
curve() {  # curve DB WORKLOAD STRATEGY SEED LABEL
  "$TF" query curve --db "$1" -w "$2" --csv | tail -n +2 |
    awk -F, -v w="$2" -v s="$5" -v seed="$4" '{ printf "\"%s\",%s,%s,%s,%s,%s,%s\n", w, s, seed, $1, $(NF-3), $(NF-2), $(NF-1) }' \
    >> "$OUT/curves.csv"
}

start=$(date +%s)
for seed in $(seq 1 "$SEEDS"); do
  for wi in "${!WORKLOADS[@]}"; do
    w=${WORKLOADS[$wi]}
    for s in "${STRATEGIES[@]}"; do
      db="$OUT/db/w$wi-$s-$seed.db"
      read -r -a extra <<< "$(flags "$s")"
      case "$s" in xgb*) extra+=(--no-transfer) ;; esac
      "$TF" tune -w "$w" --seed "$seed" --db "$db" "${COMMON[@]}" "${extra[@]}" \
        > "$OUT/db/w$wi-$s-$seed.jsonl" 2> "$OUT/db/w$wi-$s-$seed.log"
      curve "$db" "$w" "$s" "$seed" "$s"
      echo "search_bench: seed $seed $s $w done ($(( $(date +%s) - start )) s)" >&2
    done
  done
done

# Transfer: the records of benchmark 1's matmul runs in one database, plus those of
# TRANSFER_DB when set (e.g. bench/costmodel_bench.sh's records of twelve other shapes).
merged="$OUT/db/transfer.db"
shopt -s nullglob
[ ${#TRANSFER_STRATEGIES[@]} -eq 0 ] ||
for f in "$OUT"/db/w0-*.db "$OUT"/db/w1-*.db ${TRANSFER_DB:+"$TRANSFER_DB"}; do
  "$TF" query export --db "$f" - | "$TF" query import --db "$merged" - > /dev/null
done
for seed in $(seq 1 "$SEEDS"); do
  for s in "${TRANSFER_STRATEGIES[@]}"; do
    for mode in transfer cold; do
      db="$OUT/db/new-$s-$mode-$seed.db"
      rm -f "$db"
      if [ "$mode" = transfer ]; then cp "$merged" "$db"; fi
      read -r -a extra <<< "$(flags "$s")"
      "$TF" tune -w "$NEW_SHAPE" --seed "$seed" --db "$db" "${COMMON[@]}" "${extra[@]}" \
        > "$OUT/db/new-$s-$mode-$seed.jsonl" 2> "$OUT/db/new-$s-$mode-$seed.log"
      curve "$db" "$NEW_SHAPE" "$s-$mode" "$seed" "$s-$mode"
      echo "search_bench: seed $seed $s-$mode $NEW_SHAPE done ($(( $(date +%s) - start )) s)" >&2
    done
  done
done

"$PY" bench/search_summary.py "$OUT" "$TRIALS" | tee "$OUT/summary.txt"
curves=$(grep -c '^"' "$OUT/mean_curves.dat")
gnuplot <<GP
set terminal pngcairo size 1000,640 noenhanced
set output "$OUT/curves.png"
set title "tuning curves: best speed so far / best any run found (mean over runs)"
set xlabel "configs measured"; set ylabel "fraction of the best speed"
set key bottom right; set grid; set yrange [0:1.05]
plot for [i=0:$((curves - 1))] "$OUT/mean_curves.dat" index i using 1:2 with lines linewidth 2 title columnheader(1)
GP
echo "search_bench: total $(( $(date +%s) - start )) s" >&2
