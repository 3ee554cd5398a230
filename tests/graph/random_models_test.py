#!/usr/bin/env python3
"""Random PyTorch modules (seeded: layers, shapes, weights and inputs from the seed) exported to
ONNX and compiled by tunefarm: the CPU library, the cuda build emulated on this machine
(`--emulate-gpu`) and, given the FAKE libcuda's folder, the GPU library itself through it (its
PTX launch plan running the emulation's kernels); each output within 1e-4 of the largest of
PyTorch's output and 1 (as torch_models_test.py compares), plus ten times PyTorch's own float32
error against its float64 output where the module cancels (a sum of normalized values).

Two kinds of module: image (convolutions of any groups, strides, dilations and paddings,
pools with ceil_mode, norms, resizes, pads, branches) and sequence (attention, recurrent
layers, gathers, scatters, sorts, cumulative sums, 1-D and 3-D convolutions). Where a seed
fails, the module is printed with the command that repeats it, and, where ONNX Runtime is
installed (scripts/install-ort.sh), what it computes of the same file: an exporter's mistake
shows as ONNX Runtime agreeing with tunefarm, and where every float32 build agrees with ONNX
Runtime and PyTorch does not, the seed is reported as exported wrongly, not as a failure. Layers
whose export by PyTorch 1.13 is not the module (circular padding; AvgPool2d with ceil_mode,
padding and count_include_pad) are not generated.

Each seed also checks one variant, in turn (--every-variant: all three):
  precision  the CPU library at --precision bf16 and fp16 and the emulated cuda build at one of
             fp16, bf16 and tf32, against PyTorch's float32 output (PRECISION_TOL plus the
             module's rounding_noise; not for modules with a discontinuous layer);
  qdq        `tunefarm quantize` of the model (random method, per tensor or channel, uint8 or
             symmetric int8), its int8 CPU build (fold-qdq) and its emulated cuda build against
             its float32 CPU build (QDQ_TOL);
  dims       the module exported with a dynamic batch axis (a sequence's length too, at
             random), compiled with --dim buckets (the input's batch; two sizes, both run; or a
             larger one with --pad-batch where the compiler finds the rows kept apart), CPU and
             emulated cuda, run against PyTorch.

Usage: random_models_test.py TUNEFARM [FAKE_CUDA_DIR] [--seeds A:B] [--kinds image,sequence]
                             [--variants precision,qdq,dims|none] [--every-variant]
  (TF_SANITIZED=1: the first 3 seeds of each kind, as the sanitizer pass runs it.)
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models_for_tests  # noqa: E402

class Lambda(nn.Module):
    def __init__(self, f, desc):
        super().__init__()
        self.f, self.desc = f, desc

    def forward(self, x):
        return self.f(x)

    def extra_repr(self):
        return self.desc


def out_size(h, k, s, p0, p1, d, ceil=False):
    eff = d * (k - 1) + 1
    num = h + p0 + p1 - eff
    if num < 0:
        return 0
    if ceil:
        o = -(-num // s) + 1
        if (o - 1) * s >= h + p0:
            o -= 1
        return o
    return num // s + 1


class ImageGen:
    """Random layers over an (N, C, H, W) tensor: convolutions (groups, strides, dilations,
    paddings), pools, norms, activations, broadcasts, branches, resizes, reshapes."""
    def __init__(self, rng):
        self.r = rng

    def choice(self, xs):
        return xs[self.r.integers(len(xs))]

    def layer(self, c, h, w):
        """a random layer for an (N, c, h, w) tensor: (module, c', h', w') or None"""
        r = self.r
        kind = self.choice(["conv", "conv", "conv", "convT", "maxpool", "avgpool", "act", "act", "norm",
                            "const", "residual", "concat", "pad", "interp", "shuffle", "reduce", "slice",
                            "softmax", "matmul", "pixel", "adaptive", "channel_shuffle", "transpose"])
        if kind == "conv":
            k = int(self.choice([1, 1, 3, 3, 5, 7, 2]))
            s = int(self.choice([1, 1, 2, 3]))
            d = int(self.choice([1, 1, 1, 2]))
            p = int(r.integers(0, k // 2 * d + 1)) if r.random() < 0.9 else 0
            divs = [g for g in range(1, c + 1) if c % g == 0]
            g = int(self.choice(divs)) if r.random() < 0.5 else 1
            if r.random() < 0.15:
                g = c
            mult = int(self.choice([1, 1, 2, 3]))
            cout = g * max(1, int(r.integers(1, 17)) // g if g > 1 else int(r.integers(1, 33)))
            if g == c and r.random() < 0.5:
                cout = c * mult
            if cout % g:
                cout = g * (cout // g + 1)
            if g == 1 and c % 4 == 0 and r.random() < 0.5:  # as real models: blocks of channels (int8 folds)
                cout = int(self.choice([8, 16, 24, 32]))
            # Not "circular": PyTorch 1.13 exports it wrongly (ONNX Runtime agrees with tunefarm).
            mode = self.choice(["zeros"] * 6 + ["reflect", "replicate"])
            if mode != "zeros" and (p >= h or p >= w or p == 0):
                mode = "zeros"
            ho, wo = out_size(h, k, s, p, p, d), out_size(w, k, s, p, p, d)
            if ho < 1 or wo < 1:
                return None
            m = nn.Conv2d(c, cout, k, s, p, d, g, bias=bool(r.random() < 0.7), padding_mode=mode)
            return m, cout, ho, wo
        if kind == "convT":
            k = int(self.choice([1, 2, 3, 4]))
            s = int(self.choice([1, 2, 2, 3]))
            d = int(self.choice([1, 1, 2]))
            p = int(r.integers(0, (k - 1) * d // 2 + 1))
            op = int(r.integers(0, max(s, d))) if r.random() < 0.3 else 0
            op = min(op, max(s, d) - 1)
            divs = [g for g in range(1, c + 1) if c % g == 0]
            g = int(self.choice(divs)) if r.random() < 0.4 else 1
            cout = g * int(r.integers(1, 9))
            ho = (h - 1) * s - 2 * p + d * (k - 1) + op + 1
            wo = (w - 1) * s - 2 * p + d * (k - 1) + op + 1
            if ho < 1 or wo < 1 or ho * wo > 4096:
                return None
            m = nn.ConvTranspose2d(c, cout, k, s, p, op, g, bool(r.random() < 0.7), d)
            return m, cout, ho, wo
        if kind in ("maxpool", "avgpool"):
            k = int(self.choice([2, 3, 3, 5]))
            s = int(self.choice([1, 2, 2, 3]))
            p = int(r.integers(0, k // 2 + 1))
            ceil = bool(r.random() < 0.4)
            if kind == "maxpool":
                d = int(self.choice([1, 1, 2]))
                ho, wo = out_size(h, k, s, p, p, d, ceil), out_size(w, k, s, p, p, d, ceil)
                if ho < 1 or wo < 1:
                    return None
                return nn.MaxPool2d(k, s, p, d, ceil_mode=ceil), c, ho, wo
            cip = bool(r.random() < 0.5)
            if ceil and p > 0 and cip:
                # PyTorch 1.13 exports this as a Pad and an AveragePool with ceil_mode over the
                # padded image, which keeps a last window PyTorch leaves out (ONNX Runtime
                # computes that window too): the exported model is not the module.
                cip = False
            ho, wo = out_size(h, k, s, p, p, 1, ceil), out_size(w, k, s, p, p, 1, ceil)
            if ho < 1 or wo < 1:
                return None
            return nn.AvgPool2d(k, s, p, ceil_mode=ceil, count_include_pad=cip), c, ho, wo
        if kind == "act":
            a = self.choice(["relu", "relu6", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid",
                             "leaky", "elu", "softplus", "prelu", "abs", "neg_exp", "sqrt_abs", "clamp", "erf",
                             "selu", "mish", "log_sigmoid", "floor", "sign", "recip"])
            f = {
                "relu": nn.ReLU(), "relu6": nn.ReLU6(), "gelu": nn.GELU(), "silu": nn.SiLU(),
                "sigmoid": nn.Sigmoid(), "tanh": nn.Tanh(), "hardswish": nn.Hardswish(),
                "hardsigmoid": nn.Hardsigmoid(), "leaky": nn.LeakyReLU(0.13), "elu": nn.ELU(0.7),
                "softplus": nn.Softplus(), "prelu": nn.PReLU(c), "selu": nn.SELU(), "mish": nn.Mish(),
                "log_sigmoid": nn.LogSigmoid(),
                "abs": Lambda(torch.abs, "abs"), "neg_exp": Lambda(lambda x: torch.exp(-x.abs()), "exp(-|x|)"),
                "sqrt_abs": Lambda(lambda x: torch.sqrt(x.abs() + 0.1), "sqrt"),
                "clamp": Lambda(lambda x: torch.clamp(x, -0.3, 0.5), "clamp"),
                "erf": Lambda(torch.erf, "erf"), "floor": Lambda(lambda x: torch.floor(x * 4.0 + 0.5), "floor"),
                "sign": Lambda(torch.sign, "sign"), "recip": Lambda(lambda x: 1.0 / (x.abs() + 0.5), "recip"),
            }[a]
            if a == "prelu":
                with torch.no_grad():
                    f.weight.uniform_(-0.5, 0.5)
            return f, c, h, w
        if kind == "norm":
            n = self.choice(["bn", "bn", "in", "gn", "ln"])
            if n == "bn":
                m = nn.BatchNorm2d(c)
                with torch.no_grad():
                    m.running_mean.uniform_(-1, 1)
                    m.running_var.uniform_(0.5, 2)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.5, 0.5)
                return m, c, h, w
            if n == "in":
                if h * w < 2:
                    return None
                return nn.InstanceNorm2d(c, affine=bool(r.random() < 0.5)), c, h, w
            if n == "gn":
                divs = [g for g in range(1, c + 1) if c % g == 0]
                if h * w * c < 4:
                    return None
                return nn.GroupNorm(int(self.choice(divs)), c), c, h, w
            shape = [w] if r.random() < 0.5 else [h, w]
            if int(np.prod(shape)) < 2:
                return None
            return nn.LayerNorm(shape), c, h, w
        if kind == "const":
            op = self.choice(["add", "mul", "sub", "div", "max", "min", "pow2"])
            bshape = self.choice([(1, c, 1, 1), (1, 1, h, w), (1, c, h, w), (1, 1, 1, w), (1,), (1, c, h, 1)])
            t = torch.from_numpy(r.uniform(0.5, 1.5, bshape).astype(np.float32))
            f = {"add": lambda x: x + t, "mul": lambda x: x * t, "sub": lambda x: t - x,
                 "div": lambda x: x / t, "max": lambda x: torch.maximum(x, t - 1), "min": lambda x: torch.minimum(x, t - 1),
                 "pow2": lambda x: x * x}[op]
            return Lambda(f, f"{op} {bshape}"), c, h, w
        if kind == "residual":
            inner = self.layer(c, h, w)
            if inner is None or inner[1:] != (c, h, w):
                return None
            m = inner[0]
            mod = Lambda(lambda x: x + m(x), f"residual({m})")
            mod.inner = m  # a submodule: eval mode and its weights exported as weights
            return mod, c, h, w
        if kind == "concat":
            a, b = self.layer(c, h, w), self.layer(c, h, w)
            if a is None or b is None or a[2:] != b[2:]:
                return None
            ma, mb = a[0], b[0]
            holder = nn.ModuleList([ma, mb]) if isinstance(ma, nn.Module) else None
            mod = Lambda(lambda x: torch.cat([ma(x), mb(x)], 1), f"concat({ma}, {mb})")
            mod.holder = holder
            return mod, a[1] + b[1], a[2], a[3]
        if kind == "pad":
            pads = [int(r.integers(0, 3)) for _ in range(4)]
            mode = self.choice(["constant", "reflect", "replicate"])
            if mode == "reflect" and (max(pads[:2]) >= w or max(pads[2:]) >= h):
                mode = "constant"
            val = float(r.uniform(-1, 1)) if mode == "constant" else 0.0
            kw = {"value": val} if mode == "constant" else {}
            return Lambda(lambda x: F.pad(x, pads, mode=mode, **kw), f"pad {pads} {mode} {val}"), c, h + pads[2] + pads[3], w + pads[0] + pads[1]
        if kind == "interp":
            mode = self.choice(["nearest", "bilinear", "bicubic"])
            ac = bool(r.random() < 0.5) if mode != "nearest" else None
            if r.random() < 0.5:
                sf = int(self.choice([2, 3]))
                ho, wo = h * sf, w * sf
                if ho * wo > 4096:
                    return None
                return Lambda(lambda x: F.interpolate(x, scale_factor=sf, mode=mode, align_corners=ac),
                              f"interp x{sf} {mode} ac={ac}"), c, ho, wo
            ho, wo = int(r.integers(1, 2 * h + 2)), int(r.integers(1, 2 * w + 2))
            return Lambda(lambda x: F.interpolate(x, size=(ho, wo), mode=mode, align_corners=ac),
                          f"interp {ho}x{wo} {mode} ac={ac}"), c, ho, wo
        if kind == "shuffle":
            if h % 2 or w % 2:
                return None
            return nn.PixelUnshuffle(2), c * 4, h // 2, w // 2
        if kind == "pixel":
            if c % 4:
                return None
            return nn.PixelShuffle(2), c // 4, h * 2, w * 2
        if kind == "reduce":
            op = self.choice(["mean", "sum", "amax", "amin", "l2"])
            dims = self.choice([(2, 3), (1,), (3,), (2,), (1, 2)])
            f = {"mean": lambda x: x.mean(dims, keepdim=True), "sum": lambda x: x.sum(dims, keepdim=True),
                 "amax": lambda x: x.amax(dims, keepdim=True), "amin": lambda x: x.amin(dims, keepdim=True),
                 "l2": lambda x: x.norm(dim=dims, keepdim=True)}[op]
            shp = [1, c, h, w]
            for dd in dims:
                shp[dd] = 1
            return Lambda(f, f"{op} {dims}"), shp[1], shp[2], shp[3]
        if kind == "slice":
            h0 = int(r.integers(0, h))
            h1 = int(r.integers(h0 + 1, h + 1))
            sh = int(self.choice([1, 1, 2]))
            c0 = int(r.integers(0, c))
            c1 = int(r.integers(c0 + 1, c + 1))
            ho = len(range(h0, h1, sh))
            return Lambda(lambda x: x[:, c0:c1, h0:h1:sh, :], f"slice c{c0}:{c1} h{h0}:{h1}:{sh}"), c1 - c0, ho, w
        if kind == "softmax":
            dim = int(self.choice([1, 2, 3, -1]))
            f = self.choice([F.softmax, F.log_softmax])
            return Lambda(lambda x: f(x, dim=dim), f"{f.__name__} {dim}"), c, h, w
        if kind == "matmul":
            # (N, c, h, w) @ (N, c, w, h) -> (N, c, h, h), scaled
            if h * h > 4096:
                return None
            wt = torch.from_numpy(r.uniform(-1, 1, (w, int(r.integers(1, 24)))).astype(np.float32))
            if r.random() < 0.5:
                return Lambda(lambda x: torch.matmul(x, x.transpose(-1, -2)) * 0.1, "x@xT"), c, h, h
            return Lambda(lambda x: torch.matmul(x, wt), f"x@w{tuple(wt.shape)}"), c, h, wt.shape[1]
        if kind == "adaptive":
            ho, wo = int(r.integers(1, h + 1)), int(r.integers(1, w + 1))
            if h % ho or w % wo:
                ho, wo = 1, 1
            f = self.choice([nn.AdaptiveAvgPool2d((ho, wo)), nn.AdaptiveMaxPool2d((ho, wo))])
            return f, c, ho, wo
        if kind == "channel_shuffle":
            divs = [g for g in range(2, c + 1) if c % g == 0]
            if not divs:
                return None
            g = int(self.choice(divs))
            return Lambda(lambda x: x.view(x.shape[0], g, c // g, h, w).transpose(1, 2).reshape(x.shape[0], c, h, w),
                          f"channel_shuffle {g}"), c, h, w
        if kind == "transpose":
            return Lambda(lambda x: x.transpose(2, 3).contiguous(), "transpose hw"), c, w, h
        return None

    def model(self):
        r = self.r
        n = int(self.choice([1, 1, 1, 2, 3]))
        c, h, w = int(r.integers(1, 17)), int(r.integers(1, 33)), int(r.integers(1, 33))
        if r.random() < 0.3:
            c = int(self.choice([4, 8, 16]))
        shape = (n, c, h, w)
        layers = []
        depth = int(r.integers(1, 7))
        tries = 0
        while len(layers) < depth and tries < 100:
            tries += 1
            got = self.layer(c, h, w)
            if got is None or got[1] * got[2] * got[3] < 1 or got[1] * got[2] * got[3] > 65536:
                continue
            m, c, h, w = got
            layers.append(m)
        if r.random() < 0.3:
            layers.append(nn.Flatten())
            layers.append(nn.Linear(c * h * w, int(r.integers(1, 20))))
        return nn.Sequential(*layers), shape



class Attn(nn.Module):
    def __init__(self, r, d, heads, mask_kind, written, scale_where, s, kv_from_linear, causal):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d) if r.random() < 0.7 else nn.Identity()
        self.h, self.written, self.scale_where, self.causal = heads, written, scale_where, causal
        self.mask_kind = mask_kind
        # The causal mask as a constant (torch.triu exports from opset 14 only).
        self.register_buffer("future", torch.from_numpy(np.triu(np.ones((s, s), dtype=bool), 1)))
        if mask_kind == "additive":
            m = np.where(r.random((1, 1, 1, s)) < 0.3, -10000.0, 0.0).astype(np.float32)
            self.register_buffer("mask", torch.from_numpy(m))
        elif mask_kind == "full":
            self.register_buffer("mask", torch.from_numpy(r.uniform(-1, 1, (1, heads, s, s)).astype(np.float32)))

    def forward(self, x):
        b, s, d = x.shape
        h = self.h
        def split(t):
            return t.view(b, s, h, d // h).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        sc = 1.0 / (d // h) ** 0.5
        if self.scale_where == "q":
            q = q * sc
            a = q @ k.transpose(-1, -2)
        elif self.scale_where == "div":
            a = (q @ k.transpose(-1, -2)) / (d // h) ** 0.5
        else:
            a = (q @ k.transpose(-1, -2)) * sc
        if self.mask_kind != "none":
            a = a + self.mask
        if self.causal:
            a = a.masked_fill(self.future[:s, :s], float("-inf"))
        if self.written:
            e = torch.exp(a - a.max(dim=-1, keepdim=True).values)
            p = e / e.sum(dim=-1, keepdim=True)
        else:
            p = torch.softmax(a, dim=-1)
        return self.o((p @ v).transpose(1, 2).reshape(b, s, d))


class SequenceGen:
    """Random layers over a (B, S, D) tensor: attention (heads, masks, scalings, causal), MLPs,
    norms, 1-D and 3-D convolutions, recurrent layers, gathers, scatters, sorts, reductions."""
    def __init__(self, r):
        self.r = r

    def choice(self, xs):
        return xs[self.r.integers(len(xs))]

    def layer(self, s, d):
        r = self.r
        kind = self.choice(["linear", "linear", "ln", "act", "attn", "attn", "attn", "residual", "conv1d", "softmax",
                            "reduce", "mlp", "rms", "slice", "transpose_mm", "misc", "misc", "misc", "misc"])
        if kind == "linear":
            e = int(r.integers(1, 97))
            return nn.Linear(d, e, bias=bool(r.random() < 0.8)), s, e
        if kind == "ln":
            return nn.LayerNorm(d, eps=float(self.choice([1e-5, 1e-12, 1e-6]))), s, d
        if kind == "rms":
            return Lambda(lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), "rmsnorm"), s, d
        if kind == "act":
            a = self.choice([nn.GELU(), nn.GELU("tanh"), nn.ReLU(), nn.SiLU(), nn.Tanh(), nn.Sigmoid()])
            return a, s, d
        if kind == "attn":
            divs = [h for h in range(1, d + 1) if d % h == 0 and d // h <= 128]
            if not divs:
                return None
            m = Attn(r, d, int(self.choice(divs)), self.choice(["none", "none", "additive", "full"]),
                     bool(r.random() < 0.3), self.choice(["q", "div", "mul"]), s, True, bool(r.random() < 0.25))
            return m, s, d
        if kind == "residual":
            inner = self.layer(s, d)
            if inner is None or inner[1:] != (s, d):
                return None
            m = inner[0]
            mod = Lambda(lambda x: x + m(x), f"residual({m})")
            mod.inner = m if isinstance(m, nn.Module) else None
            return mod, s, d
        if kind == "mlp":
            e = int(r.integers(1, 4)) * d
            return nn.Sequential(nn.Linear(d, e), nn.GELU(), nn.Linear(e, d)), s, d
        if kind == "conv1d":
            k = int(self.choice([1, 3, 5]))
            e = int(r.integers(1, 65))
            divs = [g for g in range(1, min(d, e) + 1) if d % g == 0 and e % g == 0]
            g = int(self.choice(divs))
            c = nn.Conv1d(d, e, k, padding=k // 2, groups=g)
            mod = Lambda(lambda x: c(x.transpose(1, 2)).transpose(1, 2), f"conv1d {d}->{e} k{k} g{g}")
            mod.c = c
            return mod, s, e
        if kind == "softmax":
            return Lambda(lambda x: torch.softmax(x, -1), "softmax"), s, d
        if kind == "reduce":
            return Lambda(lambda x: x - x.mean(1, keepdim=True), "center over seq"), s, d
        if kind == "slice":
            if s < 2:
                return None
            a = int(r.integers(0, s - 1))
            return Lambda(lambda x: x[:, a:, :], f"seq[{a}:]"), s - a, d
        if kind == "transpose_mm":
            return Lambda(lambda x: (x @ x.transpose(1, 2) * 0.05).softmax(-1) @ x, "x xT x"), s, d
        if kind == "misc":
            op = self.choice(["gather", "gather_el", "cumsum", "topk", "sort", "flip", "roll", "repeat", "where",
                              "normalize", "lstm", "gru", "einsum", "argmax", "maxpool1d", "avgpool1d", "conv3d",
                              "scatter", "tile", "cos", "erf_gelu", "pow", "std", "var", "prod", "logsumexp",
                              "hardtanh", "expm1", "atan", "round", "nonzero_mask", "cummax_like"])
            if op == "gather":
                idx = torch.from_numpy(r.integers(0, d, int(r.integers(1, 2 * d + 1))))
                return Lambda(lambda x: x[:, :, idx], f"gather {idx.numel()}"), s, idx.numel()
            if op == "gather_el":
                k = int(r.integers(1, d + 1))
                idx = torch.from_numpy(r.integers(0, d, (1, s, k)))
                return Lambda(lambda x: torch.gather(x, 2, idx.expand(x.shape[0], s, k)), f"gather_elements {k}"), s, k
            if op == "scatter":
                idx = torch.from_numpy(np.stack([r.permutation(d) for _ in range(s)])[None])
                return Lambda(lambda x: torch.zeros_like(x).scatter(2, idx.expand(x.shape[0], s, d), x), "scatter perm"), s, d
            if op == "cumsum":
                ax = int(self.choice([1, 2]))
                rev = bool(r.random() < 0.3)
                f = (lambda x: torch.flip(torch.cumsum(torch.flip(x, [ax]), ax), [ax])) if rev else (lambda x: torch.cumsum(x, ax))
                return Lambda(f, f"cumsum {ax} rev={rev}"), s, d
            if op == "topk":
                k = int(r.integers(1, d + 1))
                big = bool(r.random() < 0.5)
                return Lambda(lambda x: torch.topk(x, k, -1, largest=big)[0], f"topk {k} {big}"), s, k
            if op == "sort":
                return Lambda(lambda x: torch.sort(x, -1, descending=True)[0], "sort"), s, d
            if op == "flip":
                return Lambda(lambda x: torch.flip(x, [1, 2]), "flip"), s, d
            if op == "roll":
                sh = int(r.integers(-d, d))
                return Lambda(lambda x: torch.roll(x, sh, 2), f"roll {sh}"), s, d
            if op in ("repeat", "tile"):
                if s * 2 * d > 65536:
                    return None
                return Lambda(lambda x: x.repeat(1, 2, 1), "repeat"), s * 2, d
            if op == "where":
                t = float(r.uniform(-0.5, 0.5))
                return Lambda(lambda x: torch.where(x > t, x, x * 0.1 - 1), f"where {t}"), s, d
            if op == "normalize":
                return Lambda(lambda x: F.normalize(x, dim=-1), "normalize"), s, d
            if op in ("lstm", "gru"):
                hdim = int(r.integers(1, 33))
                bi = bool(r.random() < 0.4)
                m = (nn.LSTM if op == "lstm" else nn.GRU)(d, hdim, batch_first=True, bidirectional=bi,
                                                           num_layers=int(self.choice([1, 1, 2])))
                mod = Lambda(lambda x: m(x)[0], f"{op} {d}->{hdim} bi={bi} layers={m.num_layers}")
                mod.m = m
                return mod, s, hdim * (2 if bi else 1)
            if op == "einsum":
                w = torch.from_numpy(r.uniform(-1, 1, (d, 7)).astype(np.float32))
                return Lambda(lambda x: torch.einsum("bsd,de->bse", x, w), "einsum"), s, 7
            if op == "argmax":
                return Lambda(lambda x: torch.cat([x, x.argmax(-1, keepdim=True).float()], -1), "argmax cat"), s, d + 1
            if op in ("maxpool1d", "avgpool1d"):
                k = int(self.choice([2, 3]))
                st = int(self.choice([1, 2]))
                if d < k:
                    return None
                ceil = bool(r.random() < 0.5)
                if op == "maxpool1d":
                    m = nn.MaxPool1d(k, st, ceil_mode=ceil)
                else:
                    m = nn.AvgPool1d(k, st, ceil_mode=ceil, count_include_pad=False)
                ow = (d - k + (st - 1 if ceil else 0)) // st + 1
                if ceil and (ow - 1) * st >= d:
                    ow -= 1
                return Lambda(lambda x: m(x), f"{op} k{k} s{st} ceil={ceil}"), s, ow
            if op == "conv3d":
                if d % 4 or s < 2:
                    return None
                c = nn.Conv3d(1, 2, (2, 3, 1), padding=(0, 1, 0))
                mod = Lambda(lambda x: c(x.reshape(x.shape[0], 1, s, 4, d // 4)).reshape(x.shape[0], s - 1, 2 * d),
                             "conv3d")
                mod.c = c
                return mod, s - 1, 2 * d
            if op == "cos":
                return Lambda(lambda x: torch.cos(x) + torch.sin(2 * x), "cos sin"), s, d
            if op == "erf_gelu":
                return Lambda(lambda x: 0.5 * x * (1 + torch.erf(x / 1.41421356)), "erf gelu"), s, d
            if op == "pow":
                return Lambda(lambda x: torch.pow(x.abs() + 0.1, 1.7), "pow"), s, d
            if op == "std":
                return Lambda(lambda x: (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-3), "std"), s, d
            if op == "var":
                return Lambda(lambda x: x * x.var(1, keepdim=True, unbiased=False), "var"), s, d
            if op == "prod":
                return Lambda(lambda x: torch.cat([x, torch.prod(torch.tanh(x[:, :, :4]), -1, keepdim=True)], -1), "prod"), s, d + 1
            if op == "logsumexp":
                return Lambda(lambda x: x - torch.logsumexp(x, -1, keepdim=True), "logsumexp"), s, d
            if op == "hardtanh":
                return nn.Hardtanh(-0.4, 0.6), s, d
            if op == "expm1":
                return Lambda(lambda x: torch.expm1(x.clamp(max=3)), "expm1"), s, d
            if op == "atan":
                return Lambda(lambda x: torch.atan(x) + torch.atan(2 * x), "atan"), s, d
            if op == "round":
                return Lambda(lambda x: torch.round(x * 3) + torch.floor(x * 2), "round"), s, d
            if op == "nonzero_mask":
                return Lambda(lambda x: x * (x.abs() > 0.5).float() + (x < 0).logical_and(x > -0.2).float(), "masks"), s, d
            if op == "cummax_like":
                return Lambda(lambda x: torch.amax(x, 1, keepdim=True).expand(-1, s, -1) - x, "amax expand"), s, d
        return None

    def model(self):
        r = self.r
        b = int(self.choice([1, 1, 2, 3]))
        s = int(self.choice([1, 2, 5, 8, 16, 31, 64, 77, 128]))
        d = int(self.choice([8, 12, 16, 32, 48, 64, 96, 128, 192, 256]))
        shape = (b, s, d)
        layers = []
        depth = int(r.integers(1, 6))
        tries = 0
        while len(layers) < depth and tries < 100:
            tries += 1
            got = self.layer(s, d)
            if got is None:
                continue
            m, s, d = got
            layers.append(m)
        return nn.Sequential(*layers), shape


def max_error(got, want):
    """The largest |got - want| over want's finite elements; inf where an infinity or NaN of one
    is not the same in the other (-inf where PyTorch computes -inf: a max pool over padding
    alone)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not want.size:
        return 0.0
    finite = np.isfinite(want)
    if not np.array_equal(np.isnan(got), np.isnan(want)) or not np.array_equal(got[np.isinf(want)], want[np.isinf(want)]):
        return float("inf")
    if not finite.any():
        return 0.0
    return float(np.abs(got[finite] - want[finite]).max())  # a non-finite got there: inf or nan, not <= any bound


def magnitude(want):
    """max(|want|, 1) over its finite elements: what the tolerances are relative to"""
    finite = np.abs(want[np.isfinite(want)]) if want.size else want
    return max(float(finite.max()), 1.0) if finite.size else 1.0


def ort_verdict(d, path, x, want, got):
    """What ONNX Runtime computes of the exported file, against PyTorch and tunefarm: (a line
    saying so, its output or None)."""
    folder = os.environ.get("TUNEFARM_ORT_DIR", os.path.join(os.path.expanduser("~"), ".cache", "tunefarm", "ort"))
    if not os.path.isdir(os.path.join(folder, "node_modules", "onnxruntime-node")):
        return "(ONNX Runtime not installed)", None
    script = os.path.join(d, "ort1.js")
    with open(script, "w") as f:
        f.write("""const fs = require('fs'); const ort = require('onnxruntime-node');
(async () => {
  const [model, input, dims, output] = process.argv.slice(2);
  const s = await ort.InferenceSession.create(model, {intraOpNumThreads: 1, graphOptimizationLevel: 'disabled'});
  const raw = fs.readFileSync(input);
  const data = new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
  const out = await s.run({[s.inputNames[0]]: new ort.Tensor('float32', data, JSON.parse(dims))});
  const t = out[s.outputNames[0]];
  fs.writeFileSync(output, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
})().catch(e => { console.error(String(e)); process.exit(1); });
""")
    raw, out = os.path.join(d, "x.raw"), os.path.join(d, "ort.raw")
    x.tofile(raw)
    env = dict(os.environ, NODE_PATH=os.path.join(folder, "node_modules"))
    r = subprocess.run(["node", script, path, raw, json.dumps(list(x.shape)), out], capture_output=True, text=True,
                       env=env)
    if r.returncode:
        return "ONNX Runtime fails: " + r.stderr.strip()[-300:], None
    o = np.fromfile(out, np.float32)
    if o.size != want.size:
        return f"ONNX Runtime computes {o.size} elements, PyTorch {want.size}", None
    o = o.reshape(want.shape)
    vs_tf = f"{max_error(got, o):.3g}" if got is not None and got.shape == want.shape else "-"
    return f"ONNX Runtime against PyTorch {max_error(o, want):.3g}, against tunefarm {vs_tf}", o


# The cuda build of a model, scheduled for the GPU and run serially on this CPU.
EMULATED_CUDA = ["-t", "cuda -arch=sm_90", "--emulate-gpu"]

# Layers whose output jumps where their input crosses a value: a reduced-precision build may land
# on the other side, so such modules are not compared at bf16 or fp16.
DISCONTINUOUS = ("floor", "sign", "round", "masks", "argmax", "where")


def discontinuous(model):
    """whether the module has a layer of DISCONTINUOUS (by its printed description)"""
    return any(w in str(model) for w in DISCONTINUOUS)

# bf16 and fp16 CPU builds (convolutions and MatMul/Gemm with constant weights on operands rounded
# to 16 bits, float32 sums) against PyTorch's float32 output: the largest error of the relative
# size of a few roundings through a deep random net; a wrong kernel is off by the output's size.
# Plus ten times what PyTorch's output moves by with its weights and input perturbed by that
# precision's rounding (rounding_noise): a LayerNorm of a row that is nearly constant, or a
# softmax of large scores, magnifies any rounding before it.
# The cuda build's tensor-core precisions (every MatMul and Gemm), emulated on this CPU as
# generic kernels of the same rounding: TF32 keeps 10 bits of the operands.
PRECISION_TOL = {"bf16": 5e-2, "fp16": 1e-2, "tf32": 1e-2}


def rounding_noise(model, x, want, eps):
    """How far PyTorch's float32 output moves (the largest of two seeded tries) with each weight
    and input element scaled by a random factor in [1 - eps, 1 + eps]: the error a build that
    rounds its products' operands to a precision of that eps may make and still be right."""
    worst = 0.0
    for t in range(2):
        g = torch.Generator().manual_seed(t)
        m = copy.deepcopy(model)
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(1 + eps * (2 * torch.rand(p.shape, generator=g) - 1))
            xt = torch.from_numpy(x) * (1 + eps * (2 * torch.rand(x.shape, generator=g) - 1))
            y = m(xt).numpy()
        if y.shape != want.shape or not want.size:
            return 0.0
        e = max_error(y, want)
        worst = max(worst, e if np.isfinite(e) else 0.0)
    return worst


def check_precisions(build_and_run, model, x, want, r, notes):
    """The CPU library at --precision bf16 and fp16, and the emulated cuda build at one of fp16,
    bf16 and tf32, within PRECISION_TOL of PyTorch's float32."""
    if discontinuous(model):
        notes.append("(precision: not compared, a discontinuous layer)")
        return []
    problems = []
    gpu = str(r.choice(["fp16", "bf16", "tf32"]))
    noise = {prec: rounding_noise(model, x, want, eps) for prec, eps in (("bf16", 2.0**-8), ("fp16", 2.0**-11))}
    noise["tf32"] = noise["fp16"]  # 10 bits of the operands, as fp16
    mag = magnitude(want)
    notes.append(f"(rounding noise bf16 {noise['bf16'] / mag:.2g} fp16 {noise['fp16'] / mag:.2g})")
    for tag, prec, flags in (("cpu_bf16", "bf16", []), ("cpu_fp16", "fp16", []),
                             ("gpu_emulated_" + gpu, gpu, EMULATED_CUDA)):
        _, why = build_and_run(tag, ["--precision", prec, *flags], tol=PRECISION_TOL[prec], slack=10 * noise[prec])
        if why:
            problems.append(why)
    return problems


def check_dims(build_and_run, model, x, opset, r, d, notes):
    """The module exported with a dynamic axis 0 ('batch') and compiled with --dim: one bucket of
    the input's batch, two buckets, or (with --pad-batch) a larger bucket than the input's, where
    the compiler says the model keeps its rows apart; run at the input's batch and at another.
    A sequence's axis 1 is dynamic too at random ('seq', bound to the input's length). The CPU
    library and the emulated cuda build."""
    path = os.path.join(d, "dyn.onnx")
    seq = x.ndim == 3 and r.random() < 0.5
    axes = {0: "batch", 1: "seq"} if seq else {0: "batch"}
    try:
        with torch.no_grad():
            torch.onnx.export(model, (torch.from_numpy(x),), path, opset_version=opset, input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": axes, "y": {0: "batch"}})
    except Exception as e:
        notes.append(f"(dims: PyTorch cannot export a dynamic batch: {str(e).splitlines()[0][:120]})")
        return []
    b = x.shape[0]
    other = int(r.choice([1, 2, 4, 5]))
    how = r.choice(["one", "two", "pad"])
    sizes = {"one": [b], "two": sorted({b, other}), "pad": sorted({b + other} | ({1} if b > 1 else set()))}[how]
    flags = ["--dim", "batch=" + ",".join(str(v) for v in sizes)] + (["--pad-batch"] if how == "pad" else [])
    flags += ["--dim", f"seq={x.shape[1]}"] if seq else []
    problems = []
    runs = [x]
    if how == "two" and other != b:  # the other bucket too, with its own rows
        runs.append(np.random.default_rng(int(r.integers(1 << 30))).uniform(-2, 2, (other,) + x.shape[1:]).astype(np.float32))
    for i, xi in enumerate(runs):
        with torch.no_grad():
            want = model(torch.from_numpy(xi)).numpy()
        x_in = os.path.join(d, f"x_dims{i}.npy")
        np.save(x_in, xi)
        for tag, target in (("dims", []), ("dims_gpu_emulated", EMULATED_CUDA)):
            _, why = build_and_run(tag, flags + target, model_file=path, x_in=x_in, want=want,
                                   lib=os.path.join(d, tag + ".so") if i else None)
            if why and i == 0 and how == "pad" and "are not kept apart" in why:
                notes.append("(dims: --pad-batch refused, the rows are not kept apart)")
                return []
            if why:
                problems.append(f"{why} [{' '.join(flags)}, batch {xi.shape[0]}]")
    notes.append(f"dims {' '.join(flags)}")
    return problems


# A QDQ model's int8 build (fold-qdq: uint8 x int8 kernels) against its float32 build of the same
# QDQ graph (--disable-pass fold-qdq): the same quantized values, summed in another order, so a
# value at a rounding boundary may land one quantum off and carry through later layers; a wrong
# kernel (packing, zero point, scales) is off by the output's size.
QDQ_TOL = 2e-2


def check_qdq(tunefarm, build_and_run, path, x, x_file, r, d, notes):
    """`tunefarm quantize` of the model (calibrated on the input and two seeded samples, a random
    method, per tensor or per channel, uint8 or symmetric int8 activations), its int8 CPU build
    and its emulated cuda build (QuantizeLinear/DequantizeLinear as float32 arithmetic) against
    its float32 CPU build."""
    q = os.path.join(d, "q.onnx")
    calib = os.path.join(d, "calib.npy")
    np.save(calib, np.random.default_rng(int(r.integers(1 << 30))).uniform(-2, 2, x.shape).astype(np.float32))
    flags = ["--method", str(r.choice(["minmax", "percentile", "entropy"]))]
    flags += ["--per-tensor"] if r.random() < 0.3 else []
    flags += ["--symmetric"] if r.random() < 0.3 else []
    c = subprocess.run([tunefarm, "quantize", path, "-o", q, "--input", "x=" + x_file, "--input", "x=" + calib, *flags],
                       capture_output=True, text=True, timeout=600)
    if c.returncode and "nothing to quantize" in c.stderr:
        notes.append("(qdq: no product to quantize)")
        return []
    if c.returncode:
        return [f"quantize {' '.join(flags)} exited {c.returncode}: {(c.stderr or c.stdout).strip()[-400:]}"]
    floats, why = build_and_run("qdq_float", ["--disable-pass", "fold-qdq"], model_file=q, tol=float("inf"))
    if why:
        return [f"{why} [quantize {' '.join(flags)}]"]
    info = subprocess.run([tunefarm, "import", q, "--json"], capture_output=True, text=True, timeout=600)
    folded = json.loads(info.stdout).get("int8_nodes", 0) if info.returncode == 0 else "?"
    problems = []
    for tag, build in (("qdq_int8", []), ("qdq_gpu_emulated", EMULATED_CUDA)):
        _, why = build_and_run(tag, build, model_file=q, want=floats.astype(np.float64), tol=QDQ_TOL)
        if why:
            problems.append(f"{why} (against the float32 build of the QDQ model) [quantize {' '.join(flags)}]")
    notes.append(f"qdq {' '.join(flags)} int8 nodes {folded}")
    return problems


def float32_noise(model, x, want):
    """10x how far PyTorch's float32 output is from its float64 one, where that is more than the
    1e-4 tolerance's share: a module whose output cancels (a sum of normalized values) has an
    answer float32 rounding decides, and another order of the same sums is as right. 0 where
    the module does not run in float64 (constants of float32 it mixes with its input) and where a
    layer's output jumps (float64 may land on the other side: not noise)."""
    if discontinuous(model):
        return 0.0
    try:
        with torch.no_grad():
            exact = copy.deepcopy(model).double()(torch.from_numpy(x.astype(np.float64))).numpy()
    except Exception:
        return 0.0
    if exact.shape != want.shape or not want.size:
        return 0.0
    e = max_error(want, exact)
    return 10.0 * e if np.isfinite(e) and e > 1e-5 * magnitude(want) else 0.0


def check(tunefarm, fake_cuda, kind, seed, d, variants=()):
    """One seed: ("ok", ""), ("skip", why) where PyTorch cannot run or export the module, or
    ("FAIL", what went wrong)."""
    torch.manual_seed(seed)
    gen = (ImageGen if kind == "image" else SequenceGen)(np.random.default_rng(seed))
    model, shape = gen.model()
    model.eval()
    x = np.random.default_rng(seed + 1).uniform(-2, 2, shape).astype(np.float32)
    opset = int(gen.choice([11, 13, 17]))
    path = os.path.join(d, "m.onnx")
    try:
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        torch.onnx.export(model, (torch.from_numpy(x),), path, opset_version=opset, input_names=["x"],
                          output_names=["y"])
    except Exception as e:  # a module PyTorch cannot run or export at this shape: no model to check
        return "skip", f"PyTorch: {str(e).splitlines()[0][:200]}"
    if np.isnan(want).any():  # infinities combined (an interpolation of a max pool over padding alone)
        return "skip", "PyTorch's output has NaN: what arithmetic on infinities gives is not ONNX's to define"
    x_file = os.path.join(d, "x.npy")
    np.save(x_file, x)
    slack = float32_noise(model, x, want)

    def build_and_run(tag, flags, env=None, before_run=None, tol=1e-4, model_file=path, x_in=x_file, want=want,
                      lib=None, slack=slack):
        """compile (unless given the library) and run one build: (its output, None or what is wrong)"""
        if lib is None:
            lib = os.path.join(d, tag + ".so")
            c = subprocess.run([tunefarm, "compile", "--model", model_file, "--no-db", *flags, "-o", lib],
                               capture_output=True, text=True, timeout=600)
            if c.returncode:
                return None, f"{tag}: compile exited {c.returncode}: {(c.stderr or c.stdout).strip()[-400:]}"
        if before_run:
            before_run(lib)
        y = os.path.join(d, tag + ".npy")
        r = subprocess.run([tunefarm, "run", "--model", lib, "--input", "x=" + x_in, "--output", y, "--repeat", "1"],
                           capture_output=True, text=True, env=env, timeout=600)
        if r.returncode:
            return None, f"{tag}: run exited {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}"
        got = np.load(y)
        if got.shape != want.shape:
            return got, f"{tag}: shape {got.shape}, PyTorch's {want.shape}"
        mag = magnitude(want)
        err = max_error(got, want)
        errors[tag] = err / mag
        if model_file == path and x_in == x_file:
            outputs[tag] = got
        if not err <= tol * mag + slack:
            return got, (f"{tag}: max error {err:.3g} of magnitude {mag:.3g}" +
                         (f" (allowed {tol * mag + slack:.3g}, {slack:.3g} of it for how the module magnifies rounding)"
                          if slack else ""))
        return got, None

    problems = []
    errors = {}
    outputs = {}  # the float32 builds' outputs
    got = None
    for tag, flags in (("cpu", []), ("gpu_emulated", EMULATED_CUDA)):
        out, why = build_and_run(tag, flags)
        got = out if out is not None else got
        if why:
            problems.append(why)
    if fake_cuda and not problems:
        aliases = os.path.join(d, "aliases")
        emulated = os.path.join(d, "gpu_emulated.so")
        env = dict(os.environ, LD_LIBRARY_PATH=fake_cuda, TF_FAKE_CUDA_ALIASES=aliases, TF_FAKE_CUDA_KERNELS=emulated)

        def aliases_for(lib):
            with open(emulated + ".json") as e, open(lib + ".json") as g:
                models_for_tests.write_fake_cuda_aliases(json.load(e), json.load(g), aliases)

        _, why = build_and_run("gpu_device", ["-t", "cuda -arch=sm_90"], env=env, before_run=aliases_for)
        if why:
            problems.append(why)
    notes = []
    float32_failed = bool(problems)
    if not problems and "precision" in variants:
        problems += check_precisions(build_and_run, model, x, want, np.random.default_rng(seed + 4), notes)
    if not problems and "qdq" in variants:
        problems += check_qdq(tunefarm, build_and_run, path, x, x_file, np.random.default_rng(seed + 3), d, notes)
    if not problems and "dims" in variants:
        problems += check_dims(build_and_run, model, x, opset, np.random.default_rng(seed + 2), d, notes)
    notes += [f"{tag} {e:.2g}" for tag, e in errors.items() if tag.startswith(("cpu_", "qdq", "gpu_emulated_"))]
    if not problems:
        return "ok", " ".join(notes)
    line, ort = ort_verdict(d, path, x, want, got)
    report = f"{kind} seed {seed} (input {list(shape)}, opset {opset}):\n  " + "\n  ".join(problems) + f"\n  {line}\n{model}"
    # Every float32 build computed what ONNX Runtime computes of the file, and PyTorch did not:
    # the exporter wrote another model than the module (PyTorch 1.13's are known to).
    mag = magnitude(want)
    if (float32_failed and ort is not None and len(outputs) >= 2 and
            all(max_error(o, ort) <= 1e-4 * mag + slack for o in outputs.values()) and
            not max_error(ort, want) <= 1e-4 * mag + slack):
        return "exporter", report
    return "FAIL", report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tunefarm")
    ap.add_argument("fake_cuda", nargs="?")
    ap.add_argument("--seeds", default="0:10", help="A:B, the seeds of each kind")
    ap.add_argument("--kinds", default="image,sequence")
    ap.add_argument("--variants", default="precision,qdq,dims",
                    help="builds beyond float32 at the input's shape, one a seed in turn: precision (CPU bf16 "
                         "and fp16), qdq (the model quantized, its int8 CPU build), dims (a dynamic batch axis "
                         "bound by --dim buckets); 'none' for none")
    ap.add_argument("--every-variant", action="store_true", help="every variant on every seed")
    a = ap.parse_args()
    warnings.simplefilter("ignore")  # the exporter's notes on shape inference, not the test's findings
    variants = [v for v in a.variants.split(",") if v != "none"]
    for v in variants:
        if v not in ("precision", "qdq", "dims"):
            ap.error(f"--variants: unknown variant '{v}' (precision, qdq, dims, none)")
    first, last = (int(v) for v in a.seeds.split(":"))
    if os.environ.get("TF_SANITIZED") == "1":
        last = min(last, first + 3)
    failures = exporter = 0
    for kind in a.kinds.split(","):
        for seed in range(first, last):
            with tempfile.TemporaryDirectory() as d:
                these = variants if a.every_variant or not variants else [variants[seed % len(variants)]]
                verdict, why = check(a.tunefarm, a.fake_cuda, kind, seed, d, these)
            if verdict == "FAIL":
                failures += 1
                print("FAIL " + why + f"\n  repeat: {sys.argv[0]} {a.tunefarm} {a.fake_cuda or ''} --seeds {seed}:{seed + 1}"
                      f" --kinds {kind}", flush=True)
            elif verdict == "exporter":
                exporter += 1
                print("not the module (ONNX Runtime computes the file as tunefarm does, not as PyTorch): " + why,
                      flush=True)
            else:
                print(f"{verdict:4} {kind} seed {seed} {why}", flush=True)
    print(f"{failures} of {len(a.kinds.split(',')) * (last - first)} random models failed" +
          (f"; {exporter} exported as another model than the module" if exporter else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
