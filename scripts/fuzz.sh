#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang-19 with ASan and UBSan) into build-fuzz/
# and runs each for FUZZ_SECONDS (default 30) from the committed corpus in tests/fuzz/corpus.
# New inputs the fuzzer finds go to build-fuzz/corpus/, not into the repository; a crash
# fails the run with libFuzzer's report and the input that caused it (build-fuzz/crash-*).
# To keep an input as a regression case, copy it into tests/fuzz/corpus/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
SECONDS_EACH=${FUZZ_SECONDS:-30}
CC=clang-19 CXX=clang++-19 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTUNEFARM_FUZZ=ON \
  -DTUNEFARM_UNITY_BUILD="${UNITY:-ON}" >/dev/null
ninja -C build-fuzz -j"${JOBS:-2}"
# Each target runs on one core: JOBS (default 2) of them at a time, so CI's fuzzing takes
# FUZZ_SECONDS x 8 / JOBS, not x 8.
fuzz_one() {
  local t=$1 max_len=4096 status=0
  mkdir -p "build-fuzz/corpus/$t"
  [ "$t" = onnx ] && max_len=8192  # model files: the seed models are up to 6 KB
  [ "$t" = gpu_model ] && max_len=3072  # the seed sections are 1.3 KB and 2.3 KB (two shape buckets)
  [ "$t" = model_library ] && max_len=4096  # the seed libraries (a 2x2 matmul kernel) are under 2 KB
  # -rss_limit_mb bounds a single input's memory; -timeout flags an input that hangs.
  (cd build-fuzz && ./tests/fuzz/fuzz_$t -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
     -max_len="$max_len" -print_final_stats=1 "corpus/$t" "../tests/fuzz/corpus/$t" > "fuzz_$t.log" 2>&1) || status=$?
  echo "$status" > "build-fuzz/fuzz_$t.status"
}
targets=(workload config jsonl onnx npy gpu_model model_library http)
running=0
for t in "${targets[@]}"; do
  echo "fuzz_$t: ${SECONDS_EACH} s"
  rm -f "build-fuzz/fuzz_$t.status"
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "${JOBS:-2}" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
failed=0
for t in "${targets[@]}"; do
  echo "--- fuzz_$t"
  tail -n 8 "build-fuzz/fuzz_$t.log"
  status=$(cat "build-fuzz/fuzz_$t.status" 2>/dev/null || echo 1)
  if [ "$status" -ne 0 ]; then
    grep -m1 -A30 "ERROR\|==ERROR\|deadly signal\|runtime error" "build-fuzz/fuzz_$t.log" || true
    echo "fuzz_$t failed (exit $status); see build-fuzz/fuzz_$t.log"
    failed=$((failed + 1))
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: $((${#targets[@]} - failed)) passed, $failed failed"
  exit 1
fi
echo "fuzz: all targets ran clean"
echo "fuzz: ${#targets[@]} passed, 0 failed"
