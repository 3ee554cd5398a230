#!/usr/bin/env bash
# The checks a lent GPU session runs, in order of what they settle, as one script: a session's
# GPU time is short, so everything is prepared here and run there in one call.
#
# Prepare here (no GPU needed):
#   bash scripts/bundle.sh -o build-gpubundle/tf.tar.xz
#   TF_WARP_MMA_PTX_DIR=build-gpubundle/mma build/tests/test_compiler_warp_mma --gtest_filter='*Ptx*'
# Run there (carry build-gpubundle), with the session's remaining seconds as BUDGET:
#   BUDGET=540 bash bench/gpu_session.sh
# Every step runs under `timeout` and writes OUT/<step>.txt (and .json where the benchmark has
# one) as it goes; OUT/steps.txt records each step's seconds and exit status. Steps that would
# start past the budget are skipped, and the last one (the zoo) gets what is left. ONLY (names,
# comma-separated: mma,optimize,bench_fp16,model_fp16,bench_tf32,model_grouped,bench_grouped,zoo)
# runs those steps alone.
set -u
OUT=${OUT:-/tmp/gpu-session}
BUDGET=${BUDGET:-540}
ONLY=${ONLY:-}
mkdir -p "$OUT"
start=$(date +%s)
log() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$OUT/steps.txt"; }
left() { echo $((BUDGET - ($(date +%s) - start))); }
# step NAME SECONDS COMMAND...: runs COMMAND for at most SECONDS (or what is left).
step() {
  local name=$1 limit=$2
  shift 2
  [[ -n "$ONLY" && ",$ONLY," != *",$name,"* ]] && return
  local rest
  rest=$(left)
  if ((rest < 15)); then
    log "skip $name (${rest} s left)"
    return
  fi
  ((limit > rest)) && limit=$rest
  log "start $name (limit $limit s)"
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  log "end $name rc=$?"
}

bundle=/tmp/tunefarm-$(uname -m)
tar -xJf build-gpubundle/tf.tar.xz -C /tmp || { log "cannot unpack the bundle"; exit 2; }
bin=$bundle/bin/tunefarm
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
python3 -c 'import sys, torch; print(sys.version, torch.__version__, torch.cuda.get_device_name())' >"$OUT/python.txt" 2>&1

# Issue 55: the fragment layouts on hardware first (the emulator's reading of the PTX manual).
step mma 60 python3 bench/gpu_mma_check.py build-gpubundle/mma
# Issue 55: the package under the server's Python and PyTorch, fp32 and .half().
step optimize 80 env PYTHONPATH="$bundle/python" python3 bench/gpu_optimize_check.py
# Issue 55: tensor-core GEMMs against cuBLAS in the same precision.
step bench_fp16 80 python3 bench/gpu_bench.py "$bin" --precision fp16 --groups dense,bert --rounds 3 \
  --json "$OUT/bench_fp16.json"
step model_fp16 120 python3 bench/gpu_model_bench.py "$bin" --precision fp16 --models bert_base,resnet50,mobilenet_v2 \
  --rounds 3 --json "$OUT/model_fp16.json"
step bench_tf32 50 python3 bench/gpu_bench.py "$bin" --precision tf32 --groups dense,bert --rounds 3 \
  --json "$OUT/bench_tf32.json"
# Issue 56: grouped convolutions as one kernel a layer (were 26x / 10x behind PyTorch).
step model_grouped 70 python3 bench/gpu_model_bench.py "$bin" --models resnext50,regnet_y_400mf --rounds 3 \
  --json "$OUT/model_grouped.json"
step bench_grouped 40 python3 bench/gpu_bench.py "$bin" --groups grouped --rounds 3 --json "$OUT/bench_grouped.json"
# Issue 56: the zoo against PyTorch, fp32, as far as the budget goes (rows print as they finish).
step zoo 600 python3 bench/gpu_model_bench.py "$bin" --rounds 3 --json "$OUT/zoo.json" \
  --models squeezenet1_1,shufflenet_v2_x1_0,efficientnet_b0,densenet121,mnasnet1_0,googlenet,convnext_tiny,mobilenet_v3_large,regnet_x_400mf,inception_v3,swin_t,vit_b_16,wide_resnet50_2
log "done"
