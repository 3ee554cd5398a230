#!/usr/bin/env python3
"""Kernels compiled by `tunefarm compile`, called through ctypes, against numpy.

This is how users call kernels from Python: load the .so, read the sidecar JSON for the
argument order and shapes, pass contiguous float32 arrays. numpy computes the expected
result independently of the C++ reference.

usage: ctypes_numpy_test.py TUNEFARM
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

TUNEFARM = None


def conv_out(n, k, stride, pad, dil):
    return (n + 2 * pad - dil * (k - 1) - 1) // stride + 1


def epilogue(y, bias, kind, axis):
    if kind in ("bias", "bias_relu"):
        shape = [1] * y.ndim
        shape[axis] = -1
        y = y + bias.reshape(shape)
    if kind in ("relu", "bias_relu"):
        y = np.maximum(y, 0)
    return y


def conv_nchw(x, w, stride, pad, dil, groups_depthwise=False):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    oh, ow = conv_out(h, r, stride, pad, dil), conv_out(wd, s, stride, pad, dil)
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, k, oh, ow), dtype=np.float64)
    for i in range(r):
        for j in range(s):
            hs, ws = i * dil, j * dil
            patch = xp[:, :, hs:hs + stride * (oh - 1) + 1:stride, ws:ws + stride * (ow - 1) + 1:stride]
            if groups_depthwise:
                out += patch * w[:, 0, i, j].reshape(1, -1, 1, 1)
            else:
                out += np.einsum("nchw,kc->nkhw", patch, w[:, :, i, j])
    return out


def expected(op, p, args):
    ep = p.get("epilogue", "none")
    a = [x.astype(np.float64) for x in args]
    bias = a[2] if ep in ("bias", "bias_relu") else None
    if op == "matmul":
        return epilogue(a[0] @ a[1], bias, ep, 1)
    if op == "batch_matmul":
        return epilogue(np.matmul(a[0], a[1]), bias, ep, 2)
    st, pad, dil = p.get("stride", 1), p.get("pad", 0), p.get("dilation", 1)
    if op == "conv2d_nchw":
        return epilogue(conv_nchw(a[0], a[1], st, pad, dil), bias, ep, 1)
    if op == "conv2d_nhwc":
        x = a[0].transpose(0, 3, 1, 2)           # NHWC -> NCHW
        w = a[1].transpose(3, 2, 0, 1)           # RSCK -> KCRS
        return epilogue(conv_nchw(x, w, st, pad, dil).transpose(0, 2, 3, 1), bias, ep, 3)
    if op == "depthwise_conv2d_nchw":
        return epilogue(conv_nchw(a[0], a[1], st, pad, dil, groups_depthwise=True), bias, ep, 1)
    raise ValueError(op)


def parse(spec):
    op, rest = spec.split("(", 1)
    params = {}
    for item in rest.rstrip(")").split(","):
        k, v = item.split("=")
        params[k] = v if k == "epilogue" else int(v)
    return op, params


class CtypesAgainstNumpy(unittest.TestCase):
    WORKLOADS = [
        "matmul(M=97,N=131,K=67)",
        "matmul(M=1,N=1,K=1)",
        "matmul(M=31,N=64,K=17,epilogue=bias_relu)",
        "batch_matmul(B=3,M=13,N=29,K=11,epilogue=bias)",
        "conv2d_nchw(N=1,C=3,H=17,W=19,K=7,R=3,S=3,stride=2,pad=1,epilogue=bias_relu)",
        "conv2d_nchw(N=2,C=5,H=11,W=9,K=3,R=3,S=2,dilation=2,epilogue=relu)",
        "conv2d_nhwc(N=1,H=13,W=7,C=6,K=19,R=3,S=3,pad=1,epilogue=bias)",
        "depthwise_conv2d_nchw(N=1,C=5,H=23,W=17,R=3,S=3,stride=2,pad=1,epilogue=bias_relu)",
    ]

    def test_workloads(self):
        rng = np.random.default_rng(0)
        with tempfile.TemporaryDirectory() as tmp:
            for i, spec in enumerate(self.WORKLOADS):
                with self.subTest(spec=spec):
                    so = os.path.join(tmp, f"k{i}.so")
                    subprocess.run([TUNEFARM, "compile", "--workload", spec, "-o", so],
                                   check=True, capture_output=True)
                    meta = json.load(open(so + ".json"))
                    lib = ctypes.CDLL(so)
                    fn = getattr(lib, meta["function"])
                    fn.restype = ctypes.c_int
                    arrays = []
                    for arg in meta["args"]:
                        shape = tuple(arg["shape"])
                        if arg["role"] == "input":
                            arrays.append(rng.uniform(-1, 1, shape).astype(np.float32))
                        else:
                            arrays.append(np.full(shape, np.nan, dtype=np.float32))
                    ptrs = [a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) for a in arrays]
                    self.assertEqual(fn(*ptrs), 0)
                    op, params = parse(meta["workload"])
                    want = expected(op, params, arrays[:-1])
                    got = arrays[-1]
                    self.assertEqual(got.shape, want.shape)
                    terms = max(1, np.prod([params.get(k, 1) for k in ("K",)]) if "matmul" in op
                                else params.get("C", 1) * params["R"] * params["S"])
                    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 + 2e-7 * terms,
                                               err_msg=spec)


if __name__ == "__main__":
    TUNEFARM = sys.argv.pop(1)
    unittest.main(verbosity=2)
