#!/usr/bin/python3
"""Whole-model latency: tunefarm's compiled library against PyTorch 1.13 eager and TorchScript
(frozen + optimize_for_inference, its fastest CPU mode), batch 1, at 1 and 2 threads, in one
process with the runs interleaved (round robin, so drift hits all alike).

Our library is called through its C ABI with ctypes; every call is timed, and each entry is
the median of the calls of all rounds. PyTorch's matmuls run in OpenBLAS, whose pool
torch.set_num_threads does not size: both pools get the same count, and OpenBLAS its right
core type (OPENBLAS_CORETYPE: SkylakeX with AVX-512, Haswell with AVX2, overridable). Our kernels run on the
library's own pool, whose teams libgomp's omp_get_max_threads() sizes, so torch.set_num_threads
sizes them too (the same libgomp).

Usage: model_bench.py TUNEFARM [--models resnet18,mobilenet_v2,bert2,mlp] [--threads 1,2]
                      [--calls 10] [--rounds 3] [--db PATH] [--without PASS] [--json FILE]
Prints one row per model and thread count: ms per inference and the ratios
eager/ours (above 1: tunefarm is faster) and ours/optimized (the issue's goal: at most 1.5).
--without PASS also compiles each model with that graph pass disabled and times it in the same
rounds ("without"), to measure what the pass is worth.
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



def openblas_core():
    """OpenBLAS 0.3.21 misdetects newer CPUs as old ones: name the core its kernels fit."""
    flags = open("/proc/cpuinfo").read()
    return "SkylakeX" if " avx512f" in flags else "Haswell" if " avx2" in flags else None


if "OPENBLAS_CORETYPE" not in os.environ and openblas_core():
    os.environ["OPENBLAS_CORETYPE"] = openblas_core()
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import export_model  # noqa: E402


class Library:
    """A compiled model through its C ABI."""

    def __init__(self, path, x):
        self.lib = ctypes.CDLL(path)
        self.lib.tf_model_output_shape.restype = ctypes.POINTER(ctypes.c_int64)
        self.lib.tf_model_workspace_bytes.restype = ctypes.c_uint64
        nd = self.lib.tf_model_output_ndim(0)
        shape = [self.lib.tf_model_output_shape(0)[i] for i in range(nd)]
        self.x = np.ascontiguousarray(x, dtype=np.float32)
        self.y = np.zeros(shape, dtype=np.float32)
        self.ws = np.zeros(self.lib.tf_model_workspace_bytes() // 4 + 16, dtype=np.float32)
        self.ins = (ctypes.c_void_p * 1)(self.x.ctypes.data)
        self.outs = (ctypes.c_void_p * 1)(self.y.ctypes.data)
        # 64-byte aligned workspace inside the array.
        self.ws_ptr = ctypes.c_void_p((self.ws.ctypes.data + 63) // 64 * 64)

    def __call__(self):
        if self.lib.tf_model_run(self.ins, self.outs, self.ws_ptr) != 0:
            raise RuntimeError("tf_model_run failed")
        return self.y


def set_threads(n):
    torch.set_num_threads(n)
    try:
        ctypes.CDLL("libopenblas.so.0").openblas_set_num_threads(n)
    except OSError:
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tunefarm")
    p.add_argument("--models", default="resnet18,mobilenet_v2,bert2,mlp")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--db", help="tuning database for the compile (default: none, default schedules)")
    p.add_argument("--without", help="also time each model compiled with this graph pass disabled")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in a.models.split(","):
            path = os.path.join(d, name + ".onnx")
            model, x = export_model.export(name, path)
            lib_path = os.path.join(d, name + ".so")
            t0 = time.time()
            subprocess.run([a.tunefarm, "compile", "--model", path, "-o", lib_path] +
                           (["--db", a.db] if a.db else ["--no-db"]), check=True, stdout=subprocess.DEVNULL)
            compile_s = time.time() - t0
            lib = Library(lib_path, x.numpy())
            without = None
            if a.without:
                other = os.path.join(d, name + "-without.so")
                subprocess.run([a.tunefarm, "compile", "--model", path, "-o", other, "--disable-pass", a.without] +
                               (["--db", a.db] if a.db else ["--no-db"]), check=True, stdout=subprocess.DEVNULL)
                without = Library(other, x.numpy())
            with torch.no_grad():
                want = model(x).numpy()
                scripted = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model)))
                scripted(x)
                scripted(x)
            err = float(np.abs(lib() - want).max())
            mag = float(np.abs(want).max())
            runners = {"ours": lib, "eager": lambda: model(x), "optimized": lambda: scripted(x)}
            if without:
                err = max(err, float(np.abs(without() - want).max()))
                runners["without"] = without
            for t in threads:
                set_threads(t)
                samples = {k: [] for k in runners}
                with torch.no_grad():
                    for f in runners.values():  # warm-up at this thread count
                        f()
                    for _ in range(a.rounds):
                        for k, f in runners.items():
                            for _ in range(a.calls):
                                s = time.perf_counter()
                                f()
                                samples[k].append(time.perf_counter() - s)
                ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
                spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in samples.items()}
                row = {"model": name, "threads": t, "ours_ms": ms["ours"], "eager_ms": ms["eager"],
                       "optimized_ms": ms["optimized"], "eager_over_ours": ms["eager"] / ms["ours"],
                       "ours_over_optimized": ms["ours"] / ms["optimized"], "max_error": err, "magnitude": mag,
                       "compile_s": compile_s, "spread": spread}
                if without:
                    row["without_ms"] = ms["without"]
                rows.append(row)
                print(f"{name:13s} {t} thr  ours {ms['ours']:8.2f} ms  eager {ms['eager']:8.2f} ms  "
                      f"optimized {ms['optimized']:8.2f} ms  eager/ours {row['eager_over_ours']:5.2f}  "
                      f"ours/optimized {row['ours_over_optimized']:5.2f}  (max error {err:.2g} of {mag:.2g}; "
                      f"spread ours {spread['ours']:.0%}, eager {spread['eager']:.0%}; compile {compile_s:.1f} s)"
                      + (f"  without {a.without} {ms['without']:8.2f} ms ({ms['without'] / ms['ours']:.2f}x ours)"
                         if without else ""),
                      flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
