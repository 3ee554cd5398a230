#!/usr/bin/env python3
"""Where a model's time goes on one NVIDIA GPU: tunefarm's compiled library and PyTorch's model
(in the same precision), each called --calls times under torch.profiler. CUPTI records every
kernel of the process, so the library's launches (through the CUDA driver) are recorded as
PyTorch's own are. Kernels are summed by name; prints per side the GPU time of one call (the
kernels' own time: no launch gaps) and the --top kernels, ours with the workload, template and
config the library's sidecar gives them. The figures say which kernels to work on; the speed of
a whole call is bench/gpu_model_bench.py's.

Needs: an NVIDIA GPU, PyTorch with CUDA, torchvision. Without them it says which is missing and
exits 2.

Usage: bench/gpu_profile.py BUILD/bin/tunefarm [--models bert_base,resnet50] [--precision fp16]
                            [--calls 10] [--top 15]
"""
import argparse
import collections
import copy
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import gpu_model_bench  # noqa: E402  (bench/: compile_model, GpuLibrary)


def fail(msg):
    print("gpu_profile: " + msg, file=sys.stderr)
    sys.exit(2)


def kernel_times(torch, fn, calls):
    """{kernel name: (microseconds per call, launches per call)} of `calls` calls of fn."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = collections.defaultdict(float)
    counts = collections.defaultdict(int)
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA") and "memcpy" not in e.name.lower() \
                and "memset" not in e.name.lower():
            us = getattr(e, "device_time", None)
            if us is None:
                us = getattr(e, "cuda_time", 0)
            times[e.name] += us / calls
            counts[e.name] += 1
    return {k: (times[k], counts[k] / calls) for k in times}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tunefarm", help="the tunefarm program (build/bin/tunefarm)")
    ap.add_argument("--models", default="bert_base,resnet50")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"])
    ap.add_argument("--db", help="tuning database to compile with (default: none, the default configs)")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--opt-level", type=int, help="compile at this -O (3: with fuse-attention); default: tunefarm's")
    a = ap.parse_args()
    try:
        import torch
        import export_model
    except ImportError as e:
        fail("PyTorch (with torchvision) is not installed: %s" % e)
    if not torch.cuda.is_available():
        fail("PyTorch sees no CUDA GPU on this machine")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    major, minor = torch.cuda.get_device_capability()
    target = "cuda -arch=sm_%d%d" % (major, minor)
    device = torch.cuda.current_device()
    print("GPU: %s (%s); PyTorch %s; %s" % (torch.cuda.get_device_name(), target, torch.__version__, a.precision),
          flush=True)
    peer_type = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)
    with tempfile.TemporaryDirectory() as d:
        for name in [m for m in a.models.split(",") if m]:
            onnx = os.path.join(d, name + ".onnx")
            model, x = export_model.export(name, onnx)
            model, xg = model.cuda(), x.cuda()
            path = os.path.join(d, name + ".so")
            gpu_model_bench.compile_model(a.tunefarm, onnx, path, target, a.db, precision=a.precision,
                                          flags=() if a.opt_level is None else ("-O", str(a.opt_level)))
            with open(path + ".json") as f:
                sidecar = json.load(f)
            about = {}
            for k in sidecar["kernels"]:
                about[k["function"]] = k
                for n, then in enumerate(k["launch"].get("then", []), 2):
                    about[then.get("function", "%s_step%d" % (k["function"], n))] = dict(k, step=n)
            lib = gpu_model_bench.GpuLibrary(path, device)
            with torch.no_grad():
                y = torch.empty_like(model(xg))
            ours = kernel_times(torch, lambda: lib.run([xg], [y], torch.cuda.current_stream().cuda_stream), a.calls)
            peer_model, peer_x = (copy.deepcopy(model).to(peer_type), xg.to(peer_type)) if peer_type else (model, xg)
            with torch.no_grad():
                theirs = kernel_times(torch, lambda: peer_model(peer_x), a.calls)
            for side, table in (("tunefarm", ours), ("PyTorch", theirs)):
                total = sum(t for t, _ in table.values())
                launches = sum(n for _, n in table.values())
                print("\n%s %s: %.3f ms of kernels a call, %d launches, %d kernels" %
                      (name, side, total / 1e3, round(launches), len(table)), flush=True)
                for k, (t, n) in sorted(table.items(), key=lambda kv: -kv[1][0])[:a.top]:
                    line = "  %7.1f us %5.1f%% x%-3d %s" % (t, 100 * t / total, round(n), k[:60])
                    if side == "tunefarm" and k in about:
                        info = about[k]
                        line += "  %s %s %s" % (info.get("workload", "-")[:110], info.get("template", ""),
                                                json.dumps(info.get("config") or {}, separators=(",", ":")))
                        if "step" in info:
                            line += " (step %d)" % info["step"]
                    print(line, flush=True)


if __name__ == "__main__":
    main()
