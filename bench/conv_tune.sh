#!/usr/bin/env bash
# Tunes bench_conv's layers (each in NCHW and in the blocked layout, issue 8's benchmark 1)
# into a database, then runs bench_conv against oneDNN with it.
#
#   bench/conv_tune.sh [TRIALS] [DB] [LAYERS]   (defaults: 32 trials, a temporary database,
#                                                resnet50,mobilenet_v2)
# A database that already holds records resumes: measured configs are not measured again.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
TRIALS=${1:-32}
DB=${2:-}
LAYERS=${3:-resnet50,mobilenet_v2}
if [[ -z "$DB" ]]; then
  DIR=$(mktemp -d /tmp/tunefarm-conv-tune-XXXXXX)
  trap 'rm -rf "$DIR"' EXIT
  DB=$DIR/conv.db
fi
start=$SECONDS
n=0
while read -r w; do
  n=$((n + 1))
  if out=$("$B/bin/tunefarm" tune -w "$w" --local --trials "$TRIALS" --db "$DB" 2>&1); then
    echo "$n $w: $(grep -m1 '^best' <<< "$out" || echo 'no best')"
  else
    echo "$n $w: FAILED: $(tail -1 <<< "$out")"
  fi
done < <("$B/bench/bench_conv" --layers "$LAYERS" --list)
echo "tuned $n workloads, $TRIALS trials each, in $((SECONDS - start)) s (database $DB)"
"$B/bench/bench_conv" --layers "$LAYERS" --db "$DB"
