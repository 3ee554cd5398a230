#!/usr/bin/env python3
"""Whole models on one NVIDIA GPU: tunefarm's compiled library against PyTorch, fp32, TF32 off,
batch 1 (issue 37's table: ResNet-18, ResNet-50, MobileNet-v2, a BERT-base encoder of 12
layers at sequence 128).

For each model: exports it to ONNX with seeded random weights (scripts/export_model.py),
compiles it with `tunefarm compile --model -t 'cuda -arch=sm_XY'` (the GPU's own architecture;
with --db also with that database's tuned configs), loads the library with ctypes and calls
`tf_model_run_device` on PyTorch's CUDA tensors and current stream (no copies); checks its
output against PyTorch's; then times, in the same process with CUDA events, interleaved in
rounds of --calls calls each: ours as called (one launch per kernel), ours replayed as a CUDA
graph (the library's launches captured by torch.cuda.graph), PyTorch eager and PyTorch
replayed as a CUDA graph. Prints per model the milliseconds and the ratios peer/ours of the
graph replays and of eager (above 1: ours is faster).

Needs: an NVIDIA GPU with its driver and PyTorch with CUDA (and torchvision). Without them
it says which is missing and exits 2.

--precision tf32|fp16|bf16 compiles with `--precision` (the MatMul and Gemm products on tensor
cores: docs/precision.md) and times PyTorch in the same precision: TF32 allowed, or the model
and its input .half() / .bfloat16(). Both outputs are compared with the float32 model's (TF32
off); the issue's bounds are 1e-3 of the largest value for tf32 and 1e-2 for fp16 and bf16.

--cpu-check runs on any machine with PyTorch: each model compiled with --emulate-gpu (the
same GPU kernels, run serially on this CPU) through the library's host entry point against
PyTorch on the CPU, and compiled for the GPU target to check that it builds. Slow for the
large models (every kernel's grid runs on one core): use it with --models resnet18 or bert2.

--buckets 1,8,32 (issue 56's shape buckets): each model exported with a symbolic batch, compiled
once with `--dim batch=1,8,32` (one library, a launch plan per size) and once per size alone
(`--dim batch=N`); per size, both outputs checked against PyTorch at that batch and the
CUDA-graph replays of the bucket (tf_model_run_device_bucket), the static build and PyTorch
timed interleaved: "static / bucket" is the goal's ratio (within 5%). With --cpu-check: each
bucket of the emulated library (tf_model_run_bucket) against PyTorch on the CPU.

Usage: bench/gpu_model_bench.py BUILD/bin/tunefarm [--models resnet18,resnet50,mobilenet_v2,bert_base]
                                [--db DB] [--calls 20] [--rounds 5] [--json FILE] [--cpu-check]
                                [--precision tf32|fp16|bf16] [--buckets 1,8,32]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import gpu_bench  # noqa: E402  (bench/: its CUDA-event timing and geometric mean)


def fail(msg):
    print("gpu_model_bench: " + msg, file=sys.stderr)
    sys.exit(2)


class GpuLibrary:
    """A model library compiled for a GPU, called on device pointers through ctypes."""

    def __init__(self, path, device):
        self.lib = ctypes.CDLL(path)
        self.lib.tf_model_run_device.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                                                 ctypes.c_void_p]
        self.lib.tf_model_run_device.restype = ctypes.c_int32
        self.lib.tf_model_run_device_bucket.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_uint64),
                                                        ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p]
        self.lib.tf_model_run_device_bucket.restype = ctypes.c_int32
        self.lib.tf_model_last_error.restype = ctypes.c_char_p
        if self.lib.tf_model_set_device(device) != 0:
            fail("tf_model_set_device: " + self.lib.tf_model_last_error().decode())

    def run(self, inputs, outputs, stream, bucket=None):
        """tf_model_run_device, or tf_model_run_device_bucket for shape bucket `bucket`."""
        ins = (ctypes.c_uint64 * len(inputs))(*[t.data_ptr() for t in inputs])
        outs = (ctypes.c_uint64 * len(outputs))(*[t.data_ptr() for t in outputs])
        if bucket is None:
            status = self.lib.tf_model_run_device(ins, outs, ctypes.c_void_p(stream))
        else:
            status = self.lib.tf_model_run_device_bucket(bucket, ins, outs, ctypes.c_void_p(stream))
        if status != 0:
            fail("tf_model_run_device%s returned %d: %s" % ("" if bucket is None else "_bucket(%d)" % bucket, status,
                                                           self.lib.tf_model_last_error().decode()))


def compile_model(tunefarm, onnx, out, target, db=None, emulate=False, precision="fp32", flags=()):
    cmd = [tunefarm, "compile", "--model", onnx, "-t", target, "-o", out, "--precision", precision, *flags]
    cmd += ["--db", db] if db else ["--no-db"]
    cmd += ["--emulate-gpu"] if emulate else []
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail("compile of %s failed:\n%s" % (onnx, r.stderr))
    return time.time() - t0


def max_rel_error(got, want):
    return (got - want).abs().max().item() / max(want.abs().max().item(), 1e-30)


def cpu_check(a, models):
    """The models' GPU kernels, emulated on this CPU, against PyTorch on the CPU."""
    import export_model
    import numpy as np
    import torch
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        for name in models:
            onnx = os.path.join(d, name + ".onnx")
            model, x = export_model.export(name, onnx)
            with torch.no_grad():
                want = model(x)
            xs = np.ascontiguousarray(x.numpy())
            ins = (ctypes.c_void_p * 1)(xs.ctypes.data)
            for level in [None] + a.also_opt_level:
                flags = () if level is None else ("-O", str(level))
                tag = name + ("" if level is None else "-O%d" % level)
                compile_model(a.tunefarm, onnx, os.path.join(d, tag + ".gpu.so"), "cuda -arch=sm_90", flags=flags)
                lib_path = os.path.join(d, tag + ".emu.so")
                seconds = compile_model(a.tunefarm, onnx, lib_path, "cuda -arch=sm_90", emulate=True, flags=flags)
                lib = ctypes.CDLL(lib_path)
                got = np.zeros(tuple(want.shape), np.float32)
                outs = (ctypes.c_void_p * 1)(got.ctypes.data)
                status = lib.tf_model_run(ins, outs, None)
                err = max_rel_error(torch.from_numpy(got), want)
                ok = status == 0 and err < 1e-3
                bad += not ok
                print("%-5s %-14s max error %.2g of the largest value (compiled in %.1f s)%s" %
                      ("ok" if ok else "BAD", tag, err, seconds, "" if status == 0 else " status %d" % status),
                      flush=True)
    if bad:
        fail("%d of %d models do not match PyTorch" % (bad, len(models)))


def time_interleaved(variants, a, time_ms, row):
    """Each of `variants` (name: function) timed in a.rounds interleaved rounds of a.calls calls
    after one untimed block each (cuDNN picks its algorithms): row[name_ms], the median, and
    row[name_spread], (max - min) / median."""
    for fn in variants.values():
        time_ms(fn, a.calls)
    samples = {k: [] for k in variants}
    for _ in range(a.rounds):
        for k, fn in variants.items():
            samples[k].append(time_ms(fn, a.calls))
    for k, v in samples.items():
        row[k + "_ms"] = statistics.median(v)
        row[k + "_spread"] = (max(v) - min(v)) / statistics.median(v)


def batch_of(x, n):
    """A seeded input like `x` with batch n."""
    import torch
    return torch.randn(n, *x.shape[1:], generator=torch.Generator().manual_seed(n)).to(x.dtype)


def cpu_check_buckets(a, models, sizes):
    """Each bucket of the models' emulated libraries against PyTorch on the CPU."""
    import export_model
    import numpy as np
    import torch
    bad = 0
    dim = ("--dim", "batch=" + ",".join(map(str, sizes)))
    with tempfile.TemporaryDirectory() as d:
        for name in models:
            onnx = os.path.join(d, name + ".onnx")
            model, x = export_model.export(name, onnx, dynamic_batch=True)
            compile_model(a.tunefarm, onnx, os.path.join(d, name + ".gpu.so"), "cuda -arch=sm_90", flags=dim)
            lib_path = os.path.join(d, name + ".emu.so")
            seconds = compile_model(a.tunefarm, onnx, lib_path, "cuda -arch=sm_90", emulate=True, flags=dim)
            lib = ctypes.CDLL(lib_path)
            lib.tf_model_run_bucket.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            if lib.tf_model_num_buckets() != len(sizes):
                fail("%s has %d buckets, not %d" % (lib_path, lib.tf_model_num_buckets(), len(sizes)))
            for b, n in enumerate(sizes):
                xn = batch_of(x, n)
                with torch.no_grad():
                    want = model(xn)
                xs = np.ascontiguousarray(xn.numpy())
                got = np.zeros(tuple(want.shape), np.float32)
                ins = (ctypes.c_void_p * 1)(xs.ctypes.data)
                outs = (ctypes.c_void_p * 1)(got.ctypes.data)
                status = lib.tf_model_run_bucket(b, ins, outs, None)
                err = max_rel_error(torch.from_numpy(got), want)
                ok = status == 0 and err < 1e-3
                bad += not ok
                print("%-5s %-14s bucket %d (batch %d): max error %.2g of the largest value (compiled in %.1f s)%s" %
                      ("ok" if ok else "BAD", name, b, n, err, seconds, "" if status == 0 else " status %d" % status),
                      flush=True)
    if bad:
        fail("%d buckets do not match PyTorch" % bad)


def bench_buckets(a, models, sizes, torch, target, device, time_ms, graphed):
    """Per model and size: a bucket of the --dim batch=SIZES library against the static build
    of that size and PyTorch, CUDA-graph replays timed interleaved."""
    import export_model
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in models:
            onnx = os.path.join(d, name + ".onnx")
            model, x = export_model.export(name, onnx, dynamic_batch=True, realistic_weights=a.realistic)
            model = model.cuda()
            path = os.path.join(d, name + "-buckets.so")
            compile_s = compile_model(a.tunefarm, onnx, path, target, a.db, flags=("--dim", "batch=" + ",".join(map(str, sizes))))
            buckets = GpuLibrary(path, device)
            for b, n in enumerate(sizes):
                static_path = os.path.join(d, "%s-%d.so" % (name, n))
                static_s = compile_model(a.tunefarm, onnx, static_path, target, a.db, flags=("--dim", "batch=%d" % n))
                static = GpuLibrary(static_path, device)
                xg = batch_of(x, n).cuda()
                with torch.no_grad():
                    want = model(xg)
                row = {"model": name, "batch": n, "bucket": b, "buckets_compile_s": compile_s, "static_compile_s": static_s}
                variants = {}
                for tag, lib, bucket in (("bucket", buckets, b), ("static", static, None)):
                    y = torch.empty_like(want)
                    run = (lambda lib=lib, y=y, bucket=bucket:
                           lib.run([xg], [y], torch.cuda.current_stream().cuda_stream, bucket))
                    run()
                    torch.cuda.synchronize()
                    row[tag + "_max_rel_error"] = max_rel_error(y, want)
                    if not row[tag + "_max_rel_error"] < 1e-3:
                        print("MISMATCH %s batch %d %s: max error %.3g of the output's largest value" %
                              (name, n, tag, row[tag + "_max_rel_error"]), flush=True)
                    variants[tag] = graphed(run)

                def eager():
                    with torch.no_grad():
                        model(xg)

                with torch.no_grad():
                    variants["torch"] = graphed(eager)
                time_interleaved(variants, a, time_ms, row)
                row["static_over_bucket"] = row["static_ms"] / row["bucket_ms"]
                row["torch_over_bucket"] = row["torch_ms"] / row["bucket_ms"]
                rows.append(row)
                print("%-13s batch %3d  bucket %d %8.3f ms  static %8.3f (static / bucket %5.3f)  torch graph %8.3f "
                      "(ratio %5.2f)  errors %.2g %.2g  spreads %.2f %.2f %.2f" %
                      (name, n, b, row["bucket_ms"], row["static_ms"], row["static_over_bucket"], row["torch_ms"],
                       row["torch_over_bucket"], row["bucket_max_rel_error"], row["static_max_rel_error"],
                       row["bucket_spread"], row["static_spread"], row["torch_spread"]), flush=True)
                del variants
                torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tunefarm", help="the tunefarm program (build/bin/tunefarm)")
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,bert_base")
    ap.add_argument("--db", help="tuning database: also time each model compiled with its tuned configs")
    ap.add_argument("--calls", type=int, default=20, help="calls per timed block")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of every variant")
    ap.add_argument("--without-pass", action="append", default=[], metavar="PASS",
                    help="also time a default build with this graph pass disabled (repeatable), e.g. "
                    "sixteen-bit-edges: what the pass gains, and whether it changes the accuracy")
    ap.add_argument("--skip-lowering-pass", action="append", default=[], metavar="PASS",
                    help="also time a default build whose kernels are lowered without this lowering pass "
                    "(compile --model --skip-pass; repeatable), e.g. early_loads: what the pass gains on a "
                    "whole model")
    ap.add_argument("--also-opt-level", action="append", type=int, default=[], metavar="N",
                    help="also time a build at -O N (repeatable), e.g. 3: the passes that are off by default "
                    "(fuse-attention), against the default build")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--cpu-check", action="store_true",
                    help="no GPU: check the models' GPU kernels, emulated on this CPU, against PyTorch")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"],
                    help="compile with --precision (tensor cores) and time PyTorch in the same precision")
    ap.add_argument("--realistic", action="store_true",
                    help="random BatchNorm statistics and no zero parameters for every model (scripts/export_model.py "
                         "realistic(); the zoo's models have them anyway): fresh initializations shrink some "
                         "models' outputs below float16's range, which makes accuracy figures meaningless")
    ap.add_argument("--buckets", metavar="SIZES",
                    help="comma-separated batch sizes: a shape-bucket library against static builds of each size")
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    sizes = []
    for s in (a.buckets or "").split(","):
        if s and (not s.isdigit() or int(s) < 1):
            fail("--buckets %s: '%s' is not a batch size" % (a.buckets, s))
        sizes += [int(s)] if s else []
    if not os.path.exists(a.tunefarm):
        fail("no tunefarm program at " + a.tunefarm)
    if a.cpu_check:
        if a.precision != "fp32":
            fail("--cpu-check emulates the kernels serially, and tensor-core products need a warp's lanes together: "
                 "--precision %s builds run on a GPU only" % a.precision)
        return cpu_check_buckets(a, models, sizes) if sizes else cpu_check(a, models)
    try:
        import torch
        import export_model
    except ImportError as e:
        fail("PyTorch (with torchvision) is not installed: it is the peer (%s)" % e)
    if not torch.cuda.is_available():
        fail("PyTorch sees no CUDA GPU on this machine")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    major, minor = torch.cuda.get_device_capability()
    target = "cuda -arch=sm_%d%d" % (major, minor)
    device = torch.cuda.current_device()
    print("GPU: %s (%s); PyTorch %s, cuDNN %s; %s, batch 1" %
          (torch.cuda.get_device_name(), target, torch.__version__, torch.backends.cudnn.version(),
           "fp32, TF32 off" if a.precision == "fp32" else a.precision + " on both sides"), flush=True)
    peer_type = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)

    def time_ms(fn, calls):
        return gpu_bench.time_ms(torch, fn, calls)

    def graphed(fn):
        """`fn` captured once as a CUDA graph (after warm-up calls on a side stream)."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g.replay

    if sizes:
        rows = bench_buckets(a, models, sizes, torch, target, device, time_ms, graphed)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"gpu": torch.cuda.get_device_name(), "target": target, "buckets": sizes, "results": rows},
                          f, indent=1)
        return
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in models:
            onnx = os.path.join(d, name + ".onnx")
            model, x = export_model.export(name, onnx, realistic_weights=a.realistic)
            model = model.cuda()
            xg = x.cuda()
            with torch.no_grad():
                want = model(xg)  # float32, TF32 off: what every build is compared with
            bound = 1e-3 if a.precision in ("fp32", "tf32") else 1e-2
            builds = [("ours", None, ())] + ([("tuned", a.db, ())] if a.db else [])
            # The variants beside the default build: (tag, what its line calls it, compile flags).
            others = [("without_" + p.replace("-", "_"), "without " + p, ("--disable-pass", p)) for p in a.without_pass]
            others += [("skip_" + p, "lowered without " + p, ("--skip-pass", p)) for p in a.skip_lowering_pass]
            others += [("o%d" % n, "at -O%d" % n, ("-O", str(n))) for n in a.also_opt_level]
            builds += [(tag, None, flags) for tag, _, flags in others]
            row = {"model": name}
            variants = {}
            for tag, db, flags in builds:
                path = os.path.join(d, "%s-%s.so" % (name, tag))
                row[tag + "_compile_s"] = compile_model(a.tunefarm, onnx, path, target, db, precision=a.precision,
                                                        flags=flags)
                lib = GpuLibrary(path, device)
                y = torch.empty_like(want)
                run = (lambda lib=lib, y=y: lib.run([xg], [y], torch.cuda.current_stream().cuda_stream))
                run()
                torch.cuda.synchronize()
                row[tag + "_max_rel_error"] = max_rel_error(y, want)
                if not row[tag + "_max_rel_error"] < bound:
                    print("MISMATCH %s %s: max error %.3g of the output's largest value" %
                          (name, tag, row[tag + "_max_rel_error"]), flush=True)
                variants[tag] = run
                variants[tag + "_graph"] = graphed(run)

            # PyTorch in the same precision.
            peer_model, peer_x = model, xg
            if peer_type:
                import copy
                peer_model, peer_x = copy.deepcopy(model).to(peer_type), xg.to(peer_type)
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
            if a.precision != "fp32":
                with torch.no_grad():
                    row["torch_max_rel_error"] = max_rel_error(peer_model(peer_x).float(), want)

            def eager():
                with torch.no_grad():
                    peer_model(peer_x)

            variants["torch"] = eager
            with torch.no_grad():
                variants["torch_graph"] = graphed(eager)
            time_interleaved(variants, a, time_ms, row)
            row["ratio_graph"] = row["torch_graph_ms"] / row["ours_graph_ms"]
            row["ratio_eager"] = row["torch_ms"] / row["ours_ms"]
            rows.append(row)
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
            print("%-13s ours %8.3f ms (graph %8.3f)  torch eager %8.3f  graph %8.3f  ratio graph %5.2f eager %5.2f%s%s" %
                  (name, row["ours_ms"], row["ours_graph_ms"], row["torch_ms"], row["torch_graph_ms"],
                   row["ratio_graph"], row["ratio_eager"],
                   "" if a.precision == "fp32" else "  error vs fp32: ours %.2g, torch %.2g" %
                   (row["ours_max_rel_error"], row["torch_max_rel_error"]),
                   "  tuned %8.3f (graph %8.3f, ratio %5.2f)" %
                   (row["tuned_ms"], row["tuned_graph_ms"], row["torch_graph_ms"] / row["tuned_graph_ms"])
                   if a.db else ""), flush=True)
            for tag, label, _ in others:
                print("%-13s %s: graph %8.3f ms (ours / it %5.2f), error vs fp32 %.2g" %
                      (name, label, row[tag + "_graph_ms"], row[tag + "_graph_ms"] / row["ours_graph_ms"],
                       row[tag + "_max_rel_error"]), flush=True)
            del variants
            torch.cuda.empty_cache()
    print("geomean ratio (PyTorch graph / ours graph) %.2f, eager %.2f" %
          (gpu_bench.geomean([r["ratio_graph"] for r in rows]), gpu_bench.geomean([r["ratio_eager"] for r in rows])))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "target": target, "precision": a.precision,
                       "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
