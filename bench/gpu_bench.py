#!/usr/bin/env python3
"""tunefarm's CUDA kernels against PyTorch's cuBLAS / cuDNN on one NVIDIA GPU.

For each workload: compiles it with `tunefarm compile -t 'cuda -arch=sm_XY'` (the GPU's own
architecture) once with the default config and, with --db, once with the best tuned config of
that database; loads each PTX module through the CUDA driver (CuPy's RawModule: cuModuleLoad
and cuLaunchKernel, the calls tunefarm's board runtime makes) and launches it with the grid
and block of its sidecar; checks its output against PyTorch in fp32 (TF32 off on both sides);
then times ours and PyTorch's call in the same process with CUDA events, interleaved: rounds
of (ours, peer) blocks of --calls launches each, medians over the rounds. Prints per workload
the milliseconds and the ratio ours/peer of speeds (above 1: ours is faster), and geometric
means per group.

--tune N first tunes every workload N trials on this GPU through the farm (a tracker and a
`tunefarm-rpc-server --device cuda:0` on loopback, `tunefarm tune --tracker`), into --db (a
temporary database when none is given), so one call measures default and tuned. Each tune
prints its candidates a second and tune's own `time` line (building, measuring, the overlap);
--tune-flag passes flags to `tune` (--tune-flag=--repeat=3: the protocol's share of the time;
--tune-flag=--json with --tune-log FILE keeps every measurement's event: where its time went);
--board-flag=--runner-per-measurement starts the board with a runner per candidate, as before
its measuring process was kept (issue 57's comparison; bench/gpu_session.sh step tune_rate);
--tune-model M.onnx also tunes a model there (`tune --model`, N trials over its tasks) and prints
its tasks' estimate and the model timed on the board, tuned against its default build (step
tune_model).

Needs: an NVIDIA GPU with its driver, PyTorch with CUDA, CuPy. Without them it says which is
missing and exits 2.

--precision tf32|fp16|bf16 times the tensor-core kernels (dense_tc.cuda and conv2d_tc.cuda: the
matmul, batch_matmul and convolution workloads with `precision=...`; depthwise ones have no
tensor-core template and are skipped) against PyTorch in the same precision: TF32 allowed for tf32, the peer's
operands .half() / .bfloat16() for fp16 / bf16 (ours read float32 operands and round them;
with --half-operands ours are 16-bit too: dtype=float16 / bfloat16 with B given as N x K,
trans_b=1, and the peer's B the transposed view of the same tensor; matmul and batch_matmul;
convolutions read their weights in 16 bits, weight_dtype, and their data in float32, as a
--precision fp16|bf16 cuda model's do, against the peer's 16-bit data and weights).
It checks ours against the float32 product of the rounded operands (fp16, bf16) or against the
float32 product (tf32: within 2e-3 of the largest value), and prints TFLOPS and the share of the
tensor-core peak (dense: 989 TFLOPS fp16/bf16 and 495 TF32 on an H100 or H200, 312 / 156 on an
A100; --peak-tflops for another GPU).

--cpu-check runs on any machine with PyTorch: it compiles each workload for this CPU instead,
calls it through ctypes and checks it against the same PyTorch reference, argument order and
layouts included (what the GPU run relies on; the tests run it: tests/bench/gpu_bench_cpu_check);
with --half-operands the 16-bit workloads too (CPUs compute them: dense.cpu; the convolutions of
16-bit weights are tensor-core only, skipped).

Usage: bench/gpu_bench.py BUILD/bin/tunefarm [--db DB] [--tune 200] [--groups dense,bert,resnet,grouped,other]
                          [--precision tf32|fp16|bf16 [--half-operands]] [--without-pass PASS]
       bench/gpu_bench.py BUILD/bin/tunefarm --models resnet18,resnet50,mobilenet_v2,bert_base  (whole
       models: bench/gpu_model_bench.py)
"""
import argparse
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

# The table (issue 36): squares, BERT-base layers, ResNet-50 layers, and the kernels
# that already win (depthwise, batch_matmul, a 1x1 convolution).
GROUPS = {
    "dense": ["matmul(M=1024,N=1024,K=1024)", "matmul(M=2048,N=2048,K=2048)", "matmul(M=4096,N=4096,K=4096)"],
    "bert": ["matmul(M=128,N=2304,K=768,epilogue=bias)", "matmul(M=128,N=768,K=768,epilogue=bias)",
             "matmul(M=128,N=3072,K=768,epilogue=bias)", "matmul(M=128,N=768,K=3072,epilogue=bias)"],
    "resnet": ["conv2d_nchw(N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3)",
               "conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)",
               "conv2d_nchw(N=1,C=128,H=28,W=28,K=128,R=3,S=3,pad=1)",
               "conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1)",
               "conv2d_nchw(N=1,C=512,H=7,W=7,K=512,R=3,S=3,pad=1)",
               "conv2d_nchw(N=1,C=1024,H=14,W=14,K=256,R=1,S=1)",
               "conv2d_nchw(N=1,C=2048,H=7,W=7,K=512,R=1,S=1)"],
    # Grouped 3x3 layers (issue 56): ResNeXt-50 32x4d's four stages, RegNetY-400MF's groups of 8.
    "grouped": ["conv2d_nchw(N=1,C=128,H=56,W=56,K=128,R=3,S=3,pad=1,group=32)",
                "conv2d_nchw(N=1,C=256,H=28,W=28,K=256,R=3,S=3,pad=1,group=32)",
                "conv2d_nchw(N=1,C=512,H=14,W=14,K=512,R=3,S=3,pad=1,group=32)",
                "conv2d_nchw(N=1,C=1024,H=7,W=7,K=1024,R=3,S=3,pad=1,group=32)",
                "conv2d_nchw(N=1,C=104,H=28,W=28,K=104,R=3,S=3,pad=1,group=13)",
                "conv2d_nchw(N=1,C=208,H=14,W=14,K=208,R=3,S=3,pad=1,group=26)"],
    "other": ["conv2d_nchw(N=1,C=64,H=56,W=56,K=256,R=1,S=1)",
              "depthwise_conv2d_nchw(N=1,C=144,H=56,W=56,R=3,S=3,pad=1)",
              "batch_matmul(B=12,M=128,N=128,K=64)"],
}


def fail(msg):
    print("gpu_bench: " + msg, file=sys.stderr)
    sys.exit(2)


def params_of(workload):
    """'conv2d_nchw(N=1,C=3,...)' -> ('conv2d_nchw', {'N': 1, ...}) (epilogue kept as text)."""
    m = re.fullmatch(r"(\w+)\((.*)\)", workload)
    if not m:
        fail("not a workload: " + workload)
    p = {}
    for kv in m.group(2).split(","):
        k, v = kv.split("=")
        p[k] = v if k in ("epilogue", "precision", "dtype", "weight_dtype") else int(v)
    return m.group(1), p


def reference(torch, op, p, args):
    """PyTorch's result for the workload on `args` (tensors in the kernel's argument order,
    the output last), in the kernel's output layout."""
    F = torch.nn.functional
    ins = args[:-1]
    ep = p.get("epilogue", "none")
    if op in ("matmul", "batch_matmul"):
        # trans_b=1: B given as [N][K] (a transposed view: cuBLAS's TN GEMM, no copy).
        y = torch.matmul(ins[0], ins[1].transpose(-1, -2) if p.get("trans_b") else ins[1])
        if ep.startswith("bias"):
            y = y + ins[2]
    else:
        stride, pad, dil = p.get("stride", 1), p.get("pad", 0), p.get("dilation", 1)
        x, w = ins[0], ins[1]
        bias = ins[2] if ep.startswith("bias") else None
        if op == "conv2d_nchw":
            y = F.conv2d(x, w, bias, stride, pad, dil, groups=p.get("group", 1))
        elif op == "depthwise_conv2d_nchw":
            y = F.conv2d(x, w, bias, stride, pad, dil, groups=x.shape[1])
        elif op == "conv2d_nhwc":
            y = F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), bias, stride, pad, dil).permute(0, 2, 3, 1)
        else:
            fail("no PyTorch reference for " + op)
    if ep.endswith("relu"):
        y = torch.relu(y)
    return y.contiguous()


class Kernel:
    """A tunefarm PTX module loaded through the driver, with its launch configuration: the
    function's kernel, then those the same call launches after it (split-K's sum), all on the
    arguments followed by the workspaces."""

    def __init__(self, cp, torch, ptx_path):
        with open(ptx_path + ".json") as f:
            self.side = json.load(f)
        self.module = cp.RawModule(path=ptx_path)
        launch = self.side["launch"]
        self.steps = []
        for k in [dict(launch, function=self.side["function"])] + launch.get("then", []):
            fn = self.module.get_function(k["function"])
            shared = k.get("dynamic_shared_bytes", 0)
            if shared > 48 * 1024:  # past the static limit the function must be allowed it
                fn.max_dynamic_shared_size_bytes = shared
            self.steps.append((fn, tuple(k["grid"]), tuple(k["block"]), shared))
        self.workspaces = [torch.empty(n, device="cuda") for n in launch.get("workspace_elements", [])]
        self.extra = tuple(cp.uint64(w.data_ptr()) for w in self.workspaces)
        self.config = self.side["config"]
        self.source = self.side["config_source"]

    def __call__(self, ptrs):
        args = ptrs + self.extra
        for fn, grid, block, shared in self.steps:
            fn(grid, block, args, shared_mem=shared)


# Dense tensor-core peaks (TFLOPS) by GPU name and precision.
PEAKS = {"H100": {"tf32": 494.7, "fp16": 989.4, "bf16": 989.4}, "H200": {"tf32": 494.7, "fp16": 989.4, "bf16": 989.4},
         "A100": {"tf32": 156.0, "fp16": 312.0, "bf16": 312.0}}


def torch_dtype(torch, name):
    """The torch dtype of a kernel argument's declared `dtype` (a sidecar's; float32 when none)."""
    return {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(name, torch.float32)


def with_precision(workload, precision, half_operands=False):
    """The workload at `precision`, or None when no tensor-core template computes it; with
    half_operands (fp16, bf16) its operands in 16 bits (dtype=float16 / bfloat16, B given as
    [N][K]: matmul and batch_matmul), or a convolution's weights (weight_dtype, the data float32:
    what a --precision fp16|bf16 cuda model's convolutions read). A workload that names its types
    (dtype=, weight_dtype= or precision=: a model's kernel as `compile --model` lists it) is
    returned as it is."""
    op, p = params_of(workload)
    if precision == "fp32" or any(k in p for k in ("dtype", "weight_dtype", "precision")):
        return workload
    if op not in ("matmul", "batch_matmul", "conv2d_nchw", "conv2d_nhwc") or p.get("group", 1) != 1:
        return None  # depthwise and grouped: no tensor-core template
    if half_operands:
        t = {"fp16": "float16", "bf16": "bfloat16"}[precision]
        if op not in ("matmul", "batch_matmul"):
            return workload[:-1] + ",weight_dtype=" + t + ")"
        # B as [N][K] (trans_b=1), so that both tiles are cp.async copies of rows along K.
        return workload[:-1] + ",trans_b=1,dtype=" + t + ")"
    return workload[:-1] + ",precision=" + precision + ")"


def flops_of(op, p):
    if op in ("matmul", "batch_matmul"):
        return 2 * p.get("B", 1) * p["M"] * p["N"] * p["K"]
    if op in ("conv2d_nchw", "conv2d_nhwc"):
        def out(n, k):
            return (n + 2 * p.get("pad", 0) - p.get("dilation", 1) * (k - 1) - 1) // p.get("stride", 1) + 1
        per_filter = p["C"] // p.get("group", 1) * p["R"] * p["S"]
        return 2 * p["N"] * p["K"] * out(p["H"], p["R"]) * out(p["W"], p["S"]) * per_filter
    return 0


def compile_kernel(tunefarm, workload, target, out, db, config=None, skip_pass=None):
    """Compiles for `target` (None: this machine) with the default config (knobs of `config`
    set as given), or the best in `db`; without the lowering pass `skip_pass` if given."""
    cmd = [tunefarm, "compile", "-w", workload, "--emit", "so", "-o", out, "--json"]
    cmd += ["--skip-pass", skip_pass] if skip_pass else []
    cmd += ["-t", target] if target else []
    cmd += ["--db", db] if db else ["--no-db"]
    cmd += ["-c", config] if config and not db else []
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail("compile of %s failed:\n%s" % (workload, r.stderr))
    return out


def time_ms(torch, fn, calls):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(proc, pattern, seconds):
    """Reads the daemon's output until a line matches; fails if it ends or takes too long."""
    deadline = time.time() + seconds
    seen = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                fail("daemon exited:\n" + "".join(seen))
            continue
        seen.append(line)
        if re.search(pattern, line):
            return line
    fail("daemon did not print %r in %d s:\n%s" % (pattern, seconds, "".join(seen)))


def tune_all(tunefarm, workloads, target, db, trials, log, board_flags=(), tune_flags=(), models=()):
    """Tunes every workload, then every ONNX model (tune --model), `trials` trials each on this GPU
    through a loopback farm (the board started with `board_flags` too), printing each run's rate,
    where its time went and what it found against the default."""
    bindir = os.path.dirname(os.path.abspath(tunefarm))
    port = free_port()
    tracker = subprocess.Popen([os.path.join(bindir, "tunefarm-tracker"), "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    board = None
    try:
        wait_for(tracker, r"listening on", 30)
        board = subprocess.Popen([os.path.join(bindir, "tunefarm-rpc-server"), "--tracker", "127.0.0.1:%d" % port,
                                  "--device", "cuda:0", *board_flags],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = wait_for(board, r"registered", 90)
        m = re.search(r"\(key ([^)]+)\)", line)
        key = m.group(1) if m else "cuda-sm%s" % target.split("sm_")[1]
        for what, name in [("-w", w) for w in workloads] + [("--model", m) for m in models]:
            t0 = time.time()
            r = subprocess.run([tunefarm, "tune", what, name, "--tracker", "127.0.0.1:%d" % port, "--key", key,
                                "--trials", str(trials), "--db", db, *tune_flags], capture_output=True, text=True)
            rate = trials / max(time.time() - t0, 1e-9)
            print("tuned %s: %d trials in %.0f s (%.2f candidates/s)%s" %
                  (name, trials, time.time() - t0, rate, "" if r.returncode == 0 else " FAILED"), flush=True)
            for line in r.stdout.splitlines():
                # tune's own account: building, measuring, overlap; and what the tuning found
                # against the default, re-timed side by side ("default ... speedup 1.08x").
                # A model's: its tasks' estimate and the model timed on the board, tuned against default.
                if line.startswith(("time ", "default ", "tasks ", "model ", "estimate ")):
                    print("  " + line, flush=True)
            for line in r.stderr.splitlines():
                # cubins assembled by ptxas, or PTX and why; the cost model's share of the run
                # (features of the configs its annealing visits, fits, annealing)
                if line.startswith(("kernels ", "cost model: ")):
                    print("  " + line, flush=True)
            log.write(r.stdout + r.stderr)
            if r.returncode != 0:
                print(r.stderr[-2000:], file=sys.stderr)
    finally:
        for p in (board, tracker):
            if p:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


def cpu_check(a, groups):
    """Each workload compiled for this CPU, run through ctypes, against PyTorch's reference."""
    import ctypes
    import torch
    tmp = tempfile.mkdtemp(prefix="gpu_bench_cpu.")
    bad = 0
    torch.manual_seed(0)
    for i, (group, w) in enumerate(groups):
        op, p = params_of(w)
        # One path each: dlopen keeps a path's first library.
        path = compile_kernel(a.tunefarm, w, None, os.path.join(tmp, "k%d.so" % i), None)
        with open(path + ".json") as f:
            side = json.load(f)
        lib = ctypes.CDLL(path)
        fn = getattr(lib, side["function"])
        # Inputs of their declared type (--half-operands: 16-bit bits, as on the GPU).
        args = [torch.randn(*x["shape"]).to(torch_dtype(torch, x.get("dtype"))) if x["role"] == "input"
                else torch.full(x["shape"], float("nan")) for x in side["args"]]
        fn.restype = ctypes.c_int
        status = fn(*[ctypes.c_void_p(t.data_ptr()) for t in args])
        ref = reference(torch, op, p, [t.float() for t in args])
        err = (args[-1] - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
        ok = status == 0 and err < 1e-4
        bad += not ok
        print("%-5s %-62s max error %.2g of the largest value%s" % ("ok" if ok else "BAD", w, err,
                                                                    "" if status == 0 else " status %d" % status),
              flush=True)
        del lib
    shutil.rmtree(tmp, ignore_errors=True)
    if bad:
        fail("%d of %d workloads do not match PyTorch" % (bad, len(groups)))


def geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tunefarm", help="the tunefarm program (build/bin/tunefarm)")
    ap.add_argument("--db", help="tuning database: also time each workload's tuned config")
    ap.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                    help="first tune every workload this many trials on this GPU (into --db, or a temporary one)")
    ap.add_argument("--tune-model", action="append", default=[], metavar="ONNX",
                    help="with --tune: also tune this model (tune --model, the trials shared by its tasks) on the same "
                         "loopback board, which then times it tuned against its default build (repeatable)")
    ap.add_argument("--tune-log", metavar="FILE",
                    help="with --tune: write every tune's whole output here (with --tune-flag=--json, its events)")
    ap.add_argument("--tune-flag", action="append", default=[],
                    help="with --tune: a flag for `tunefarm tune` (repeatable), e.g. --tune-flag=--repeat=3 "
                         "--tune-flag=--min-repeat-ms=5: what a measurement's protocol costs in candidates a second")
    ap.add_argument("--board-flag", action="append", default=[],
                    help="with --tune: a flag for the loopback board (repeatable), e.g. --board-flag=--runner-per-measurement "
                         "to compare with a runner started per candidate")
    ap.add_argument("--groups", default="dense,bert,resnet,grouped,other", help="comma-separated: " + ",".join(GROUPS))
    ap.add_argument("-w", "--workload", action="append", default=[], help="a workload of your own (repeatable)")
    ap.add_argument("-c", "--config", help="knobs (JSON) to set in the default config of every workload, e.g. "
                    "'{\"lanes_n\": 4}' (the rest default): experiments with one knob")
    ap.add_argument("--without-pass", metavar="PASS",
                    help="also time each default built without this lowering pass (tunefarm compile --skip-pass), "
                         "interleaved with the peer as the default is: an A/B of the pass, e.g. pair_fragments")
    ap.add_argument("--calls", type=int, default=20, help="launches per timed block")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved (ours, peer) blocks per kernel")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--cpu-check", action="store_true",
                    help="no GPU: check the workloads compiled for this CPU against the PyTorch reference")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"],
                    help="tensor-core kernels (matmul, batch_matmul) against PyTorch in the same precision")
    ap.add_argument("--half-operands", action="store_true",
                    help="with --precision fp16|bf16: our operands in 16 bits too (dtype=float16|bfloat16 "
                    "workloads, as the peer's: matmul and batch_matmul; convolutions' weights only, weight_dtype)")
    ap.add_argument("--peak-tflops", type=float, help="the GPU's dense tensor-core peak at --precision "
                    "(known: H100, H200, A100)")
    ap.add_argument("--models", help="time whole models instead, e.g. resnet18,resnet50,mobilenet_v2,bert_base "
                    "(bench/gpu_model_bench.py, with --db, --json, --cpu-check and --precision passed on)")
    a = ap.parse_args()
    if a.models:
        bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_model_bench.py")
        args = [sys.executable, bench, a.tunefarm, "--models", a.models]
        args += (["--db", a.db] if a.db else []) + (["--json", a.json] if a.json else [])
        args += ["--cpu-check"] if a.cpu_check else []
        args += ["--precision", a.precision]
        os.execv(sys.executable, args)
    groups = [(g, w) for g in a.groups.split(",") if g for w in GROUPS.get(g) or fail("unknown group " + g)]
    groups += [("given", w) for w in a.workload]
    if a.tune_model and not a.tune:
        fail("--tune-model tunes through --tune's loopback board: give --tune TRIALS too")
    if a.tune_log and not a.tune:
        fail("--tune-log keeps --tune's output: give --tune TRIALS too")
    for m in a.tune_model:
        if not os.path.isfile(m):
            fail("--tune-model %s: no such file" % m)
    if a.half_operands and a.precision not in ("fp16", "bf16"):
        fail("--half-operands takes --precision fp16 or bf16, not %s" % a.precision)
    if a.precision != "fp32":
        if a.cpu_check and not a.half_operands:
            fail("--cpu-check compiles for this CPU, which has no tensor-core template: --precision %s kernels run "
                 "on sm_80+ GPUs only (tests/compiler/tensor_core_test.cc checks them in the emulated warps)"
                 % a.precision)
        for g, w in groups:
            if with_precision(w, a.precision, a.half_operands) is None:
                print("skipped %s: no tensor-core template for it yet" % w)
        groups = [(g, with_precision(w, a.precision, a.half_operands)) for g, w in groups
                  if with_precision(w, a.precision, a.half_operands)]
        if not groups:
            fail("none of the workloads has a tensor-core template (matmul, batch_matmul, conv2d_nchw, conv2d_nhwc)")
    if a.cpu_check:
        # Float32 data times 16-bit weights rounds the data as tensor cores do: CPUs refuse it.
        for g, w in groups:
            if "weight_dtype=" in w:
                print("skipped %s: tensor cores only (no CPU template)" % w)
        return cpu_check(a, [(g, w) for g, w in groups if "weight_dtype=" not in w])

    try:
        import torch
    except ImportError:
        fail("PyTorch is not installed: it is the peer (cuBLAS, cuDNN)")
    if not torch.cuda.is_available():
        fail("PyTorch sees no CUDA GPU on this machine")
    try:
        import cupy as cp
    except ImportError:
        fail("CuPy is not installed: it loads tunefarm's PTX through the driver")
    if not shutil.which(a.tunefarm) and not os.path.exists(a.tunefarm):
        fail("no tunefarm program at " + a.tunefarm)
    def allow_tf32(on):
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on

    allow_tf32(False)
    torch.backends.cudnn.benchmark = True
    major, minor = torch.cuda.get_device_capability()
    target = "cuda -arch=sm_%d%d" % (major, minor)
    name = torch.cuda.get_device_name()
    peak = a.peak_tflops or next((v[a.precision] for k, v in PEAKS.items() if k in name and a.precision in v), None)
    print("GPU: %s (%s); PyTorch %s, cuDNN %s; %s" %
          (name, target, torch.__version__, torch.backends.cudnn.version(),
           "fp32, TF32 off" if a.precision == "fp32" else
           "%s on both sides (tensor-core peak %s TFLOPS)" % (a.precision, peak or "unknown")), flush=True)
    peer_type = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)

    tmp = tempfile.mkdtemp(prefix="gpu_bench.")
    db = a.db
    if a.tune:
        db = db or os.path.join(tmp, "tuning.db")
        with open(a.tune_log or os.path.join(tmp, "tune.log"), "w") as log:
            tune_all(a.tunefarm, [w for _, w in groups], target, db, a.tune, log, a.board_flag, a.tune_flag,
                     a.tune_model)

    results = []
    torch.manual_seed(0)
    for group, w in groups:
        op, p = params_of(w)
        # A file of its own per kernel: CuPy caches modules by path, so a reused path would
        # launch the previous workload's kernel.
        n = len(results)
        builds = [("default", compile_kernel(a.tunefarm, w, target, os.path.join(tmp, "d%d.ptx" % n), None, a.config))]
        if db:
            builds.append(("tuned", compile_kernel(a.tunefarm, w, target, os.path.join(tmp, "t%d.ptx" % n), db)))
        if a.without_pass:
            builds.append(("without", compile_kernel(a.tunefarm, w, target, os.path.join(tmp, "w%d.ptx" % n), None,
                                                     a.config, a.without_pass)))
        row = {"group": group, "workload": w}
        for tag, path in builds:
            k = Kernel(cp, torch, path)
            if tag == "tuned" and k.source == "default":
                row["tuned"] = None  # nothing tuned for it in the database
                continue
            # Inputs of their declared type (16-bit operands: dtype=float16 / bfloat16).
            args = [torch.randn(*x["shape"], device="cuda").to(torch_dtype(torch, x.get("dtype")))
                    if x["role"] == "input" else torch.empty(*x["shape"], device="cuda") for x in k.side["args"]]
            ptrs = tuple(cp.uint64(t.data_ptr()) for t in args)  # raw device pointers
            # The check: float32 products (TF32 off) of the operands as the kernel rounds them
            # (fp16, bf16), or of the operands as they are (tf32: its rounding is cvt.rna's,
            # which PyTorch has no operation for, so a looser bound).
            checked = [t.to(peer_type).float() if peer_type and i < 2 else t for i, t in enumerate(args)]
            ref = reference(torch, op, p, checked)
            k(ptrs)
            torch.cuda.synchronize()
            err = (args[-1] - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
            if not err < (2e-3 if a.precision == "tf32" else 1e-4):
                print("MISMATCH %s %s: max error %.3g of the output's largest value (config %s)" %
                      (w, tag, err, json.dumps(k.config)), flush=True)
            # The peer in the same precision: TF32 allowed, or its operands in 16 bits (made
            # once, outside the timing; its output is 16-bit too, as PyTorch users get it).
            allow_tf32(a.precision == "tf32")
            peer_args = [t.to(peer_type) if peer_type and i < len(args) - 1 else t for i, t in enumerate(args)]
            peer = lambda: reference(torch, op, p, peer_args)  # noqa: E731
            # Warm up both (cuDNN picks its algorithm on the first calls).
            for _ in range(3):
                time_ms(torch, lambda: k(ptrs), a.calls)
                time_ms(torch, peer, a.calls)
            ours, theirs = [], []
            for _ in range(a.rounds):
                ours.append(time_ms(torch, lambda: k(ptrs), a.calls))
                theirs.append(time_ms(torch, peer, a.calls))
            o, t = statistics.median(ours), statistics.median(theirs)
            spread = (max(ours) - min(ours)) / o
            allow_tf32(False)
            flops = flops_of(op, p)
            row[tag] = {"ms": o, "peer_ms": t, "ratio": t / o, "max_rel_error": err, "spread": spread,
                        "config": k.config, "config_source": k.source,
                        "tflops": flops / o / 1e9 if flops else None, "peer_tflops": flops / t / 1e9 if flops else None}
            if tag == "default":
                row["peer_ms"] = t
        results.append(row)
        d, tu, wo = row["default"], row.get("tuned"), row.get("without")
        tflops = ""
        if a.precision != "fp32" and d["tflops"]:
            tflops = "  %6.1f vs %6.1f TFLOPS" % (d["tflops"], d["peer_tflops"])
            if peak:
                tflops += " (%.0f%% vs %.0f%% of peak)" % (100 * d["tflops"] / peak, 100 * d["peer_tflops"] / peak)
        print("%-7s %-62s ours %8.4f ms  peer %8.4f ms  ratio %5.2f%s%s" %
              (group, w, d["ms"], d["peer_ms"], d["ratio"],
               "  tuned %8.4f ms ratio %5.2f" % (tu["ms"], tu["ratio"]) if tu else "", tflops), flush=True)
        if wo:
            print("        without %-54s ours %8.4f ms  peer %8.4f ms  ratio %5.2f  (default / without: %.3f)" %
                  (a.without_pass, wo["ms"], wo["peer_ms"], wo["ratio"], d["ratio"] / wo["ratio"]), flush=True)

    print()
    for g in dict.fromkeys(r["group"] for r in results):
        rows = [r for r in results if r["group"] == g]
        best = [max(r["default"]["ratio"], (r.get("tuned") or {}).get("ratio", 0)) for r in rows]
        print("%-7s geomean ratio default %.2f, best of default and tuned %.2f, lowest %.2f" %
              (g, geomean([r["default"]["ratio"] for r in rows]), geomean(best), min(best)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "target": target, "precision": a.precision,
                       "peak_tflops": peak, "results": results}, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
