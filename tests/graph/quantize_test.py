#!/usr/bin/env python3
"""`tunefarm quantize` end to end: float32 models exported by PyTorch (fixed seeds, exported at
test time), quantized on calibration inputs of their own, then the QDQ model run by
`tunefarm run --model` (compiled) beside the float32 model on 200 other seeded inputs: the
classifier's argmax agrees on >= 99% of them, the CNN's outputs stay within a few percent of
the output's magnitude, and `import` counts the QuantizeLinear/DequantizeLinear nodes (none
runs in int8 yet).

Usage: quantize_test.py TUNEFARM_BINARY
"""
import json
import os
import sys
import unittest

import numpy as np
import torch

TUNEFARM = None
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models_for_tests  # noqa: E402


from models_for_tests import Classifier, Cnn  # noqa: E402


def run(*args):
    return models_for_tests.run(TUNEFARM, *args)


class QuantizeTest(models_for_tests.ModelTestCase):
    opset = 13

    def outputs(self, model, x):
        y = os.path.join(self.d, "y.npy")
        run("run", "--model", model, "--input", f"x={x}", "--output", y, "--repeat", "1")
        return np.load(y)

    def test_a_classifier_keeps_its_answers(self):
        path = self.export("cls", Classifier(), (200, 32))
        rng = np.random.default_rng(7)
        calib = [self.save(f"calib{k}", rng.standard_normal((200, 32))) for k in range(2)]
        q = os.path.join(self.d, "cls.int8.onnx")
        out = run("quantize", path, "-o", q, *[a for c in calib for a in ("--input", f"x={c}")])
        self.assertIn("quantized 3 activations (per tensor, uint8 asymmetric) and 3 weights (int8 symmetric, per output "
                      "channel) read by 3 Conv/MatMul/Gemm nodes, calibrated on 2 samples (min-max)", out)
        info = json.loads(run("import", q, "--json"))
        self.assertEqual(info["quantize_nodes"], 9)  # 3 pairs and 3 weights' DequantizeLinear
        self.assertEqual(info["int8_nodes"], 3)  # each Gemm folded into an int8 kernel (fold-qdq)
        x = self.save("x", np.random.default_rng(8).standard_normal((200, 32)))
        want, got = self.outputs(path, x), self.outputs(q, x)
        agree = float((want.argmax(1) == got.argmax(1)).mean())
        print(f"figure: classifier argmax agreement int8 / float32 on 200 inputs: {agree:.3f}; "
              f"max output error {np.abs(want - got).max():.4f} of magnitude {np.abs(want).max():.2f}", flush=True)
        self.assertGreaterEqual(agree, 0.99)
        self.assertGreater(np.abs(want - got).max(), 0)  # it did quantize

        # The summary names the instructions each target multiplies bytes with, and says where
        # a CPU's AMX tiles go unused (they are not implemented).
        for target, how in (("llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids",
                             "vpdpbusd, AVX512-VNNI; this CPU's AMX tiles (tdpbusd) are not used yet"),
                            ("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4", "vpdpbusd, AVX512-VNNI)"),
                            ("llvm -mtriple=x86_64-linux-gnu -mcpu=alderlake", "vpdpbusd, AVX-VNNI)"),
                            ("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell", "widened: this target has no byte dot product)"),
                            ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", "sdot)"),
                            ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72", "widened")):
            self.assertIn(f"3 of 3 products (MatMul, Gemm, Conv) in int8 kernels ({how}", run("import", q, "--target", target))
        self.assertIn("(vdpbf16ps; this CPU's AMX tiles (tdpbf16ps) are not used yet)",
                      run("import", path, "--precision", "bf16", "--target",
                          "llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids"))

    def test_a_model_with_a_dynamic_batch_calibrates_at_given_sizes_and_stays_dynamic(self):
        path = os.path.join(self.d, "dyn.onnx")
        torch.onnx.export(Classifier().eval(), (torch.randn(4, 32),), path, opset_version=self.opset,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        q = os.path.join(self.d, "dyn.int8.onnx")
        run("quantize", path, "-o", q, "--dim", "batch=16")
        # The QDQ model keeps its dynamic batch: sized again at each use.
        r = models_for_tests.tunefarm(TUNEFARM, "import", q)
        self.assertEqual(r.returncode, 2)
        self.assertIn("dyn.int8.onnx has the dynamic dimensions batch", r.stderr)
        self.assertEqual(json.loads(run("import", q, "--json", "--dim", "batch=3"))["int8_nodes"], 3)
        r = models_for_tests.tunefarm(TUNEFARM, "quantize", path, "-o", q)
        self.assertEqual(r.returncode, 2)
        self.assertIn("dynamic dimension 0 ('batch'); give its size: --dim batch=N", r.stderr)

    def test_a_cnn_with_random_percentile_and_entropy_calibration(self):
        path = self.export("cnn", Cnn(), (4, 3, 16, 16))
        x = self.save("x", np.random.default_rng(9).uniform(-1, 1, (4, 3, 16, 16)))
        want = self.outputs(path, x)
        for method in (["--method", "minmax"], ["--method", "percentile", "--percentile", "99.9"],
                       ["--method", "entropy"], ["--method", "entropy", "--symmetric"], ["--per-tensor"], ["--symmetric"]):
            q = os.path.join(self.d, "cnn.int8.onnx")
            run("quantize", path, "-o", q, "--samples", "4", *method)
            got = self.outputs(q, x)
            err = float(np.abs(want - got).max() / np.abs(want).max())
            print(f"figure: cnn {' '.join(method)}: max error {err:.4f} of the output's magnitude", flush=True)
            self.assertLess(err, 0.05, method)
            self.assertGreater(err, 0, method)


if __name__ == "__main__":
    TUNEFARM = sys.argv.pop(1)
    unittest.main(verbosity=2)
