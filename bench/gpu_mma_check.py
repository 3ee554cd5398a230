#!/usr/bin/env python3
"""The warp-level tensor-core products (compiler/ir.h: mma_m16n8k8_tf32, mma_m16n8k16_f16,
mma_m16n8k16_bf16) and Hopper's warpgroup-level ones (wgmma_m64k16_f16, wgmma_m64k16_bf16: their
PTX is for sm_90a, which runs on sm_90 GPUs only) on a real NVIDIA GPU: runs the hand-written GEMM kernels whose PTX
tests/compiler/warp_mma_test.cc writes (with TF_WARP_MMA_PTX_DIR=DIR) and compares C with
NumPy's product of the operands rounded as each instruction rounds them (TF32: to nearest, ties
away; float16 and bfloat16: to nearest even). The same check the CPU emulation makes in the
tests, against the hardware: a fragment layout (or, for wgmma, a shared-memory descriptor or
core-matrix layout) that this project read wrong from the PTX manual passes the emulator but
fails here.

Prepare here (no GPU needed):
    TF_WARP_MMA_PTX_DIR=build-gpubundle/mma build/tests/test_compiler_warp_mma --gtest_filter='*Ptx*'
Run there (CuPy loads the PTX through the driver):
    python3 bench/gpu_mma_check.py build-gpubundle/mma
Prints one line per kernel (product, PTX architecture, largest difference relative to the
largest |C|); exits 1 when one is off by more than 1e-4, 2 when it cannot run.
"""
import json
import os
import sys

import numpy as np


def fail(msg, code=2):
    print("gpu_mma_check: " + msg, file=sys.stderr)
    sys.exit(code)


def tf32(x):
    b = x.astype(np.float32).view(np.uint32)
    finite = np.isfinite(x)
    r = ((b + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(finite, r, x).astype(np.float32)


def f16(x):
    return x.astype(np.float16).astype(np.float32)


def bf16(x):
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(x), r, x).astype(np.float32)


ROUND = {"mma_m16n8k8_tf32": tf32, "mma_m16n8k16_f16": f16, "mma_m16n8k16_bf16": bf16,
         "wgmma_m64k16_f16": f16, "wgmma_m64k16_bf16": bf16}


def runs_on(arch, sm):
    """Whether PTX for `arch` (sm_80, sm_90a) runs on a GPU of compute capability `sm`: an
    architecture-specific target (its "a") only on that architecture."""
    if arch.endswith("a"):
        return int(arch[3:-1]) == sm
    return int(arch[3:]) <= sm


def main():
    if len(sys.argv) != 2:
        fail("usage: gpu_mma_check.py DIR (the PTX and manifest.json tests/compiler/warp_mma_test.cc wrote)")
    d = sys.argv[1]
    try:
        manifest = json.load(open(os.path.join(d, "manifest.json")))
    except (OSError, ValueError) as e:
        fail("no readable manifest.json in %s: %s" % (d, e))
    try:
        import cupy as cp
    except ImportError:
        fail("CuPy is not installed: it loads the PTX through the driver")
    sm = int(cp.cuda.Device().compute_capability)
    print("GPU: %s (sm_%d)" % (cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), sm), flush=True)
    rng = np.random.default_rng(5)
    worst = 0.0
    ran = 0
    for k in manifest:
        if not runs_on(k["arch"], sm):
            print("%-20s %s: skipped (this GPU is sm_%d)" % (k["product"], k["arch"], sm))
            continue
        M, N, K = k["M"], k["N"], k["K"]
        a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
        b = rng.uniform(-1, 1, (K, N)).astype(np.float32)
        da, db = cp.asarray(a), cp.asarray(b)
        dc = cp.full((M, N), np.nan, dtype=cp.float32)
        mod = cp.RawModule(path=os.path.join(d, k["ptx"]))
        fn = mod.get_function(k["kernel"])
        fn((1,), (k["threads"],), (da, db, dc))
        cp.cuda.Device().synchronize()
        got = cp.asnumpy(dc)
        r = ROUND[k["product"]]
        want = r(a).astype(np.float64) @ r(b).astype(np.float64)
        err = float(np.nanmax(np.abs(got - want)) / np.abs(want).max()) if not np.isnan(got).any() else float("inf")
        vs_float = float(np.abs(got - a.astype(np.float64) @ b).max() / np.abs(want).max())
        print("%-34s %s: largest difference from the product of rounded operands %.2g, from the float32 one %.2g"
              % (k["kernel"], k["arch"], err, vs_float), flush=True)
        worst = max(worst, err)
        ran += 1
    if ran == 0:
        fail("no kernel ran (none for this GPU's architecture)")
    if worst > 1e-4:
        print("gpu_mma_check: FAILED: a product is off by %.2g (the fragment layouts or rounding differ from the "
              "hardware's)" % worst)
        sys.exit(1)
    print("gpu_mma_check: ok, %d kernels" % ran)


if __name__ == "__main__":
    main()
