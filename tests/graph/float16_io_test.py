#!/usr/bin/env python3
"""Float16 and bfloat16 models (docs/precision.md, "Float16 and bfloat16 models"): ONNX models
whose inputs, outputs and weights are float16 (bfloat16), as `torch.onnx.export(model.half(),
x.half())` makes them, compile as they are. Their 16-bit inputs are read and their outputs
written by kernels (on a GPU too: no conversion through the host), and the graph computes in
float32 between them. Checked against PyTorch's float32 model on the same 16-bit weights and
inputs, its output rounded to the type: the CPU library, the reference evaluation, the GPU
path's kernels emulated here (--emulate-gpu) and the GPU library itself through the fake driver;
`.npy` files ('<f2'; bfloat16, which NumPy has no type for, as float32); the Python package
(NumPy float16 arrays, uint16 arrays of bfloat16 bits, PyTorch float16 and bfloat16 tensors);
an input file of another type refused by name (the import's refusals: tests/graph/import_test.cc).
The 16-bit models are made from PyTorch's float32 exports by tests/graph/onnx_to_16bit.cc.

Usage: float16_io_test.py TUNEFARM_BINARY ONNX_TO_16BIT FAKE_CUDA_DIR PYTHON_PACKAGE_DIR
"""
import json
import os
import subprocess
import sys
import unittest

import numpy as np
import torch

TUNEFARM = TO_16BIT = FAKE_CUDA = PYTHON_PACKAGE = None
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models_for_tests  # noqa: E402
from models_for_tests import Classifier, Cnn, Encoder  # noqa: E402

F16, BF16 = "float16", "bfloat16"


def bf16_bits(a):
    """float32 values rounded to bfloat16 (to nearest, ties to even), as uint16 bits."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def rounded(a, elem):
    """float32 values rounded to the type, as float32."""
    a = np.asarray(a, np.float32)
    return a.astype(np.float16).astype(np.float32) if elem == F16 else bf16_values(bf16_bits(a))


def run(*args, env=None):
    r = subprocess.run([TUNEFARM, *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise AssertionError(f"tunefarm {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


class Float16ModelTest(models_for_tests.ModelTestCase):
    def model(self, name, module, shape, elem):
        """The 16-bit model of `module`, and PyTorch's float32 model on its 16-bit weights."""
        f32 = self.export(name, module, shape)
        path = os.path.join(self.d, name + ("_f16" if elem == F16 else "_bf16") + ".onnx")
        subprocess.run([TO_16BIT, f32, path, elem], check=True)
        with torch.no_grad():
            for p in module.parameters():
                p.copy_(torch.from_numpy(rounded(p.numpy(), elem)))
        return path

    def want(self, module, x, elem):
        with torch.no_grad():
            return rounded(module(torch.from_numpy(x)).numpy(), elem)

    def check(self, got, want, what, elem):
        """Within one rounding of the type at the output's magnitude: float32 sums in another
        order can round to the neighbouring 16-bit value."""
        mag = float(np.abs(want).max())
        err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
        print(f"figure: {what}: max error {err:.3g} of magnitude {mag:.3g}", flush=True)
        self.assertLessEqual(err, (2 ** -10 if elem == F16 else 2 ** -7) * mag, what)

    def run_library(self, lib, x_file, tag, env=None):
        y = os.path.join(self.d, f"y_{tag}.npy")
        run("run", "--model", lib, "--input", f"x={x_file}", "--output", y, "--repeat", "1", env=env)
        return np.load(y)

    def compiled(self, path, tag, *flags, env=None):
        lib = os.path.join(self.d, f"{tag}.so")
        run("compile", "--model", path, "--no-db", *flags, "-o", lib)
        return lib

    def every_build(self, path, x_file, want, elem, name):
        """The CPU library, the reference, the emulated GPU kernels and the GPU library through
        the fake driver: each matches `want`, its output of the model's type."""
        npy_type = np.float16 if elem == F16 else np.float32  # bfloat16 .npy files are float32
        libs = {"cpu": self.compiled(path, name + "_cpu"),
                "gpu_emulated": self.compiled(path, name + "_gpu", "-t", "cuda -arch=sm_90", "--emulate-gpu")}
        outs = {tag: self.run_library(lib, x_file, tag) for tag, lib in libs.items()}
        y = os.path.join(self.d, "y_ref.npy")
        run("run", "--model", path, "--reference", "--input", f"x={x_file}", "--output", y, "--repeat", "1")
        outs["reference"] = np.load(y)
        if FAKE_CUDA:
            device = self.compiled(path, name + "_device", "-t", "cuda -arch=sm_90")
            with open(os.path.join(self.d, name + "_gpu.so.json")) as f:
                sidecar = json.load(f)
            with open(device + ".json") as f:
                device_sidecar = json.load(f)
            aliases = os.path.join(self.d, name + ".aliases")
            models_for_tests.write_fake_cuda_aliases(sidecar, device_sidecar, aliases)
            env = dict(os.environ, LD_LIBRARY_PATH=FAKE_CUDA, TF_FAKE_CUDA_ALIASES=aliases,
                       TF_FAKE_CUDA_KERNELS=libs["gpu_emulated"])
            outs["gpu_fake_driver"] = self.run_library(device, x_file, "device", env=env)
        for tag, got in outs.items():
            self.assertEqual(got.dtype, npy_type, tag)
            self.assertEqual(got.shape, want.shape, tag)
            if elem == BF16:  # values of the type
                np.testing.assert_array_equal(got, rounded(got, BF16), tag)
            self.check(got, want, f"{name} {tag}", elem)
        return libs["cpu"]

    def test_float16_models_compile_as_they_are(self):
        for name, module, shape in [("mlp", Classifier(), (4, 32)), ("cnn", Cnn(), (1, 3, 12, 12)),
                                    ("encoder", Encoder(), (1, 8, 64))]:
            path = self.model(name, module.eval(), shape, F16)
            info = json.loads(run("import", path, "--json"))
            self.assertEqual([(t["name"], t["dtype"]) for t in info["inputs"]], [("x", "float16")])
            self.assertEqual(info["outputs"][0]["dtype"], "float16")
            self.assertIn("input     x float16", run("import", path))
            x16 = np.random.default_rng(5).standard_normal(shape).astype(np.float16)
            x_file = os.path.join(self.d, "x16.npy")
            np.save(x_file, x16)
            self.assertEqual(np.load(x_file).dtype, np.float16)
            self.every_build(path, x_file, self.want(module, x16.astype(np.float32), F16), F16, name)

    def test_bfloat16_models_take_float32_npy_files(self):
        module = Classifier().eval()
        path = self.model("mlp", module, (4, 32), BF16)
        info = json.loads(run("import", path, "--json"))
        self.assertEqual(info["inputs"][0]["dtype"], "bfloat16")
        x = np.random.default_rng(6).standard_normal((4, 32)).astype(np.float32)
        x_file = self.save("x32", x)  # rounded to bfloat16 as it is read
        self.every_build(path, x_file, self.want(module, rounded(x, BF16), BF16), BF16, "mlp_bf16")

    def test_python_package_takes_and_returns_16_bit_arrays_and_tensors(self):
        if PYTHON_PACKAGE is None:
            self.skipTest("no Python package given (not built under the sanitizers: scripts/sanitize.sh)")
        import tunefarm
        from tunefarm._torch import TorchModule
        for elem, np_type, torch_type in [(F16, np.float16, torch.float16), (BF16, np.uint16, torch.bfloat16)]:
            module = Classifier().eval()
            path = self.model("mlp", module, (4, 32), elem)
            compiled = tunefarm.CompiledModel(self.compiled(path, "py_" + elem))
            self.assertEqual(compiled.inputs[0]["dtype"], "float16" if elem == F16 else "bfloat16")
            x = rounded(np.random.default_rng(7).standard_normal((4, 32)), elem)
            want = self.want(module, x, elem)
            (y,) = compiled.run([x.astype(np.float16) if elem == F16 else bf16_bits(x)])
            self.assertEqual(y.dtype, np_type)
            self.check(y.astype(np.float32) if elem == F16 else bf16_values(y), want, f"python numpy {elem}", elem)
            with self.assertRaises(TypeError) as e:
                compiled.run([x.astype(np.float32)])
            self.assertIn("uint16 (the bits of bfloat16" if elem == BF16 else "must be float16, not float32",
                          str(e.exception))
            t = TorchModule(compiled)
            out = t(torch.from_numpy(x).to(torch_type))
            self.assertEqual(out.dtype, torch_type)
            self.check(out.float().numpy(), want, f"python torch {torch_type}", elem)
            with self.assertRaises(TypeError) as e:
                t(torch.from_numpy(x))
            self.assertIn(f"must be {torch_type}, not torch.float32", str(e.exception))

    def test_an_input_file_of_another_type_is_refused(self):
        path = self.model("mlp", Classifier().eval(), (4, 32), F16)
        x32 = self.save("x32", np.zeros((4, 32), np.float32))
        r = models_for_tests.tunefarm(TUNEFARM, "run", "--model", path, "--input", f"x={x32}", "--repeat", "1")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("input 'x' is float32 [4, 32]; the model takes float16 [4, 32]", r.stderr)


if __name__ == "__main__":
    TUNEFARM, TO_16BIT = sys.argv[1], sys.argv[2]
    FAKE_CUDA = sys.argv[3] if len(sys.argv) > 3 and os.path.isdir(sys.argv[3]) else None
    if len(sys.argv) > 4 and sys.argv[4]:
        PYTHON_PACKAGE = sys.argv[4]
        sys.path.insert(0, PYTHON_PACKAGE)
    unittest.main(argv=sys.argv[:1], verbosity=2)
