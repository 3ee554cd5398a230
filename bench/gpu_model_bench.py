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

Usage: bench/gpu_model_bench.py BUILD/bin/tunefarm [--models resnet18,resnet50,mobilenet_v2,bert_base]
                                [--db DB] [--calls 20] [--rounds 5] [--json FILE] [--cpu-check]
                                [--precision tf32|fp16|bf16]
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
        self.lib.tf_model_last_error.restype = ctypes.c_char_p
        if self.lib.tf_model_set_device(device) != 0:
            fail("tf_model_set_device: " + self.lib.tf_model_last_error().decode())

    def run(self, inputs, outputs, stream):
        ins = (ctypes.c_uint64 * len(inputs))(*[t.data_ptr() for t in inputs])
        outs = (ctypes.c_uint64 * len(outputs))(*[t.data_ptr() for t in outputs])
        status = self.lib.tf_model_run_device(ins, outs, ctypes.c_void_p(stream))
        if status != 0:
            fail("tf_model_run_device returned %d: %s" % (status, self.lib.tf_model_last_error().decode()))


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
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    if not os.path.exists(a.tunefarm):
        fail("no tunefarm program at " + a.tunefarm)
    if a.cpu_check:
        if a.precision != "fp32":
            fail("--cpu-check emulates the kernels serially, and tensor-core products need a warp's lanes together: "
                 "--precision %s builds run on a GPU only" % a.precision)
        return cpu_check(a, models)
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
            for fn in variants.values():  # warm-up (cuDNN picks its algorithms)
                time_ms(fn, a.calls)
            samples = {k: [] for k in variants}
            for _ in range(a.rounds):
                for k, fn in variants.items():
                    samples[k].append(time_ms(fn, a.calls))
            for k, v in samples.items():
                row[k + "_ms"] = statistics.median(v)
                row[k + "_spread"] = (max(v) - min(v)) / statistics.median(v)
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
