"""What the model tests under tests/graph share: small PyTorch models (the callers seed torch)
and running the tunefarm binary."""
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch


class Classifier(torch.nn.Module):
    """An MLP whose input spreads its 10 classes (a random MLP alone favours one)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(32, 64), torch.nn.Linear(64, 48), torch.nn.Linear(48, 10)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x))))) + 3 * x[:, :10]


class Cnn(torch.nn.Module):
    """Two convolutions (the second strided), global pooling and a classifier."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.c2(torch.relu(self.c1(x))))
        return self.fc(y.mean((2, 3)))


class ResidualCnn(torch.nn.Module):
    """Cnn with a 1x1 convolution and a residual Add."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.c3 = torch.nn.Conv2d(32, 32, 1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        y = torch.relu(self.c2(torch.relu(self.c1(x))))
        y = torch.relu(self.c3(y)) + y
        return self.fc(y.mean((2, 3)))


class InvertedResidual(torch.nn.Module):
    """MobileNet-v2's block: a 1x1 expansion, a depthwise 3x3 (strided in the second), a 1x1
    projection, ReLU6, a residual Add in the first."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = torch.nn.ModuleList()
        for stride in (1, 2):
            self.blocks.append(torch.nn.Sequential(
                torch.nn.Conv2d(16, 64, 1), torch.nn.ReLU6(),
                torch.nn.Conv2d(64, 64, 3, stride=stride, padding=1, groups=64), torch.nn.ReLU6(),
                torch.nn.Conv2d(64, 16, 1)))
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.stem(x))
        y = y + self.blocks[0](y)
        y = self.blocks[1](y)
        return self.fc(y.mean((2, 3)))


class Encoder(torch.nn.Module):
    """One transformer encoder layer (d_model 64, 4 heads, feed-forward 128), and optionally a
    Linear head."""

    def __init__(self, head=False):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(64, 16) if head else None

    def forward(self, x):
        y = self.layer(x)
        return self.head(y) if self.head is not None else y


def tunefarm(binary, *args):
    """The binary's run: a CompletedProcess with text output."""
    return subprocess.run([binary, *args], capture_output=True, text=True)


def write_fake_cuda_aliases(emulated_sidecar, gpu_sidecar, path):
    """The aliases file the FAKE libcuda (tests/farm/fake_gpu, TF_FAKE_CUDA_ALIASES) reads to run a
    GPU library's launches with its emulated build's kernels: kernels the emulation generated once
    under another's name, and launches of code the GPU library shares on a grid of its own, which
    the emulation's kernel of that launch computes (the emulated code has its grid built in: two
    softmaxes of other row counts are one PTX function and two emulated ones). Sidecars as dicts,
    as gpu_model_test.cc's write_aliases."""
    code = {}  # emulated kernel -> the function that has its code
    with open(path, "w") as f:
        for k in emulated_sidecar["kernels"]:
            code[k["function"]] = k.get("same_code_as", k["function"])
            if "same_code_as" in k:
                f.write("%s %s\n" % (k["function"], k["same_code_as"]))
        for k in gpu_sidecar["kernels"]:
            grid = k.get("launch", {}).get("grid")
            if "same_code_as" in k and grid:
                f.write("%s@%d,%d,%d %s\n" % (k["same_code_as"], grid[0], grid[1], grid[2], code[k["function"]]))


def run(binary, *args):
    """The binary's stdout; AssertionError with its output when it exits non-zero."""
    r = tunefarm(binary, *args)
    if r.returncode != 0:
        raise AssertionError(f"tunefarm {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


class ModelTestCase(unittest.TestCase):
    """A temporary folder per test (self.d), torch seeded, and models exported into it."""

    opset = 17

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        torch.manual_seed(0)

    def tearDown(self):
        self.tmp.cleanup()

    def export(self, name, model, shape):
        path = os.path.join(self.d, name + ".onnx")
        torch.onnx.export(model.eval(), (torch.randn(*shape),), path, opset_version=self.opset, input_names=["x"],
                          output_names=["y"])
        return path

    def save(self, name, array):
        path = os.path.join(self.d, name + ".npy")
        np.save(path, array.astype(np.float32))
        return path
