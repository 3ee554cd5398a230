#!/usr/bin/python3
"""Two builds of one model, library against library: which is faster, on the same inputs.

Usage: bench/lib_ab.py A.so B.so [--threads 1,2] [--calls 300] [--seed 0]

Both libraries (`compile --model`, float32 inputs) are loaded into this process and called in
turn, call by call (A B, then B A, ...), so that whatever else the machine is doing falls on
both alike; each library keeps its own thread pool. Per thread count (OMP_NUM_THREADS is set
before the libraries load; a later count uses omp_set_num_threads through libgomp) prints
each library's median and fastest call and the ratio of the medians, A/B (above 1: B is
faster). Their outputs are compared first: the largest difference relative to A's largest
magnitude is printed, and a difference past 1e-4 of it is an error (exit 1). Inputs are
seeded normal values of the library's bucket-0 shapes.
"""
import argparse
import ctypes
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--threads", default="1,2", help="thread counts, comma separated")
    p.add_argument("--calls", type=int, default=300, help="timed calls of each library per thread count")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


args = parse_args()
threads = [int(t) for t in args.threads.split(",")]
if not threads or min(threads) < 1 or args.calls < 1:
    sys.exit(f"lib_ab: --threads must list positive counts and --calls be positive (got {args.threads!r}, {args.calls})")
os.environ["OMP_NUM_THREADS"] = str(threads[0])
import numpy as np  # noqa: E402


class Library:
    """One model library with its inputs, outputs and workspace."""

    def __init__(self, path, seed):
        if not os.path.isfile(path):
            sys.exit(f"lib_ab: no library {path}")
        self.path = path
        self.lib = ctypes.CDLL(os.path.abspath(path))
        lib = self.lib
        for f in ("tf_model_input_shape", "tf_model_output_shape"):
            getattr(lib, f).restype = ctypes.POINTER(ctypes.c_int64)
        lib.tf_model_workspace_bytes.restype = ctypes.c_uint64
        rng = np.random.default_rng(seed)
        self.inputs, self.outputs = [], []
        for i in range(lib.tf_model_num_inputs()):
            if lib.tf_model_input_dtype(i) != 1:
                sys.exit(f"lib_ab: {path}: input {i} is not float32 (ONNX type {lib.tf_model_input_dtype(i)})")
            shape = [lib.tf_model_input_shape(i)[d] for d in range(lib.tf_model_input_ndim(i))]
            self.inputs.append(rng.standard_normal(shape).astype(np.float32))
        for i in range(lib.tf_model_num_outputs()):
            if lib.tf_model_output_dtype(i) != 1:
                sys.exit(f"lib_ab: {path}: output {i} is not float32 (ONNX type {lib.tf_model_output_dtype(i)})")
            shape = [lib.tf_model_output_shape(i)[d] for d in range(lib.tf_model_output_ndim(i))]
            self.outputs.append(np.zeros(shape, np.float32))
        self.ws = np.zeros(lib.tf_model_workspace_bytes() // 4 + 16, np.float32)
        self.ins = (ctypes.c_void_p * len(self.inputs))(*[x.ctypes.data for x in self.inputs])
        self.outs = (ctypes.c_void_p * len(self.outputs))(*[y.ctypes.data for y in self.outputs])
        self.ws_ptr = ctypes.c_void_p((self.ws.ctypes.data + 63) // 64 * 64)

    def __call__(self):
        status = self.lib.tf_model_run(self.ins, self.outs, self.ws_ptr)
        if status != 0:
            raise RuntimeError(f"{self.path}: tf_model_run returned {status}")


a, b = Library(args.a, args.seed), Library(args.b, args.seed)
if [x.shape for x in a.inputs] != [x.shape for x in b.inputs]:
    sys.exit(f"lib_ab: the libraries take different inputs: {[x.shape for x in a.inputs]} and {[x.shape for x in b.inputs]}")
a(), b()
if [y.shape for y in a.outputs] != [y.shape for y in b.outputs]:
    sys.exit(f"lib_ab: the libraries' outputs differ in shape: {[y.shape for y in a.outputs]} and {[y.shape for y in b.outputs]}")
magnitude = max(float(np.abs(y).max()) for y in a.outputs) or 1.0
difference = max(float(np.abs(ya - yb).max()) for ya, yb in zip(a.outputs, b.outputs))
print(f"outputs: largest difference {difference:.3g} of {magnitude:.3g}")
if not difference <= 1e-4 * magnitude:
    sys.exit(f"lib_ab: the outputs differ by {difference:.3g}, past 1e-4 of their magnitude {magnitude:.3g}")

gomp = ctypes.CDLL("libgomp.so.1")
for t in threads:
    gomp.omp_set_num_threads(t)
    for lib in (a, b):
        for _ in range(3):
            lib()
    times = ([], [])
    for i in range(args.calls):
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            lib = (a, b)[j]
            start = time.perf_counter()
            lib()
            times[j].append(time.perf_counter() - start)
    med = [sorted(v)[len(v) // 2] * 1e3 for v in times]
    best = [min(v) * 1e3 for v in times]
    print(f"{t} thr  A {med[0]:8.3f} ms (min {best[0]:.3f})  B {med[1]:8.3f} ms (min {best[1]:.3f})  A/B {med[0] / med[1]:.3f}")
