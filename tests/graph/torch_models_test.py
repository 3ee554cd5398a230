#!/usr/bin/env python3
"""Real models exported by PyTorch (Debian's python3-torch, python3-torchvision): random
weights with fixed seeds, exported at test time (nothing stored), imported by `tunefarm
import`, run with `tunefarm run --model --reference` and compiled (`tunefarm compile --model`,
then `tunefarm run --model lib.so`; and for a CUDA GPU, its kernels run serially here:
`--emulate-gpu`), and all compared with PyTorch's own outputs: within 1e-4 of the output's
magnitude, and classifiers pick the same class.

And the library compiled for the GPU itself, run through the FAKE libcuda in FAKE_CUDA_DIR,
which runs the emulated build's kernels where the library launches them.

Usage: torch_models_test.py TUNEFARM_BINARY [FAKE_CUDA_DIR]
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from typing import List
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from export_model import Encoder  # noqa: E402
import models_for_tests  # noqa: E402


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 48)
        self.c = torch.nn.Linear(48, 10)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.nn.functional.gelu(self.a(x)))))


class Head(torch.nn.Module):
    """An MLP whose output is the predicted class (int64) or a mask of its positive logits (bool)."""
    def __init__(self, kind):
        super().__init__()
        self.mlp, self.kind = MLP(), kind

    def forward(self, x):
        y = self.mlp(x) + 3 * x[:, :10]  # the input spreads the classes: a random MLP alone favours one
        return y.argmax(-1) if self.kind == "argmax" else y > 0


class Attention(torch.nn.Module):
    """Self-attention with separate Q, K, V projections (as BERT implementations write it)."""

    def __init__(self, d=64, heads=4, written_out_softmax=False):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.o = torch.nn.Linear(d, d)
        self.heads = heads
        self.written_out_softmax = written_out_softmax

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads

        def split(t):
            return t.view(b, s, h, d // h).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-1, -2) / (d // h) ** 0.5
        if self.written_out_softmax:  # as some exporters and hand-written models have it
            e = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
            a = e / e.sum(dim=-1, keepdim=True)
        else:
            a = torch.softmax(scores, dim=-1)
        return self.o((a @ v).transpose(1, 2).reshape(b, s, d))


class Logic(torch.nn.Module):
    """Comparisons, Where (on a computed and on a constant mask), Cast of bools, rounding and
    Mod: bool values inside compiled kernels."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 24)
        self.register_buffer("mask", torch.arange(24) % 3 == 0)

    def forward(self, x):
        y = self.fc(x)
        m = y > 0.1
        a = torch.where(m, torch.floor(y * 3), torch.ceil(y * 2))
        b = torch.where(self.mask, torch.round(y * 4), torch.fmod(y, 0.3))
        c = m.float() * 0.5 + (y <= a).float() - (b == a).float()
        return a + b + c + torch.where(y >= 0, y, y * 0.25)


class Audio1d(torch.nn.Module):
    """A 1-D CNN as audio and sensor models have them: Conv1d (grouped, dilated), BatchNorm1d,
    pooling, reflection padding (Pad), GroupNorm (InstanceNormalization), ELU and SELU; tunefarm runs the 1-D windows as 2-D
    ones of height 1."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv1d(4, 16, 5, padding=2), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
            torch.nn.MaxPool1d(2), torch.nn.ReflectionPad1d(2),
            torch.nn.Conv1d(16, 16, 3, dilation=2, groups=4), torch.nn.GroupNorm(4, 16), torch.nn.ELU(),
            torch.nn.AvgPool1d(3, stride=2), torch.nn.Conv1d(16, 8, 1), torch.nn.SELU())
        self.fc = torch.nn.Linear(8 * 7, 10)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


class NearestUpsampler(torch.nn.Module):
    """Nearest upsampling between convolutions, as opset 9 exports it (Upsample with a scales
    input; its linear mode is not PyTorch's bilinear, so nearest alone)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        f = torch.relu(self.a(x))
        return self.b(torch.nn.functional.interpolate(f, scale_factor=2, mode="nearest"))


class Upsampler(torch.nn.Module):
    """A decoder as segmentation and generative models have it: Resize by bilinear (scale
    factor), nearest (to a size), bilinear with align_corners and bicubic, a grouped
    ConvTranspose with output_padding, joined with Concat."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.t = torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.b = torch.nn.Conv2d(36, 4, 1)

    def forward(self, x):
        f = torch.relu(self.a(x))
        up = torch.nn.functional.interpolate(f, scale_factor=2, mode="bilinear", align_corners=False)
        near = torch.nn.functional.interpolate(f, size=up.shape[-2:], mode="nearest")
        ac = torch.nn.functional.interpolate(f, size=(14, 18), mode="bilinear", align_corners=True)
        cub = torch.nn.functional.interpolate(f, scale_factor=2, mode="bicubic", align_corners=False)
        return self.b(torch.cat([up, near, ac, cub, torch.relu(self.t(f))], 1))


class Pools(torch.nn.Module):
    """Pooling, Concat and Pad after convolutions, so they work on channel blocks: AvgPool
    padded with ceil_mode (pads not counted, then counted), a dilated MaxPool, a Concat of two
    branches along the channels, a squeeze-and-excitation scale, a reflecting Pad, on odd
    image sizes."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.b = torch.nn.Conv2d(16, 16, 1)
        self.fc = torch.nn.Linear(32 * 3 * 3, 10)

    def forward(self, x):
        x = torch.nn.functional.avg_pool2d(torch.relu(self.a(x)), 3, stride=2, padding=1, ceil_mode=True,
                                           count_include_pad=False)
        x = torch.cat([x, self.b(x) - 0.5], 1)
        x = x * torch.sigmoid(torch.nn.functional.adaptive_avg_pool2d(x, 1))  # squeeze and excitation
        x = torch.nn.functional.pad(x, (1, 2, 2, 1), mode="reflect")
        x = torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1, dilation=2, ceil_mode=True)
        x = torch.nn.functional.avg_pool2d(x, 2, padding=1, count_include_pad=True)
        return self.fc(x.flatten(1))


class CeilPoolTail(torch.nn.Module):
    """An output pooled with ceil_mode over padding, where a last window would start in the right
    padding (1 row, padding 1: ONNX and PyTorch leave it out). PyTorch's exporter declares the
    output as its older shape inference has it ([1, 4, 2, 13] for [1, 4, 1, 12]): tunefarm warns
    and computes PyTorch's shape."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.nn.functional.avg_pool2d(torch.relu(self.conv(x)), 2, stride=2, padding=1, ceil_mode=True,
                                              count_include_pad=False)


class Reductions(torch.nn.Module):
    """Reductions over a middle axis of rows of 32 (the generic schedule vectorizes the rows'
    positions with the reduction loops around them): sum, max, min, mean, ArgMax, CumSum, TopK,
    a MaxPool whose image width is a multiple of 16, and a row-wise Softmax of 32; after a Linear."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)

    def forward(self, x):
        x = self.fc(x)
        parts = [x.sum(1), x.amax(1), x.amin(1), x.mean(1), x.argmax(1).float(), torch.cumsum(x, 1).flatten(1),
                 torch.topk(x, 3, dim=1).values.flatten(1),
                 torch.nn.functional.max_pool2d(x.unsqueeze(1), (3, 1), stride=1, padding=(1, 0)).flatten(1),
                 torch.softmax(x, -1).flatten(1)]
        return torch.cat(parts, 1)


class Recurrent(torch.nn.Module):
    """Sequence models: a 2-layer bidirectional batch-first LSTM, a GRU (PyTorch exports
    linear_before_reset=1) and a bidirectional ReLU RNN; tunefarm imports each as its time
    steps written out."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 12, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = torch.nn.GRU(24, 10)
        self.rnn = torch.nn.RNN(10, 6, nonlinearity="relu", bidirectional=True)
        self.fc = torch.nn.Linear(12, 5)

    def forward(self, x):
        y, (h, _) = self.lstm(x)
        g, gh = self.gru(y.transpose(0, 1))
        r, _ = self.rnn(g)
        return torch.cat([self.fc(r[-1]), gh[0], h[-1]], 1)


class Video3d(torch.nn.Module):
    """A video CNN as torchvision's r3d_18 and r2plus1d_18 have it: a strided Conv3d stem with
    BatchNorm3d, a (2+1)-D residual block (temporal (3,1,1) and spatial (1,3,3) convolutions),
    a grouped dilated Conv3d, MaxPool3d and AvgPool3d (padded, ceil_mode, pads not counted),
    global pooling; tunefarm runs each 3-D window as 2-D ones over the depth folded into the
    batch."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv3d(3, 8, (3, 5, 5), stride=(1, 2, 2), padding=(1, 2, 2), bias=False),
            torch.nn.BatchNorm3d(8), torch.nn.ReLU())
        self.t = torch.nn.Conv3d(8, 8, (3, 1, 1), padding=(1, 0, 0))
        self.s = torch.nn.Conv3d(8, 8, (1, 3, 3), padding=(0, 1, 1))
        self.g = torch.nn.Conv3d(8, 16, 3, stride=2, dilation=(2, 1, 1), padding=2, groups=4)
        self.fc = torch.nn.Linear(16, 6)
        self.mp = torch.nn.MaxPool3d(3, stride=(1, 2, 2), padding=1)
        self.ap = torch.nn.AvgPool3d(2, stride=(1, 2, 2), padding=1, ceil_mode=True, count_include_pad=False)

    def forward(self, x):
        x = self.mp(self.stem(x))
        x = torch.relu(x + self.s(torch.relu(self.t(x))))
        x = torch.nn.functional.adaptive_avg_pool3d(self.ap(torch.relu(self.g(x))), 1)
        return self.fc(x.flatten(1))


class Text(torch.nn.Module):
    """A text classifier over token ids (int64 inputs): token, position and token-type
    embeddings (Gather by computed indices), a 2-layer transformer encoder with a key padding
    mask from a bool input, a masked mean and a head."""

    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(1000, 64, padding_idx=0)
        self.pos = torch.nn.Embedding(32, 64)
        self.typ = torch.nn.Embedding(2, 64)
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
        self.enc = torch.nn.TransformerEncoder(layer, 2)
        self.head = torch.nn.Linear(64, 5)

    def forward(self, ids, types, mask):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.tok(ids) + self.pos(pos) + self.typ(types)
        x = self.enc(x, src_key_padding_mask=~mask)
        m = mask.unsqueeze(-1).float()
        return self.head((x * m).sum(1) / m.sum(1))

    @staticmethod
    def inputs():
        ids = torch.randint(1, 1000, (2, 12))
        ids[1, 9:] = 0
        types = torch.zeros(2, 12, dtype=torch.long)
        types[:, 6:] = 1
        return {"ids": ids, "types": types, "mask": ids != 0}


class Tokens(torch.nn.Module):
    """Integer arithmetic on token ids inside the model: a greedy step (ArgMax, then the
    embedding of the pick), TopK's values and indices, positions by CumSum of a mask, OneHot,
    floor division and remainder, Clip and Where of int64 values."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.proj = torch.nn.Linear(16, 50)
        self.pos = torch.nn.Embedding(8, 16)

    def forward(self, ids):
        logits = self.proj(self.emb(ids))
        top = logits.topk(3, dim=-1)
        nxt = logits.argmax(-1)
        nxt = torch.where(ids == 0, torch.zeros_like(nxt), nxt)
        nxt = (nxt + 1).clamp(max=49)
        mask = (ids != 0).long()
        pos = torch.cumsum(mask, 1) * mask
        onehot = torch.nn.functional.one_hot(ids // 7 + ids % 3, 10).float()
        return torch.cat([self.emb(nxt) + self.pos(pos), onehot, top.values, top.indices.float()], -1)

    @staticmethod
    def inputs():
        ids = torch.randint(0, 50, (3, 6))
        ids[0, 4:] = 0
        return {"ids": ids}


class DetectHead(torch.nn.Module):
    """A YOLOv5-style detection head: box coordinates decoded by in-place slice assignment,
    which PyTorch exports as ScatterND with constant indices (lower-scatter-nd makes a Gather
    and a Where of each)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 3 * 7, 1)
        self.register_buffer("grid", torch.randn(1, 1, 4, 4, 2))

    def forward(self, x):
        b, _, h, w = x.shape
        y = self.conv(x).view(b, 3, 7, h, w).permute(0, 1, 3, 4, 2).sigmoid()
        y[..., 0:2] = (y[..., 0:2] * 2 - 0.5 + self.grid) * 8
        y[..., 2:4] = (y[..., 2:4] * 2) ** 2
        return y.reshape(b, -1, 7)


class Decoder(torch.nn.Module):
    """A transformer decoder over token ids with a causal mask (generate_square_subsequent_mask:
    Trilu of a constant, which fold-constants evaluates) and cross-attention to a float memory
    input."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 32)
        layer = torch.nn.TransformerDecoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
        self.dec = torch.nn.TransformerDecoder(layer, 1)

    def forward(self, ids, memory):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        return self.dec(self.emb(ids), memory, tgt_mask=mask)

    @staticmethod
    def inputs():
        return {"ids": torch.randint(0, 100, (2, 9)), "memory": torch.randn(2, 5, 32)}


class Qdq(torch.nn.Module):
    """A quantized CNN as PyTorch's fake quantization exports it (QuantizeLinear and
    DequantizeLinear pairs): uint8 activations per tensor, int8 weights per output channel."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.fake_quantize_per_tensor_affine(x, 0.02, 128, 0, 255)
        scales = torch.full((16,), 0.01) + torch.arange(16) * 0.001
        w = torch.fake_quantize_per_channel_affine(self.conv.weight, scales, torch.zeros(16, dtype=torch.int32), 0,
                                                   -128, 127)
        y = torch.relu(torch.nn.functional.conv2d(x, w, self.conv.bias, padding=1))
        y = torch.fake_quantize_per_tensor_affine(y, 0.05, 0, 0, 255).mean((2, 3))
        return self.fc(torch.fake_quantize_per_tensor_affine(y, 0.03, 3, -128, 127))


class Grouped(torch.nn.Module):
    """Grouped convolutions of every shape a model has them (ResNeXt's, RegNet's, a channel
    multiplier, groups no channel block fits), each one kernel: groups of 4 channels in and out
    (lane by lane: a depthwise convolution of width 4), groups of 16 filters over 8 channels, two blocks a
    group, a channel multiplier of 2, and 3 groups of 6 filters (NCHW). And a head of 31 filters,
    computed on 32 (padded) and sliced back."""

    def __init__(self):
        super().__init__()
        conv = torch.nn.Conv2d
        self.stem = torch.nn.Sequential(conv(3, 32, 3, stride=2, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU())
        self.g4 = torch.nn.Sequential(conv(32, 32, 3, padding=1, groups=8, bias=False), torch.nn.BatchNorm2d(32),
                                      torch.nn.ReLU())
        self.g8 = conv(32, 64, 3, padding=1, groups=4)
        self.g32 = conv(64, 64, 1, groups=2)
        self.mult = conv(64, 128, 3, stride=2, padding=1, groups=64)
        self.narrow = conv(128, 24, 1)
        self.odd = conv(24, 18, 3, padding=1, groups=3)
        self.head = conv(18, 31, 1)  # 31 filters: padded to a block of 32
        self.fc = torch.nn.Linear(31, 10)

    def forward(self, x):
        y = self.g4(self.stem(x))
        y = torch.relu(self.g8(y))
        y = torch.relu(self.g32(y) + y)
        y = self.odd(torch.relu(self.narrow(self.mult(y))))
        return self.fc(torch.relu(self.head(y)).mean((2, 3)))


def randomize_batchnorm(model):
    """Give BatchNorm layers statistics that matter (fresh ones are the identity)."""
    g = torch.Generator().manual_seed(7)
    for m in model.modules():
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=g) * 0.1)


class Scripted(torch.nn.Module):
    """Python control flow kept by torch.jit.script, exported as ONNX If, Loop and sequence
    operators: a loop over the input's first axis (a Loop whose trip count is a shape) whose
    steps append to a list (SequenceEmpty, SequenceInsert) that torch.stack joins
    (ConcatFromSequence), a fixed loop of three refinements, and an `if` on a shape (an If
    whose condition folds at import)."""

    def __init__(self):
        super().__init__()
        self.cell = torch.nn.Linear(8, 8)
        self.refine = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.zeros(x.shape[1], 8)
        outs: List[torch.Tensor] = []
        for t in range(x.shape[0]):
            h = torch.tanh(self.cell(x[t]) + h)
            outs.append(h)
        y = torch.stack(outs)
        for i in range(3):
            y = torch.relu(self.refine(y)) + i
        if x.shape[1] > 1:
            y = y * 2
        else:
            y = y - 1
        return y


def models():
    torch.manual_seed(0)
    # name, module, input shape, classifier, opset, constant folding at export
    yield "mlp", MLP(), (3, 32), True, 13, True
    # Outputs of other types than float32: int64 indices and a bool mask.
    yield "mlp_argmax", Head("argmax"), (5, 32), False, 13, True
    yield "mlp_mask", Head("mask"), (5, 32), False, 13, True
    yield "resnet18", torchvision.models.resnet18(num_classes=10), (1, 3, 64, 64), True, 13, True
    # Exported without constant folding: BatchNormalization stays in the graph, and
    # tunefarm's passes fold it.
    yield "resnet18_bn", torchvision.models.resnet18(num_classes=10), (1, 3, 32, 32), True, 11, False
    yield "mobilenet_v2", torchvision.models.mobilenet_v2(num_classes=10), (1, 3, 64, 64), True, 13, True
    yield "grouped", Grouped(), (2, 3, 32, 32), True, 13, True
    yield "encoder", Encoder(64, 4, 128), (1, 16, 64), False, 17, True
    # Before opset 17 LayerNorm is exported decomposed, and GELU always is (through Erf):
    # recognize-composites makes one operator of each.
    yield "encoder_o13", Encoder(64, 4, 128), (2, 8, 64), False, 13, True
    # Separate Q, K, V projections: combine-parallel-matmuls makes one of them.
    yield "attention", Attention(), (1, 12, 64), False, 14, True
    yield "logic", Logic(), (5, 16), False, 13, True
    yield "audio1d", Audio1d(), (2, 4, 33), True, 13, True
    yield "upsampler", Upsampler(), (1, 3, 7, 9), False, 13, True
    yield "pools", Pools(), (1, 3, 13, 15), True, 13, True
    yield "ceil_pool_tail", CeilPoolTail(), (1, 3, 1, 23), False, 13, True
    yield "reductions", Reductions(), (2, 5, 32), False, 13, True
    yield "recurrent", Recurrent(), (3, 7, 8), False, 14, True
    yield "video3d", Video3d(), (2, 3, 6, 12, 14), True, 13, True
    # Softmax written out (ReduceMax, Sub, Exp, ReduceSum with axes as an input, Div):
    # recognize-composites makes it one Softmax.
    # A sequence of 32: the softmax rows (and LayerNorm's 64) reduce in two stages, 16 lanes
    # first (node_te's KeptReduction::reduce).
    yield "attention_sm", Attention(written_out_softmax=True), (2, 32, 64), False, 13, True
    yield "detect_head", DetectHead(), (1, 8, 4, 4), False, 13, True
    # int64 and bool inputs (given as name -> tensor instead of a float input's shape).
    yield "text", Text(), Text.inputs(), True, 14, True
    yield "tokens", Tokens(), Tokens.inputs(), False, 13, True
    yield "decoder", Decoder(), Decoder.inputs(), False, 14, True
    # QuantizeLinear / DequantizeLinear (computed in float32 on the quantized values).
    yield "qdq", Qdq(), (2, 8, 12, 12), True, 13, True
    # Scripted control flow: If, Loop and sequences written out at import.
    yield "scripted", torch.jit.script(Scripted()), (5, 2, 8), False, 17, True
    # Older opsets, raised to 11 by ONNX's version converter at import: SqueezeNet 1.1 as the
    # ONNX Model Zoo has it (opset 7), Upsample (opset 9) where Resize is now.
    yield "squeezenet_o7", torchvision.models.squeezenet1_1(num_classes=10), (1, 3, 64, 64), True, 7, True
    yield "nearest_o9", NearestUpsampler(), (1, 3, 7, 9), False, 9, True


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def shape_buckets(tunefarm, d):
    """compile --model --dim batch=1,3,4: one library of shape buckets (CPU, and the emulated
    GPU path), each bucket run by the shapes of its --input and matching PyTorch; a shape no
    bucket has and a bucket the library lacks are refused by name."""
    model = Grouped().eval()
    randomize_batchnorm(model)
    path = os.path.join(d, "buckets.onnx")
    torch.onnx.export(model, (torch.randn(2, 3, 24, 24),), path, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    ok = True
    notes = []
    for tag, flags, sizes in (("cpu", [], [1, 3, 4]), ("gpu", ["-t", "cuda -arch=sm_90", "--emulate-gpu"], [1, 2])):
        lib = os.path.join(d, f"buckets_{tag}.so")
        out = run([tunefarm, "compile", "--model", path, "--no-db", "--dim", "batch=" + ",".join(map(str, sizes)),
                   *flags, "-o", lib])
        sidecar = json.load(open(lib + ".json"))
        ok = ok and f"{len(sizes)} shape buckets" in out and len(sidecar["buckets"]) == len(sizes)
        ok = ok and {k["bucket"] for k in sidecar["kernels"]} == set(range(len(sizes)))
        for n in reversed(sizes):
            x = torch.randn(n, 3, 24, 24)
            with torch.no_grad():
                want = model(x).numpy()
            np.save(os.path.join(d, "bx.npy"), x.numpy())
            y = os.path.join(d, "by.npy")
            text = run([tunefarm, "run", "--model", lib, "--input", "x=" + os.path.join(d, "bx.npy"), "--output", y])
            got = np.load(y)
            err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
            ok = ok and err <= 1e-4 * float(np.abs(want).max()) and f"bucket    {sizes.index(n)} of {len(sizes)}" in text
            notes.append(f"{tag} batch {n}: max error {err:.3g}")
    np.save(os.path.join(d, "bx.npy"), np.zeros((5, 3, 24, 24), np.float32))
    lib = os.path.join(d, "buckets_cpu.so")
    for args, message in ((["--input", "x=" + os.path.join(d, "bx.npy")],
                           "--input: no shape bucket of " + lib + " takes x [5, 3, 24, 24]; its buckets: 0: x [1, 3, 24, 24]; "
                           "1: x [3, 3, 24, 24]; 2: x [4, 3, 24, 24]"),
                          (["--bucket", "3"], "--bucket 3: " + lib + " has 3 shape buckets (0 to 2)")):
        r = subprocess.run([tunefarm, "run", "--model", lib, *args], capture_output=True, text=True)
        ok = ok and r.returncode == 2 and message in r.stderr
        notes.append(f"refused: {r.stderr.strip()[:60]}...")
    print(f"{'ok  ' if ok else 'FAIL'} shape buckets: " + "; ".join(notes))
    return ok


def big_weights(tunefarm, d):
    """A model of 64 MiB or more: `compile --model` starts itself again once, glibc's malloc
    asked for transparent huge pages (base/huge_pages.h), and the programs it starts get the
    caller's environment back. Observed through TUNEFARM_LLD, a linker that records its own
    environment, the compile's initial one (/proc/PPID/environ: the restart's marker) and the
    compile's huge pages (where the kernel's transparent huge pages are not off), then links;
    the library matches PyTorch. A small model is compiled without the restart."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096),
                                torch.nn.ReLU(), torch.nn.Linear(4096, 16)).eval()
    x = torch.randn(2, 64)
    with torch.no_grad():
        want = model(x).numpy()
    big, small = os.path.join(d, "big.onnx"), os.path.join(d, "mlp.onnx")
    torch.onnx.export(model, (x,), big, opset_version=13, input_names=["x"], output_names=["y"])
    torch.onnx.export(MLP().eval(), (torch.randn(2, 32),), small, opset_version=13, input_names=["x"], output_names=["y"])
    np.save(os.path.join(d, "bigx.npy"), x.numpy())
    linker = os.path.join(d, "recording-ld.sh")
    with open(linker, "w") as f:
        f.write("#!/bin/sh\nenv > \"$0.env\"\ntr '\\0' '\\n' < /proc/$PPID/environ > \"$0.parent\"\n"
                "grep AnonHugePages /proc/$PPID/smaps_rollup > \"$0.huge\"\nexec ld.lld-19 \"$@\"\n")
    os.chmod(linker, 0o755)
    caller = "glibc.malloc.arena_max=8"
    env = dict(os.environ, TUNEFARM_LLD=linker, GLIBC_TUNABLES=caller)
    ok, notes = True, []
    for path, restarts in ((big, True), (small, False)):
        lib = os.path.join(d, os.path.basename(path) + ".so")
        run([tunefarm, "compile", "--model", path, "--no-db", "-o", lib], env=env)
        mine = open(linker + ".env").read().splitlines()
        parent = open(linker + ".parent").read().splitlines()
        restarted = f"TUNEFARM_CALLER_GLIBC_TUNABLES=={caller}" in parent
        ok = ok and f"GLIBC_TUNABLES={caller}" in mine and not any(v.startswith("TUNEFARM_CALLER") for v in mine)
        ok = ok and restarted == restarts
        huge_kb = int(open(linker + ".huge").read().split()[1])
        thp = "/sys/kernel/mm/transparent_hugepage/enabled"
        if restarts and os.path.exists(thp) and "[never]" not in open(thp).read():
            ok = ok and huge_kb >= 32 << 10
        notes.append(f"{os.path.getsize(path) >> 20} MiB: {'restarted' if restarted else 'not restarted'}, "
                     f"{huge_kb >> 10} MiB on huge pages")
    y = os.path.join(d, "bigy.npy")
    run([tunefarm, "run", "--model", os.path.join(d, "big.onnx.so"), "--input", "x=" + os.path.join(d, "bigx.npy"),
         "--output", y])
    err = float(np.abs(np.load(y) - want).max())
    ok = ok and err <= 1e-4 * float(np.abs(want).max())
    print(f"{'ok  ' if ok else 'FAIL'} big weights: " + "; ".join(notes) + f"; max error {err:.3g}")
    return ok


def main():
    tunefarm = sys.argv[1]
    # The FAKE libcuda's folder (tests/farm/fake_gpu): GPU libraries run through it too.
    fake_cuda = sys.argv[2] if len(sys.argv) > 2 else None
    failures = 0
    # `run --model` sweeps the build folders of model runs that died (killed while compiling).
    stale = os.path.join(tempfile.gettempdir(), "tunefarm-model-999999999")
    os.makedirs(stale, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        # The sanitizer pass (scripts/sanitize.sh, tests/sanitized.h) builds the GPU libraries of
        # every third model; the release pass of every one.
        sanitized = os.environ.get("TF_SANITIZED") == "1"
        for index, (name, model, shape, classifier, opset, folding) in enumerate(models()):
            model.eval()
            randomize_batchnorm(model)
            feeds = shape if isinstance(shape, dict) else {"x": torch.randn(*shape)}
            with torch.no_grad():
                want = model(*feeds.values()).numpy()
            path = os.path.join(d, name + ".onnx")
            # Without folding, TrainingMode.PRESERVE (of a model in eval mode) keeps the
            # exporter from fusing BatchNormalization into the convolutions itself.
            torch.onnx.export(model, tuple(feeds.values()), path, opset_version=opset, input_names=list(feeds),
                              output_names=["y"], do_constant_folding=folding,
                              training=torch.onnx.TrainingMode.EVAL if folding else torch.onnx.TrainingMode.PRESERVE)
            inputs = []
            for n, t in feeds.items():
                np.save(os.path.join(d, n + ".npy"), t.numpy())
                inputs += ["--input", f"{n}={os.path.join(d, n + '.npy')}"]
            info = json.loads(run([tunefarm, "import", path, "--json"]))
            fired = [p["name"] for p in info["passes"] if p["fired"]]
            out = os.path.join(d, "y.npy")
            run([tunefarm, "run", "--model", path, "--reference", *inputs, "--output", out, "--repeat", "1"])
            got = np.load(out)
            # Differences as float64: bool outputs do not subtract.
            def diff(a):
                return float(np.abs(a.astype(np.float64) - want.astype(np.float64)).max())
            mag = float(np.abs(want.astype(np.float64)).max())
            err = diff(got)

            def matches(y, e):
                ok = y.shape == want.shape and y.dtype == want.dtype and e <= 1e-4 * mag
                return ok and (not classifier or (np.argmax(y, axis=-1) == np.argmax(want, axis=-1)).all())

            def compiled_run(tag, *flags, env=None, before_run=None):
                """compile --model FLAGS, then run the library: its sidecar, output and max error.
                before_run(sidecar), if given, is called in between."""
                lib = os.path.join(d, name + tag + ".so")
                run([tunefarm, "compile", "--model", path, "--no-db", *flags, "-o", lib])
                if before_run:
                    before_run(json.load(open(lib + ".json")))
                y = os.path.join(d, "y" + tag + ".npy")
                run([tunefarm, "run", "--model", lib, *inputs, "--output", y, "--repeat", "1"], env)
                got = np.load(y)
                return json.load(open(lib + ".json")), got, diff(got)

            ok = matches(got, err)
            # Compiled: one library (compile --model, then run the library), checked the same way.
            sidecar, gotc, errc = compiled_run("")
            ok_compiled = matches(gotc, errc)
            # The same with every kernel scheduled for a CUDA GPU (its templates for matmuls and
            # convolutions, a 1-D grid for the rest) and its grid run serially on this machine
            # (compile --emulate-gpu): the GPU path's kernels and memory plan, checked the same way.
            gpu_builds = not sanitized or index % 3 == 0
            gpu_note = "GPU builds: not in this pass"
            if gpu_builds:
                gside, gotg, errg = compiled_run("_gpu", "-t", "cuda -arch=sm_90", "--emulate-gpu")
                ok = ok and matches(gotg, errg) and gside["emulates"] == "cuda -arch=sm_90"
                gpu_note = f"GPU-scheduled (emulated): {len(gside['kernels'])} kernels, max error {errg:.3g}"
            if fake_cuda and gpu_builds:
                # And the library compiled for the GPU itself (PTX, launch plan, its runtime),
                # run through the FAKE driver, which runs the emulated build's kernels where the
                # library launches them.
                aliases = os.path.join(d, name + ".aliases")
                env = dict(os.environ, LD_LIBRARY_PATH=fake_cuda, TF_FAKE_CUDA_ALIASES=aliases,
                           TF_FAKE_CUDA_KERNELS=os.path.join(d, name + "_gpu.so"))
                dside, gotd, errd = compiled_run(
                    "_device", "-t", "cuda -arch=sm_90", env=env,
                    before_run=lambda device: models_for_tests.write_fake_cuda_aliases(gside, device, aliases))
                ok = ok and matches(gotd, errd) and dside["device_code"]["format"] == "ptx"
                gpu_note += f"; GPU library through the fake driver: max error {errd:.3g}"
            # Every node after the passes is computed by a kernel.
            # Every node in a kernel, or a Concat computed in place (its inputs written into its output).
            in_kernels = {n for k in sidecar["kernels"] for n in k["nodes"]} | {c["node"] for c in sidecar["in_place"]}
            ok = ok and ok_compiled and len(in_kernels) == info["nodes"]
            ok = ok and [c["node"] for c in sidecar["in_place"]] == [c["node"] for c in info["in_place"]]
            # Kernels of the same code (a repeated layer) are generated once: each names one
            # that was generated; the outputs above are the check that sharing was right.
            generated = {k["function"] for k in sidecar["kernels"] if "same_code_as" not in k}
            shared = [k["same_code_as"] for k in sidecar["kernels"] if "same_code_as" in k]
            ok = ok and all(f in generated for f in shared)
            # Only ceil_pool_tail declares an output of other sizes than it computes: import and
            # the library's sidecar say so (the computed shape is what matched above).
            warned = name == "ceil_pool_tail"
            ok = ok and len(info["warnings"]) == int(warned) and sidecar.get("import_warnings", []) == info["warnings"]
            if name == "qdq":
                # The Conv runs as an int8 kernel (fold-qdq); the Linear, whose weights are float, does not.
                ok = ok and info["quantize_nodes"] == 8 and info["int8_nodes"] == 1
            if name in ("recurrent", "resnet18"):
                ok = ok and len(shared) > 0
            if name.startswith(("resnet", "mobilenet")):
                # Each fused group is one kernel (the residual Add, the Clip run in the conv's
                # kernel).
                ok = ok and len(sidecar["kernels"]) == len(info["fused_kernels"])
                # Every convolution (all have workloads here) goes through its template, in
                # the blocked layout (transform-conv-layout: weights blocked at compile time),
                # with activations converted only at the input and before global pooling (MaxPool
                # pools the blocks).
                anchors = sum(k["kind"] == "anchor" for k in info["fused_kernels"])
                ok = ok and anchors == sum(k["template"] != "generic" for k in sidecar["kernels"])
                ok = ok and "transform-conv-layout" in fired and "Conv" not in info["ops"]
                ok = ok and all("nchwc" in t["workload"] for t in info["tasks"] if "conv" in t["workload"])
                ok = ok and 0 < info["ops"].get("LayoutTransform", 0) <= 4
            if name == "grouped":
                # Each grouped convolution is one task and one kernel: with AVX-512's 16-channel
                # blocks four blocked, the one no block fits (3 groups of 6 filters) in NCHW; no
                # per-group Slice and Concat. (Imported for that target: on this machine's own,
                # 8-channel blocks leave the channel multiplier's 64 groups of one channel in
                # NCHW too, its blocks reading 4 channels, under the 8 an input block needs.)
                wide = json.loads(run([tunefarm, "import", path, "--json", "--target",
                                       "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512"]))
                for i, blocked in ((wide, {4}), (info, {3, 4})):
                    grouped = [t["workload"] for t in i["tasks"] if ",group=" in t["workload"] or ",width=" in t["workload"]]
                    ok = ok and len(grouped) == 5 and not i["untunable"]
                    ok = ok and sum(w.startswith(("conv2d_nchwc(", "depthwise_conv2d_nchwc(")) for w in grouped) in blocked
                    # The groups of 4 (as many filters as channels) lane by lane.
                    ok = ok and sum(w.startswith("depthwise_conv2d_nchwc(") and ",width=4," in w for w in grouped) == 1
                    ok = ok and "Concat" not in i["ops"] and i["ops"].get("Slice") == 1  # the head's
            if not folding:
                # BatchNormalization split and folded into the convolutions.
                ok = ok and "simplify-inference" in fired and "fold-scale-into-conv" in fired
                ok = ok and "BatchNormalization" in info["ops_imported"] and "BatchNormalization" not in info["ops"]
            if name.startswith("encoder"):
                # The matmuls read weights packed once, at compile time (OpGraph::prepacked).
                ok = ok and any(a.endswith("_packed") for k in sidecar["kernels"] for a in k["args"])
            if name == "encoder_o13":
                ok = ok and "recognize-composites" in fired and "LayerNormalization" not in info["ops_imported"]
                ok = ok and info["ops"].get("LayerNormalization") == 4 and info["ops"].get("Gelu") == 2
                ok = ok and "Erf" not in info["ops"] and "ReduceMean" not in info["ops"]
            if name == "audio1d":
                ok = ok and all(info["ops"].get(op) for op in ("Pad", "Elu", "Selu", "MaxPool", "AveragePool", "InstanceNormalization"))
            if name == "pools":
                # Every pooling (the global one as a ReduceMean), the Concat, the Pad and the
                # per-channel Mul work on channel blocks: conversions only at the input and
                # before the Flatten.
                ok = ok and "transform-conv-layout" in fired and info["ops"].get("LayoutTransform") == 2
                ok = ok and info["ops"].get("MaxPool") == 1 and info["ops"].get("AveragePool") == 2
                ok = ok and info["ops"].get("Concat") == 1 and info["ops"].get("Pad") == 2  # count_include_pad: a Pad
                # The Concat of the pools' blocks (a batch of one): computed in place.
                ok = ok and len(info["in_place"]) == 1
                ok = ok and info["ops"].get("ReduceMean") == 1 and "GlobalAveragePool" not in info["ops"]
            if name == "upsampler":
                # The ConvTranspose (constant weights) runs as a Conv over zero-inserted input.
                ok = ok and info["ops"].get("Resize") == 4 and "lower-conv-transpose" in fired
                ok = ok and info["ops_imported"].get("ConvTranspose") == 1 and "ConvTranspose" not in info["ops"]
            if name == "recurrent":
                # 3 directions x 7 steps of LSTM and RNN, 7 of GRU: one recurrence MatMul each.
                ok = ok and info["ops"].get("MatMul", 0) >= 35 and info["ops"].get("Sigmoid", 0) > 0
            if name == "video3d":
                # 4 Conv3d: 3 + 3 + 1 + 3 depth taps, each a 2-D Conv through its template.
                ok = ok and info["ops_imported"].get("Conv", 0) + info["ops_imported"].get("ConvNCHWc", 0) == 10
                ok = ok and info["ops_imported"].get("MaxPool") == 1 and info["ops_imported"].get("AveragePool") == 1
            if name == "logic":
                ok = ok and all(info["ops"].get(op) for op in ("Where", "Greater", "Floor", "Mod", "Cast"))
            if name == "attention_sm":
                ok = ok and "recognize-composites" in fired and info["ops"].get("Softmax") == 1
                ok = ok and "Softmax" not in info["ops_imported"] and "ReduceMax" not in info["ops"]
            if name.startswith("attention"):
                ok = ok and "combine-parallel-matmuls" in fired
                ok = ok and info["ops"].get("Split") == 1 and info["ops_imported"]["MatMul"] - info["ops"]["MatMul"] == 2
            if name == "detect_head":
                ok = ok and info["ops_imported"].get("ScatterND") == 2 and "ScatterND" not in info["ops"]
                ok = ok and "lower-scatter-nd" in fired
            if name == "decoder":
                ok = ok and info["ops_imported"].get("Trilu") == 1 and "Trilu" not in info["ops"]  # folded
            if name == "text":
                ok = ok and [i["dtype"] for i in sidecar["inputs"]] == ["int64", "int64", "bool"]
            if name == "tokens":
                ok = ok and all(info["ops"].get(op) for op in ("ArgMax", "TopK", "CumSum", "OneHot", "Div", "Mod", "Gather"))
            if name == "scripted":
                # Two Loops, an If and the list's sequence operators in the file; none after import.
                ok = ok and all(info["ops_imported"].get(op, 0) == 0 for op in ("If", "Loop", "SequenceInsert"))
                ok = ok and info["ops"].get("Gemm", 0) + info["ops"].get("MatMul", 0) >= 8
            if name == "mlp_argmax":
                ok = ok and len(set(want.tolist())) > 1  # not one class everywhere
            ok = ok and len(info["tasks"]) > 0 and len(info["fused_kernels"]) < info["nodes"]
            print(f"{'ok  ' if ok else 'FAIL'} {name:13s} opset {opset}: {info['nodes_imported']} nodes imported, "
                  f"{info['nodes']} after passes, {len(info['fused_kernels'])} kernels, {len(info['tasks'])} tasks, passes fired: {', '.join(fired) or 'none'}; "
                  f"max error {err:.3g} of magnitude {mag:.3g}; compiled: {len(sidecar['kernels'])} kernels, "
                  f"{len(shared)} of them sharing another's code, workspace {sidecar['workspace_bytes']} bytes, max error {errc:.3g}; "
                  + gpu_note)
            failures += not ok
        failures += not shape_buckets(tunefarm, d)
        # (The sanitizer pass, whose allocator is not glibc's, does not run this file.)
        failures += not big_weights(tunefarm, d)
    if os.path.exists(stale):
        failures += 1
        print(f"FAIL `run --model` left the dead run's folder {stale}")
    if failures:
        raise SystemExit(f"{failures} model(s) failed")


if __name__ == "__main__":
    main()
