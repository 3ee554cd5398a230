#!/usr/bin/env python3
"""Reduced-precision models on the Raspberry Pi's architecture (docs/precision.md): a QDQ model
made by `tunefarm quantize` and a float model at `--precision bf16`, compiled whole for aarch64
(`compile --model -t 'llvm -mtriple=aarch64-linux-gnu -mcpu=...'`) and run under qemu-aarch64
through the cross-built model harness, against the same files compiled for this machine:
int8 on a Cortex-A72 (Pi 4: the widening dot product), a Cortex-A76 (Pi 5: sdot) and a
Neoverse-N2 (usdot, i8mm) with
>= 99% of the output elements within one output quantization step (the output's range over
255) of this machine's, none past four; bf16 on a Cortex-A72 (two FMAs per pair) and a
Neoverse-N2 (bfdot) within 0.5% of the output's magnitude; fp16 on a Cortex-A72 (fcvtl, FMAs)
within 1e-4.

Usage: aarch64_precision_test.py TUNEFARM_BINARY AARCH64_MODEL_HARNESS
"""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

TUNEFARM = HARNESS = None
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models_for_tests  # noqa: E402


from models_for_tests import ResidualCnn  # noqa: E402


def run(*args):
    return models_for_tests.run(TUNEFARM, *args)


class Aarch64PrecisionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.d = cls.tmp.name
        torch.manual_seed(0)
        cls.shape = (4, 3, 16, 16)
        cls.model = os.path.join(cls.d, "cnn.onnx")
        torch.onnx.export(ResidualCnn().eval(), (torch.randn(*cls.shape),), cls.model, opset_version=17, input_names=["x"],
                          output_names=["y"])
        cls.qdq = os.path.join(cls.d, "cnn.int8.onnx")
        run("quantize", cls.model, "-o", cls.qdq, "--samples", "4")
        cls.x = np.random.default_rng(3).uniform(-1, 1, cls.shape).astype(np.float32)
        cls.xfile = os.path.join(cls.d, "x.npy")
        np.save(cls.xfile, cls.x)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def here(self, model, *flags):
        y = os.path.join(self.d, "here.npy")
        run("run", "--model", model, "--input", f"x={self.xfile}", "--output", y, "--repeat", "1", "--no-db", *flags)
        return np.load(y)

    def aarch64(self, model, cpu, *flags):
        lib = os.path.join(self.d, f"a64-{cpu}.so")
        out = run("compile", "--model", model, "-t", f"llvm -mtriple=aarch64-linux-gnu -mcpu={cpu}", "-o", lib,
                  "--no-db", *flags)
        raw_in, raw_out = os.path.join(self.d, "in.raw"), os.path.join(self.d, "out.raw")
        self.x.tofile(raw_in)
        r = subprocess.run(["qemu-aarch64", HARNESS, lib, raw_in, raw_out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return out, np.fromfile(raw_out, dtype=np.float32).reshape(4, 10)

    def test_int8_on_a_pi_4_a_pi_5_and_a_neoverse_n2(self):
        want = self.here(self.qdq)
        for cpu in ("cortex-a72", "cortex-a76", "neoverse-n2"):
            summary, got = self.aarch64(self.qdq, cpu)
            self.assertIn("int8 kernels", summary)
            step = float(want.max() - want.min()) / 255
            off = np.abs(want - got) / step
            print(f"figure: cnn int8 on {cpu} (qemu) against this machine: {float((off <= 1).mean()):.2%} within one "
                  f"output step, largest {off.max():.2f} steps", flush=True)
            self.assertGreaterEqual(float((off <= 1).mean()), 0.99, cpu)
            self.assertLessEqual(off.max(), 4.0, cpu)

    def test_bf16_on_a_pi_4_and_a_neoverse_n2(self):
        want = self.here(self.model, "--precision", "bf16")
        fp32 = self.here(self.model)
        for cpu, how in (("cortex-a72", "emulated: this target has no bfloat16 dot product"), ("neoverse-n2", "bfdot")):
            summary, got = self.aarch64(self.model, cpu, "--precision", "bf16")
            self.assertIn(how, summary)
            err = float(np.abs(want - got).max() / np.abs(want).max())
            print(f"figure: cnn bf16 on {cpu} (qemu) against this machine: {err:.2e} of the magnitude", flush=True)
            self.assertLess(err, 5e-3, cpu)
            self.assertGreater(np.abs(fp32 - got).max(), 0, cpu)  # it did round

    def test_fp16_on_a_pi_4(self):
        want = self.here(self.model, "--precision", "fp16")
        summary, got = self.aarch64(self.model, "cortex-a72", "--precision", "fp16")
        self.assertIn("in float16 kernels (stored in float16, computed in float32)", summary)
        err = float(np.abs(want - got).max() / np.abs(want).max())
        print(f"figure: cnn fp16 on cortex-a72 (qemu) against this machine: {err:.2e} of the magnitude", flush=True)
        self.assertLess(err, 1e-4)


if __name__ == "__main__":
    HARNESS = sys.argv.pop(2)
    TUNEFARM = sys.argv.pop(1)
    unittest.main(verbosity=2)
