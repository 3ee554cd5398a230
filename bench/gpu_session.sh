#!/usr/bin/env bash
# The checks a lent GPU session runs, in order of what they settle, as one script: a session's
# GPU time is short, so everything is prepared here and run there in one call.
#
# Prepare here (no GPU needed):
#   bash scripts/bundle.sh -o build-gpubundle/tf.tar.xz
#   TF_WARP_MMA_PTX_DIR=build-gpubundle/mma build/tests/test_compiler_warp_mma --gtest_filter='*Ptx*'
# Run there (carry build-gpubundle), with the session's remaining seconds as BUDGET:
#   BUDGET=540 bash bench/gpu_session.sh
# Every step runs under `timeout` and writes WORK/<step>.txt (and .json where the benchmark has
# one) as it goes; WORK/steps.txt records each step's seconds and exit status. After each step
# OUT/all.txt (every text, in order) and OUT/json.tar are refreshed: the device tool brings back
# only a few files, and a step cut short still leaves what came before. Steps that would start
# past the budget are skipped, and the last one (the zoo) gets what is left. ONLY (names,
# comma-separated, run in that order: mma,optimize,bench_fp16,bench_half,bench_kn16,bench_wgmma,bench_wgmma_flight,sweep_wgmma,model_fp16,ab_lowering,model_o3,profile_fp16,profile_fp32,profile_o3,sweep_fp16,sweep_large,sweep_deep,sweep_half,bench_tf32,model_tf32,
# model_bf16,model_grouped,bench_grouped,buckets,sweep_bert16,sweep_large16,bench_warp64,bench_pairs,sweep_swizzle,sweep_conv9,bench_bert16,sweep_random,sweep_grouped,tune_rate,
# tune_once,tune_json,tune_fast,tune_old,tune_serial,tune_model,zoo) runs those steps alone; FP16_MODELS and ZOO_MODELS
# replace those steps' model lists, TUNE_TRIALS tune_rate's trials per workload (48).
set -u
OUT=${OUT:-/tmp/gpu-session-out}
WORK=${WORK:-/tmp/gpu-session}
BUDGET=${BUDGET:-540}
ONLY=${ONLY:-}
mkdir -p "$OUT" "$WORK"
start=$(date +%s)
log() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$WORK/steps.txt"; }
collect() {
  (cd "$WORK" && for f in steps.txt $(ls -tr | grep -v '^steps.txt$' | grep '\.txt$'); do
    echo "=== $f"
    cat "$f"
  done) >"$OUT/all.txt" 2>&1
  (cd "$WORK" && ls ./*.json >/dev/null 2>&1 && tar -cf "$OUT/json.tar" ./*.json)
}
left() { echo $((BUDGET - ($(date +%s) - start))); }
# step NAME SECONDS COMMAND...: declares a step, run later for at most SECONDS (or what is left).
# Steps run in the order of ONLY where it is given (what matters most first), else as declared.
names=()
declare -A limits commands
step() {
  local name=$1 limit=$2
  shift 2
  names+=("$name")
  limits[$name]=$limit
  commands[$name]=$(printf '%q ' "$@")
}
run_step() {
  local name=$1 limit=${limits[$1]} rest
  rest=$(left)
  if ((rest < 15)); then
    log "skip $name (${rest} s left)"
    return
  fi
  ((limit > rest)) && limit=$rest
  log "start $name (limit $limit s)"
  eval "timeout $limit ${commands[$name]}" >"$WORK/$name.txt" 2>&1
  log "end $name rc=$?"
  collect
}

bundle=/tmp/tunefarm-$(uname -m)
tar -xJf build-gpubundle/tf.tar.xz -C /tmp || { log "cannot unpack the bundle"; exit 2; }
bin=$bundle/bin/tunefarm
nvidia-smi >"$WORK/nvidia-smi.txt" 2>&1
python3 -c 'import sys, torch; print(sys.version, torch.__version__, torch.cuda.get_device_name())' >"$WORK/python.txt" 2>&1
# The tuner assembles CUDA candidates with NVIDIA's ptxas where it finds one (compiler/ptxas.h):
# PATH, /usr/local/cuda/bin, else the one Triton ships with PyTorch (named by TF_PTXAS).
if [[ -z "${TF_PTXAS:-}" ]] && ! command -v ptxas >/dev/null && [[ ! -x /usr/local/cuda/bin/ptxas ]]; then
  triton_ptxas=$(python3 -c 'import os, triton; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas"))' 2>/dev/null)
  [[ -x "$triton_ptxas" ]] && export TF_PTXAS=$triton_ptxas
fi
{
  echo "TF_PTXAS=${TF_PTXAS:-} ptxas in PATH: $(command -v ptxas)"
  "${TF_PTXAS:-ptxas}" --version 2>&1 | tail -2
} >"$WORK/ptxas.txt" 2>&1

# Issue 55: the fragment layouts and wgmma's shared-memory descriptors on hardware first (the
# emulator's reading of the PTX manual; the wgmma kernels run on sm_90 only).
step mma 60 python3 bench/gpu_mma_check.py build-gpubundle/mma
# Issue 55: the package under the server's Python and PyTorch, fp32 and .half().
step optimize 80 env PYTHONPATH="$bundle/python" python3 bench/gpu_optimize_check.py
# Issue 55: tensor-core GEMMs against cuBLAS in the same precision.
step bench_fp16 80 python3 bench/gpu_bench.py "$bin" --precision fp16 --groups dense,bert,resnet --rounds 3 \
  --json "$WORK/bench_fp16.json"
# The same GEMMs with 16-bit operands in global memory (dtype=float16), as cuBLAS takes them, and
# convolutions of 16-bit weights (weight_dtype, as --precision fp16 cuda models read them);
# the odd shapes check ldmatrix's guarded and trimmed tiles on the hardware (MISMATCH lines).
step bench_half 60 python3 bench/gpu_bench.py "$bin" --precision fp16 --half-operands --groups dense,bert --rounds 3 \
  -w 'matmul(M=50,N=37,K=38)' -w 'matmul(M=20,N=30,K=38)' -w 'batch_matmul(B=3,M=20,N=24,K=24)' \
  -w 'conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1,epilogue=bias_relu)' -w 'conv2d_nchw(N=1,C=1024,H=14,W=14,K=256,R=1,S=1)' \
  -w 'conv2d_nchw(N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3)' --json "$WORK/bench_half.json"
# Issue 55: 16-bit B given as [K][N] (no trans_b), kept so in shared memory and read by
# ldmatrix.trans since session 92 (transposed through registers before), against cuBLAS's NN
# GEMM on the same tensors; NHWC convolutions of 16-bit weights ([C R S][K]).
step bench_kn16 60 python3 bench/gpu_bench.py "$bin" --precision fp16 --groups '' --rounds 3 \
  -w 'matmul(M=4096,N=4096,K=4096,dtype=float16)' -w 'matmul(M=128,N=768,K=3072,dtype=float16,epilogue=bias)' \
  -w 'batch_matmul(B=12,M=128,N=64,K=128,dtype=float16)' \
  -w 'conv2d_nhwc(N=1,H=56,W=56,C=64,K=64,R=3,S=3,pad=1,weight_dtype=float16)' --json "$WORK/bench_kn16.json"
# --realistic: MobileNet-v2's fresh initialization gives outputs of ~1e-9, which float16 flushes.
# --without-pass sixteen-bit-edges: the same builds with float32 values between the kernels too,
# interleaved (what the 16-bit values gain; since session 93 they also reach the elementwise
# readers beside the products, rounded, and pass through views: BERT's Q, K, V and first
# feed-forward products read 16-bit data; the accuracy line says what that costs).
# --also-opt-level 3: the same with fuse-attention (-O3 only since session 87, which timed its first
# kernel at 100 us a layer, 2.08 ms against the chain's 1.06; its second, the rows' max and sum
# spread over 32 lanes and the products unrolled, is untimed).
# --without-pass read-views-in-products: the same with the attention's Q, K, V and merged heads
# copied by kernels of their own (session 97 made the products read them through the views: BERT
# 4 kernels a layer fewer; untimed).
step model_fp16 180 python3 bench/gpu_model_bench.py "$bin" --precision fp16 --realistic \
  --models "${FP16_MODELS:-bert_base,resnet50,mobilenet_v2}" --rounds 3 --without-pass sixteen-bit-edges \
  --without-pass read-views-in-products --also-opt-level 3 --json "$WORK/model_fp16.json"
# What sessions 96-99's row-kernel lowering passes gain on whole models, each kernel lowered
# without it (compile --model --skip-pass): early_loads (a LayerNorm's scale and bias loaded
# before its barriers) and merge_barriers (7 -> 6 bar.sync a LayerNorm); untimed so far.
step ab_lowering 150 bash -c "python3 bench/gpu_model_bench.py '$bin' --models bert_base --rounds 3 \
  --skip-lowering-pass early_loads --skip-lowering-pass merge_barriers --json '$WORK/ab_lowering.json' && \
  python3 bench/gpu_model_bench.py '$bin' --precision fp16 --realistic --models bert_base --rounds 3 \
  --skip-lowering-pass early_loads --json '$WORK/ab_lowering16.json'"
# Issue 55: the attention models in float32 at -O2 (the chain) and -O3 (fuse-attention's kernel).
step model_o3 150 python3 bench/gpu_model_bench.py "$bin" --models bert_base,vit_b_16,swin_t --rounds 3 \
  --without-pass read-views-in-products --also-opt-level 3 --json "$WORK/model_o3.json"
step profile_fp16 60 python3 bench/gpu_profile.py "$bin" --precision fp16 --models bert_base --calls 5 --top 12
# The float32 BERT-base's kernels at -O2: its LayerNorms and softmaxes are block reductions
# (session 96: one tree level, merged barriers; session 87 timed its LayerNorms at 7.3 us each
# against PyTorch's 3.3).
step profile_fp32 60 python3 bench/gpu_profile.py "$bin" --models bert_base --calls 5 --top 14
# The float32 BERT-base's kernels at -O3: what fuse-attention's kernel costs a layer (100 us in session 87).
step profile_o3 60 python3 bench/gpu_profile.py "$bin" --opt-level 3 --models bert_base --calls 5 --top 12
# Issue 55/57: does the tensor-core space hold configs better than the default? (kernel time)
# Issue 55: Hopper's wgmma (off by default until this measures it): one 128 x 128 config on every
# GEMM with 16-bit operands (as cuBLAS takes them) against cuBLAS, then the grid of wgmma configs
# (MISMATCH lines: the core-matrix layouts or descriptors differ from the hardware's).
step bench_wgmma 80 python3 bench/gpu_bench.py "$bin" --precision fp16 --half-operands --groups dense,bert --rounds 3 \
  -c '{"warps_m":8,"warps_n":1,"tiles_m":1,"tiles_n":16,"unroll_k":4,"stages":3,"split_k":1,"shared":true,"wgmma":true}' \
  --json "$WORK/bench_wgmma.json"
# The same tile with 4 stages and each K chunk's products in flight across the next (issue 55:
# every wgmma config of session 87 waited for its products before the next chunk's copies).
step bench_wgmma_flight 80 python3 bench/gpu_bench.py "$bin" --precision fp16 --half-operands --groups dense,bert --rounds 3 \
  -c '{"warps_m":8,"warps_n":1,"tiles_m":1,"tiles_n":16,"unroll_k":4,"stages":4,"split_k":1,"shared":true,"wgmma":true,"wgmma_in_flight":true}' \
  --json "$WORK/bench_wgmma_flight.json"
step sweep_wgmma 150 python3 bench/gpu_config_sweep.py "$bin" --precision fp16 --groups dense,bert --wgmma --calls 10 \
  -w 'conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1,epilogue=bias_relu)' -w 'conv2d_nchw(N=1,C=1024,H=14,W=14,K=256,R=1,S=1)'
step sweep_fp16 150 python3 bench/gpu_config_sweep.py "$bin" --precision fp16 --groups bert --calls 10 \
  -w 'conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1)' -w 'conv2d_nchw(N=1,C=1024,H=14,W=14,K=256,R=1,S=1)'
# Issue 55: block tiles past 48 KiB (dynamic shared memory) against the defaults, on the square
# GEMMs and BERT's: whether the defaults should use them.
step sweep_large 150 python3 bench/gpu_config_sweep.py "$bin" --precision fp16 --groups dense,bert --large --calls 10
# Issue 55: deep pipelines (6 to 12 stages, session 98; the tuner's seeds for GEMMs of operands
# read from inputs) on BERT's GEMMs as a --precision fp16 model now gives them (16-bit operands): whether a
# short K's chunks all in flight (cuBLAS's 64 x 64 blocks, K chunks of 64, 13 stages) beat the
# default's 4 stages, and which should become the default.
step sweep_deep 150 python3 bench/gpu_config_sweep.py "$bin" --precision fp16 --half-operands --groups bert --deep \
  --calls 10
# Issue 55: a --precision fp16 BERT-base's own GEMMs (compile --model lists them): float32
# activations with 16-bit weights (a LayerNorm's output, also read by the residual add) with and
# without half_tiles, then those of 16-bit operands; whether a better default is in the space.
bert16_a="-w 'matmul(M=128,N=3072,K=768,trans_b=1,dtype=float32,weight_dtype=float16,epilogue=bias)' \
  -w 'matmul(M=128,N=2304,K=768,trans_b=1,dtype=float32,weight_dtype=float16,epilogue=bias)'"
bert16_b="-w 'matmul(M=128,N=768,K=3072,trans_b=1,dtype=float16,epilogue=bias)' \
  -w 'matmul(M=128,N=768,K=768,trans_b=1,dtype=float16,epilogue=bias)' \
  -w 'batch_matmul(B=12,M=128,N=128,K=64,dtype=float16)' -w 'batch_matmul(B=12,M=128,N=64,K=128,dtype=float16)'"
sweep="python3 bench/gpu_config_sweep.py '$bin' --precision fp16 --groups '' --calls 10"
step sweep_bert16 130 bash -c "$sweep --half $bert16_a && $sweep $bert16_b"
# Issue 55: the square GEMMs as cuBLAS takes them (16-bit operands, B as [N][K]) against block
# tiles past 48 KiB: whether the large GEMMs' default should use them.
step sweep_large16 90 bash -c "$sweep --large -w 'matmul(M=4096,N=4096,K=4096,trans_b=1,dtype=float16)' \
  -w 'matmul(M=2048,N=2048,K=2048,trans_b=1,dtype=float16)'"
# Issue 55: mma.sync's 64 x 64 warp tiles (the tuner's seeds for large 16-bit GEMMs since session
# 94, when their 128 accumulators a lane left a 512-byte stack frame for registers): 128 x 256
# blocks of 8 warps, 3 stages, against cuBLAS on the square GEMMs (the default: 128 x 128 blocks
# of 64 x 32 warp tiles, 0.28-0.32x cuBLAS at 4096^3 in sessions 87-89).
step bench_warp64 60 python3 bench/gpu_bench.py "$bin" --precision fp16 --half-operands --groups dense --rounds 3 \
  -c '{"warps_m":2,"warps_n":4,"tiles_m":4,"tiles_n":8,"unroll_k":2,"stages":3,"split_k":1,"shared":true}' \
  --json "$WORK/bench_warp64.json"
# Issue 55: B's fragments two tiles an ldmatrix.x4 (lowering pass pair_fragments, session 95)
# against one .x2 a tile, the default and the 64 x 64 warp tiles, fp16 and the BERT GEMMs.
step bench_pairs 90 bash -c "python3 bench/gpu_bench.py '$bin' --precision fp16 --half-operands --groups dense,bert \
  --rounds 3 --without-pass pair_fragments && python3 bench/gpu_bench.py '$bin' --precision fp16 --half-operands \
  --groups dense --rounds 3 --without-pass pair_fragments -c '{\"warps_m\":2,\"warps_n\":4,\"tiles_m\":4,\"tiles_n\":8,\"unroll_k\":2,\"stages\":3,\"split_k\":1,\"shared\":true}'"
# Issue 55: the blocks' launch order (block_swizzle: groups of 4 or 8 rows of blocks launched
# column by column) on the square GEMMs' 128 x 128 default and the 64 x 64 warp tiles' 128 x 256.
swz='{"warps_m":2,"warps_n":4,"tiles_m":4,"tiles_n":4,"unroll_k":2,"stages":3,"split_k":1,"shared":true'
swz64='{"warps_m":2,"warps_n":4,"tiles_m":4,"tiles_n":8,"unroll_k":2,"stages":3,"split_k":1,"shared":true'
step sweep_swizzle 90 bash -c "$sweep -w 'matmul(M=4096,N=4096,K=4096,trans_b=1,dtype=float16)' \
  -w 'matmul(M=8192,N=8192,K=4096,trans_b=1,dtype=float16)' --configs '[$swz,\"block_swizzle\":1}, \
  $swz,\"block_swizzle\":4}, $swz,\"block_swizzle\":8}, $swz64,\"block_swizzle\":1}, $swz64,\"block_swizzle\":8}]'"
# Issue 55: ResNet-50's 3x3 convolutions at fp16 (16-bit data and weights, as a --precision fp16
# model stores them) with K chunks of their 9 filter taps (unroll_k 9: the im2col rows decoded
# once a kernel, 40 -> 9 PTX instructions a product in the main loop; the tuner's seed since
# session 94) against the default's 2 steps: whether the conv default should take them.
conv9='[{"unroll_k":9},{"unroll_k":9,"stages":2},{"unroll_k":9,"split_k":1},{"unroll_k":9,"warps_n":1}]'
step sweep_conv9 120 bash -c "$sweep --configs '$conv9' \
  -w 'conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,dtype=float16,epilogue=bias_relu)' \
  -w 'conv2d_nchw(N=1,C=128,H=28,W=28,K=128,R=3,S=3,pad=1,dtype=float16,epilogue=bias_relu)' \
  -w 'conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1,dtype=float16,epilogue=bias_relu)' \
  -w 'conv2d_nchw(N=1,C=512,H=7,W=7,K=512,R=3,S=3,pad=1,dtype=float16,epilogue=bias_relu)'"
# Issue 55: the defaults timed by those sweeps (session 89: 16-bit products of inputs) against
# cuBLAS: the square GEMMs and BERT's as cuBLAS takes them, and the float32-activation ones.
step bench_bert16 60 bash -c "python3 bench/gpu_bench.py '$bin' --precision fp16 --half-operands --groups dense,bert \
  --rounds 3 $bert16_a --json '$WORK/bench_bert16.json'"
# Issue 55: the operands' tiles in 16 bits (half_tiles: half the shared memory and its loads, the
# rounding moved to the copy, which is then not cp.async) against float32 tiles, config by config.
# Issues 57 and 55: configs drawn at random from the whole space (not a grid around the default) of
# BERT-base's fp32 GEMMs (dense.cuda: whether its space holds better configs than the default, and
# whether the cost model ranks them: bench/sweep_records.py, then bench_costmodel quality here) and
# of its fp16 GEMMs with 16-bit operands (dense_tc).
step sweep_random 200 bash -c "python3 bench/gpu_config_sweep.py '$bin' --precision fp32 --groups bert --random 40 --calls 10 && \
  python3 bench/gpu_config_sweep.py '$bin' --precision fp16 --half-operands --groups bert --random 40 --calls 10"
# Issue 56: the grouped 3x3 convolutions (0.49-0.81x cuDNN, ~34 us whatever their size: the default
# launches one warp a block, 104 blocks for C=208 group 26) against configs drawn from their space.
step sweep_grouped 150 python3 bench/gpu_config_sweep.py "$bin" --precision fp32 --groups grouped --random 40 --calls 10
step sweep_half 150 python3 bench/gpu_config_sweep.py "$bin" --precision fp16 --groups dense,bert --half \
  --calls 10
# The trans_b=1 rows: B given as [N][K], as --precision tf32 models give their weights since
# session 96 (both operands' fragments by ldmatrix), beside the [K][N] rows of the groups.
step bench_tf32 60 python3 bench/gpu_bench.py "$bin" --precision tf32 --groups dense,bert --rounds 3 \
  -w 'matmul(M=4096,N=4096,K=4096,trans_b=1,precision=tf32)' \
  -w 'matmul(M=128,N=3072,K=768,trans_b=1,precision=tf32,epilogue=bias)' --json "$WORK/bench_tf32.json"
step model_tf32 100 python3 bench/gpu_model_bench.py "$bin" --precision tf32 --models bert_base,resnet50 \
  --rounds 3 --without-pass read-views-in-products --json "$WORK/model_tf32.json"
step model_bf16 60 python3 bench/gpu_model_bench.py "$bin" --precision bf16 --realistic --models bert_base,resnet50 \
  --rounds 3 --json "$WORK/model_bf16.json"
# Issue 56: grouped convolutions as one kernel a layer (were 26x / 10x behind PyTorch).
step model_grouped 70 python3 bench/gpu_model_bench.py "$bin" --models resnext50,regnet_y_400mf --rounds 3 \
  --json "$WORK/model_grouped.json"
step bench_grouped 40 python3 bench/gpu_bench.py "$bin" --groups grouped --rounds 3 --json "$WORK/bench_grouped.json"
# Issue 56: a --dim batch=1,8,32 library (a launch plan per bucket) against static builds of each
# size and PyTorch, CUDA-graph replays (the goal: within 5% of static at every size).
step buckets 150 python3 bench/gpu_model_bench.py "$bin" --models resnet50,bert_base --buckets 1,8,32 --rounds 3 \
  --json "$WORK/buckets.json"
# Issue 57: candidates a second through a loopback board, its measuring process kept (today's
# default: cubins where this machine has ptxas, session 86), the same with PTX the driver JITs
# (TF_PTXAS=off), and a runner per candidate (as before session 57); tune prints where the time
# went ("module load ... (cubins: N of M)") and which way kernels went ("kernels are assembled").
tune_w="-w 'matmul(M=1024,N=1024,K=1024)' -w 'conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)'"
tune="python3 bench/gpu_bench.py '$bin' --groups '' --tune ${TUNE_TRIALS:-48} --rounds 1 $tune_w"
step tune_rate 200 bash -c "$tune && TF_PTXAS=off $tune && $tune --board-flag=--runner-per-measurement"
# tune_rate's first run alone (the default protocol: candidates a second since session 88's same-code twins).
step tune_once 70 bash -c "$tune"
# Issue 57: where a search measurement's ~130 ms go (session 89: 131 ms of "timing" for a 77 us
# kernel, 5 samples of 10 ms): tune --json's events of the matmul, summarized by kind.
summarize='import json, statistics as s, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for kind in ("trial", "retime"):
    e = [x for x in ev if x.get("event") == kind and "run_ms" in x]
    if not e: continue
    med = lambda k: s.median(x.get(k, 0) for x in e)
    print("%-6s %3d: run %.1f ms, upload %.1f, load %.2f, warm-up calls %d, calls a sample %d, cut %d, remeasured %d, median %.4f ms"
          % (kind, len(e), med("run_ms"), med("upload_ms"), med("load_ms"), med("warmup_calls"), med("number"),
             sum(x.get("cut", False) for x in e), sum(x.get("remeasure", False) for x in e), 1e3 * med("median_s")))
for x in ev:
    if x.get("event") == "done": print("done:", json.dumps(x.get("time", x))[:600])'
step tune_json 60 bash -c "python3 bench/gpu_bench.py '$bin' --groups '' --tune ${TUNE_TRIALS:-48} --rounds 1 \
  -w 'matmul(M=1024,N=1024,K=1024)' --tune-flag=--json --tune-log '$WORK/tune.jsonl' > /dev/null && \
  python3 -c '$summarize' '$WORK/tune.jsonl'"
# Issue 57: what the measurement protocol costs. Since session 89 GPU boards' defaults are 3 samples
# of 5 ms and a 50 ms re-timing warm-up (session 89 measured them here as tune_fast: 4.25 / 4.92 a
# second against 3.11 / 3.10, the same verdicts); tune_old times the CPU protocol (5 of 10 ms, 300 ms)
# for the A/B the next session can repeat (run it beside tune_once).
step tune_fast 90 bash -c "$tune --tune-flag=--repeat=3 --tune-flag=--min-repeat-ms=5 --tune-flag=--retime-warmup-ms=50"
step tune_old 90 bash -c "$tune --tune-flag=--repeat=5 --tune-flag=--min-repeat-ms=10 --tune-flag=--retime-warmup-ms=300"
# Issue 57: session 90's search one batch ahead and sequential re-timing, against neither (run it
# beside tune_once: candidates a second, "beside the measuring", the re-timing's seconds, verdicts).
step tune_serial 90 bash -c "$tune --tune-flag=--no-search-ahead --tune-flag=--retime-drop=0"
# Issue 57: whether tuning pays on a GPU model now that the cost model sees the products (session
# 88: the features described the shared-memory copy): a 2-layer BERT tuned 120 trials, then timed
# on the board tuned against its default build (the "model" line; session 57: 1.00x after 40).
step tune_model 240 bash -c "python3 scripts/export_model.py bert2 -o '$WORK/bert2.onnx' > /dev/null && \
  python3 bench/gpu_bench.py '$bin' --groups '' --tune ${TUNE_MODEL_TRIALS:-120} --rounds 1 --tune-model '$WORK/bert2.onnx'"
# Issue 56: the zoo against PyTorch, fp32, as far as the budget goes (rows print as they finish).
step zoo 600 python3 bench/gpu_model_bench.py "$bin" --rounds 3 --json "$WORK/zoo.json" \
  --models "${ZOO_MODELS:-squeezenet1_1,shufflenet_v2_x1_0,efficientnet_b0,densenet121,mnasnet1_0,googlenet,convnext_tiny,mobilenet_v3_large,regnet_x_400mf,inception_v3,swin_t,vit_b_16,wide_resnet50_2}"
if [[ -n "$ONLY" ]]; then
  IFS=, read -ra order <<<"$ONLY"
else
  order=("${names[@]}")
fi
for name in "${order[@]}"; do
  if [[ -z "${limits[$name]+set}" ]]; then
    log "no step named '$name' (steps: ${names[*]})"
    continue
  fi
  run_step "$name"
done
log "done"
collect
