#!/usr/bin/env python3
"""`--precision bf16` end to end (docs/precision.md): float32 models exported by PyTorch (fixed
seeds, exported at test time) compiled with their MatMul/Gemm products in bfloat16 kernels
(auto-mixed-precision) and run by `tunefarm run --model` beside the float32 build: a transformer
layer stays within the documented error of float32, a classifier keeps its argmax on >= 99% of
200 inputs, one product matches the reference evaluation of the same bfloat16 arithmetic,
`import` counts the converted products; `--precision fp16` (float16 storage, float32 sums) stays
within its tighter documented error; and the refusals (tf32, unknown precisions, a workload, a
GPU target) name the value.

Usage: precision_test.py TUNEFARM_BINARY
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
# The largest error of a bf16 build relative to the float32 output's magnitude that
# docs/precision.md promises for these models (bfloat16 keeps 8 significant bits: 2^-9
# relative rounding per operand; sums in float32).
BF16_RELATIVE_ERROR = 0.02
# The same for fp16 (11 significant bits: 2^-12 relative rounding per operand).
FP16_RELATIVE_ERROR = 0.003


class Cnn(torch.nn.Module):
    """A residual block and a depthwise convolution (which stays float32)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.Conv2d(32, 32, 3, padding=1)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.c3 = torch.nn.Conv2d(32, 64, 1, stride=2)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        y = torch.relu(self.c2(y) + y)
        y = torch.relu(self.c3(torch.relu(self.dw(y))))
        return self.fc(y.mean((2, 3)))


from models_for_tests import Classifier, Encoder  # noqa: E402


def tunefarm(*args):
    return models_for_tests.tunefarm(TUNEFARM, *args)


def run(*args):
    return models_for_tests.run(TUNEFARM, *args)


class PrecisionTest(models_for_tests.ModelTestCase):
    def outputs(self, model, x, *flags):
        y = os.path.join(self.d, "y.npy")
        run("run", "--model", model, "--input", f"x={x}", "--output", y, "--repeat", "1", "--no-db", *flags)
        return np.load(y)

    def test_a_transformer_layer_within_the_documented_error(self):
        path = self.export("enc", Encoder(head=True), (1, 16, 64))
        info = json.loads(run("import", path, "--json", "--precision", "bf16"))
        # Q/K/V (one after combine-parallel-matmuls), the attention's output, two FFN, the head;
        # the two products of activations stay float32.
        self.assertEqual(info["bf16_nodes"], 5)
        self.assertEqual(info["ops"].get("MatMulBF16"), 5)
        self.assertEqual(json.loads(run("import", path, "--json"))["bf16_nodes"], 0)
        text = run("import", path, "--precision", "bf16")
        self.assertIn("bf16      5 of 7 products (MatMul, Gemm, Conv) in bfloat16 kernels", text)
        x = self.save("x", np.random.default_rng(3).standard_normal((1, 16, 64)))
        want, got = self.outputs(path, x), self.outputs(path, x, "--precision", "bf16")
        err = float(np.abs(want - got).max() / np.abs(want).max())
        print(f"figure: transformer layer bf16 / float32: max error {err:.5f} of the output's magnitude", flush=True)
        self.assertLess(err, BF16_RELATIVE_ERROR)
        self.assertGreater(err, 1e-5)  # it did compute in bfloat16

    def test_a_cnn_within_the_documented_error(self):
        path = self.export("cnn", Cnn(), (2, 3, 24, 24))
        info = json.loads(run("import", path, "--json", "--precision", "bf16"))
        # c2 and c3 and the Linear; c1 (3 input channels: an odd block) and the depthwise stay.
        self.assertEqual(info["bf16_nodes"], 3)
        self.assertEqual(info["ops"].get("ConvNCHWcBF16"), 2)
        x = self.save("x", np.random.default_rng(5).uniform(-1, 1, (2, 3, 24, 24)))
        want, got = self.outputs(path, x), self.outputs(path, x, "--precision", "bf16")
        err = float(np.abs(want - got).max() / np.abs(want).max())
        print(f"figure: cnn bf16 / float32: max error {err:.5f} of the output's magnitude", flush=True)
        self.assertLess(err, BF16_RELATIVE_ERROR)
        self.assertGreater(err, 1e-5)
        # The reference evaluation rounds the same operands (in the blocked layout too).
        ref = self.outputs(path, x, "--precision", "bf16", "--reference")
        self.assertLess(np.abs(ref - got).max() / np.abs(want).max(), 1e-3)

    def test_fp16_a_cnn_and_a_transformer_layer_within_the_documented_error(self):
        # float16 keeps 11 significant bits (bfloat16 8): stored in float16, summed in float32.
        for name, model, shape, products in (("cnn", Cnn(), (2, 3, 24, 24), 3),
                                             ("enc", Encoder(head=True), (1, 16, 64), 5)):
            path = self.export(name, model, shape)
            info = json.loads(run("import", path, "--json", "--precision", "fp16"))
            self.assertEqual(info["fp16_nodes"], products, name)
            self.assertEqual(info["bf16_nodes"], 0, name)
            self.assertIn(f"fp16      {products} of", run("import", path, "--precision", "fp16"))
            x = self.save("x", np.random.default_rng(6).uniform(-1, 1, shape))
            want = self.outputs(path, x)
            got = self.outputs(path, x, "--precision", "fp16")
            bf16 = self.outputs(path, x, "--precision", "bf16")
            err = float(np.abs(want - got).max() / np.abs(want).max())
            err_bf16 = float(np.abs(want - bf16).max() / np.abs(want).max())
            print(f"figure: {name} fp16 / float32: max error {err:.6f} of the output's magnitude (bf16 {err_bf16:.6f})",
                  flush=True)
            self.assertLess(err, FP16_RELATIVE_ERROR, name)
            self.assertGreater(err, 0, name)
            self.assertLess(err, err_bf16, name)  # finer than bfloat16
            ref = self.outputs(path, x, "--precision", "fp16", "--reference")
            self.assertLess(np.abs(ref - got).max() / np.abs(want).max(), 1e-3, name)

    def test_a_classifier_keeps_its_answers(self):
        path = self.export("cls", Classifier(), (200, 32))
        x = self.save("x", np.random.default_rng(8).standard_normal((200, 32)))
        want, got = self.outputs(path, x), self.outputs(path, x, "--precision", "bf16")
        agree = float((want.argmax(1) == got.argmax(1)).mean())
        err = float(np.abs(want - got).max() / np.abs(want).max())
        print(f"figure: classifier argmax agreement bf16 / float32 on 200 inputs: {agree:.3f}; max error {err:.5f} "
              "of the output's magnitude", flush=True)
        self.assertGreaterEqual(agree, 0.99)
        self.assertLess(err, BF16_RELATIVE_ERROR)
        self.assertGreater(err, 0)

    def test_one_product_matches_the_reference_of_the_same_arithmetic(self):
        # One Gemm (transB, bias): the compiled kernel and the reference evaluation round the
        # same operands to bfloat16; only the float32 sums differ from the double ones.
        path = self.export("lin", torch.nn.Linear(200, 70), (33, 200))
        x = self.save("x", np.random.default_rng(4).standard_normal((33, 200)))
        ref = self.outputs(path, x, "--precision", "bf16", "--reference")
        got = self.outputs(path, x, "--precision", "bf16")
        fp32 = self.outputs(path, x, "--reference")
        mag = np.abs(ref).max()
        self.assertLess(np.abs(ref - got).max() / mag, 1e-5)
        self.assertGreater(np.abs(ref - fp32).max() / mag, 1e-4)  # the reference rounds too

    def test_refusals_name_the_value(self):
        path = self.export("cls", Classifier(), (4, 32))
        out = os.path.join(self.d, "m.so")
        for flags, message in (
                (["--precision", "tf32"], "--precision tf32 rounds the products as NVIDIA's tensor cores do: it is "
                                           "for cuda targets"),
                (["--precision", "int4"], "--precision 'int4' is not one of fp32, bf16, fp16, tf32"),
                (["--precision", "fp16", "-t", "rocm -mcpu=gfx90a"],
                 "--precision fp16 is implemented for CPU targets and cuda's tensor cores, not rocm")):
            r = tunefarm("compile", "--model", path, "-o", out, "--no-db", *flags)
            self.assertNotEqual(r.returncode, 0, flags)
            self.assertIn(message, r.stderr, flags)
            self.assertNotIn("Traceback", r.stderr)
        r = tunefarm("compile", "-w", "matmul(M=4,N=4,K=4)", "--precision", "bf16", "-o", out)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--precision bf16 is for --model", r.stderr)
        r = tunefarm("tune", "--local", "-w", "matmul(M=4,N=4,K=4)", "--precision", "bf16", "--trials", "1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--precision bf16 is for --model", r.stderr)
        # A quantized model already says its precision.
        q = os.path.join(self.d, "cls.int8.onnx")
        run("quantize", path, "-o", q, "--samples", "2")
        for precision in ("fp16", "bf16"):
            r = tunefarm("compile", "--model", q, "-o", out, "--no-db", "--precision", precision)
            self.assertNotEqual(r.returncode, 0, precision)
            self.assertIn(f"--precision {precision} converts float models, and this one is quantized", r.stderr)
            self.assertRegex(r.stderr, r"e\.g\. the (Quantize|Dequantize)Linear writing '[^']+'")
        r = tunefarm("run", "--model", path, "--precision", "tf32", "--no-db")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--precision tf32 rounds the products as NVIDIA's tensor cores do", r.stderr)

    def test_cuda_targets_run_the_products_on_tensor_cores(self):
        # Compiled, not run (no GPU here): the summary counts the products, the library's PTX
        # has the warp-level products, the tasks say their precision; at fp16 and bf16 the
        # weights are stored in 16 bits (N x K), so the library holds about half the bytes.
        path = self.export("cls", Classifier(), (4, 32))
        out = os.path.join(self.d, "tc.so")
        constant_bytes = {}
        for precision, instruction in (("tf32", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
                                       ("fp16", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
                                       ("bf16", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")):
            r = tunefarm("compile", "--model", path, "-o", out, "--no-db", "-t", "cuda -arch=sm_90",
                         "--precision", precision)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, precision + r" +\d+ of \d+ products \(MatMul, Gemm, Conv\) on tensor cores")
            self.assertEqual("3 of them with weights stored in it" in r.stdout, precision != "tf32", r.stdout)
            with open(out, "rb") as f:
                self.assertIn(instruction.encode(), f.read())
            with open(out + ".json") as f:
                constant_bytes[precision] = json.load(f)["constant_bytes"]
            r = tunefarm("import", path, "-t", "cuda -arch=sm_90", "--precision", precision, "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            tasks = [t["workload"] for t in json.loads(r.stdout)["tasks"]]
            # The first product reads the model's input (float32 data); the others read what only
            # they read, stored in 16 bits (sixteen-bit-edges).
            t16 = {"fp16": "float16", "bf16": "bfloat16"}.get(precision)
            says = ["precision=tf32"] if precision == "tf32" else [
                "trans_b=1,dtype=float32,weight_dtype=" + t16, "trans_b=1,dtype=" + t16 + ","]
            self.assertTrue(tasks and all(any(s in t for s in says) for t in tasks), tasks)
            if precision != "tf32":
                self.assertTrue(any(says[-1] in t for t in tasks), tasks)
        for precision in ("fp16", "bf16"):
            self.assertLess(constant_bytes[precision], 0.6 * constant_bytes["tf32"], constant_bytes)
        # Convolutions too (group 1; the depthwise one stays float32): their weights [K][C][R][S]
        # in 16 bits as they are, conv2d_tc.cuda's weight_dtype tasks.
        cnn = self.export("cnn", Cnn(), (1, 3, 16, 16))
        r = tunefarm("compile", "--model", cnn, "-o", out, "--no-db", "-t", "cuda -arch=sm_90", "--precision", "fp16")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("4 of 5 products (MatMul, Gemm, Conv) on tensor cores", r.stdout)
        self.assertIn("4 of them with weights stored in it", r.stdout)
        # c3 alone reads the depthwise convolution's output, and fc the mean; c2 and the residual
        # Add read c1's (the Add through a widening Cast): stored in 16 bits.
        self.assertIn("3 values stored in it between kernels", r.stdout)
        r = tunefarm("import", cnn, "-t", "cuda -arch=sm_90", "--precision", "fp16", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        convs = [t["workload"] for t in json.loads(r.stdout)["tasks"] if t["workload"].startswith("conv2d_nchw(")]
        self.assertEqual(len(convs), 3, convs)
        # c1 reads the model's input; c2 the residual skip (16 bits), c3 the depthwise output.
        self.assertEqual(sum("dtype=float32,weight_dtype=float16" in t for t in convs), 1, convs)
        self.assertEqual(sum(",dtype=float16," in t for t in convs), 2, convs)

    def test_emulated_cuda_builds_round_as_the_tensor_cores(self):
        # --emulate-gpu runs a cuda build's kernels serially here, its tensor-core kernels (which
        # need a warp's 32 lanes at once) as generic kernels of the same function, operands
        # rounded as the tensor cores round them: the whole library (16-bit weights, values stored
        # in 16 bits between kernels, the memory plan) checked without a GPU. One product: what
        # the reference evaluation of the same rounding computes, but for the order of float32
        # sums, and not the float32 product.
        lin = self.export("lin", torch.nn.Linear(200, 70), (33, 200))
        x = self.save("x", np.random.default_rng(4).standard_normal((33, 200)))
        fp32 = self.outputs(lin, x, "--reference")
        mag = np.abs(fp32).max()
        lib = os.path.join(self.d, "emulated.so")
        for precision in ("tf32", "fp16", "bf16"):
            text = run("compile", "--model", lin, "-o", lib, "--no-db", "-t", "cuda -arch=sm_90", "--precision",
                       precision, "--emulate-gpu")
            self.assertIn("(emulated; its 1 tensor-core kernel as a generic kernel of the same rounding", text)
            with open(lib + ".json") as f:
                sidecar = json.load(f)
            self.assertEqual(sidecar["emulated_products"], 1)
            self.assertIn("generic, emulating dense_tc.cuda", [k["template"] for k in sidecar["kernels"]][0])
            got = self.outputs(lib, x)
            ref = self.outputs(lin, x, "--reference", "--tensor-cores", "--precision", precision)
            self.assertLess(np.abs(got - ref).max() / mag, 1e-5, precision)
            self.assertGreater(np.abs(ref - fp32).max() / mag, 1e-4, precision)  # it did round
        # A CNN (16-bit weights, a value stored in 16 bits; the depthwise convolution float32)
        # and a transformer layer (attention's products of activations on tensor cores too):
        # within the bounds of the float32 model (1e-3 of the largest value for tf32,
        # 1e-2 for fp16 and bf16).
        for name, model, shape in (("cnn", Cnn(), (2, 3, 24, 24)), ("enc", Encoder(head=True), (1, 16, 64))):
            path = self.export(name, model, shape)
            x = self.save("x", np.random.default_rng(6).uniform(-1, 1, shape))
            want = self.outputs(path, x)
            for precision, bound in (("tf32", 1e-3), ("fp16", 1e-2), ("bf16", 1e-2)):
                run("compile", "--model", path, "-o", lib, "--no-db", "-t", "cuda -arch=sm_90", "--precision", precision,
                    "--emulate-gpu")
                got = self.outputs(lib, x)
                err = float(np.abs(want - got).max() / np.abs(want).max())
                print(f"figure: emulated cuda build of the {name} at {precision} / float32: max error {err:.2g} of the "
                      "output's magnitude", flush=True)
                self.assertLess(err, bound, (name, precision))
                self.assertGreater(err, 0, (name, precision))

    def test_tensor_core_accuracy_without_a_gpu(self):
        # run --reference --tensor-cores evaluates the products as the tensor cores round them
        # (attention's products of activations too): within the bounds of the float32
        # model (1e-3 of the largest value for tf32, 1e-2 for fp16 and bf16), and not equal to it.
        path = self.export("enc", Encoder(head=True), (1, 16, 64))
        x = self.save("x", np.random.default_rng(3).standard_normal((1, 16, 64)))
        want = self.outputs(path, x, "--reference")
        for precision, bound in (("tf32", 1e-3), ("fp16", 1e-3), ("bf16", 1e-2)):
            got = self.outputs(path, x, "--reference", "--tensor-cores", "--precision", precision)
            err = float(np.abs(want - got).max() / np.abs(want).max())
            print(f"figure: transformer layer on tensor cores at {precision} / float32: max error {err:.2g} of the "
                  "output's magnitude", flush=True)
            self.assertLess(err, bound, precision)
            self.assertGreater(err, 0, precision)
        for flags, what in ((["--tensor-cores", "--precision", "fp16"], "not a compiled run"),
                            (["--reference", "--tensor-cores"], "not --precision fp32")):
            r = tunefarm("run", "--model", path, "--no-db", *flags)
            self.assertEqual(r.returncode, 2, flags)
            self.assertIn("--tensor-cores evaluates an ONNX model's --precision", r.stderr)
            self.assertIn(what, r.stderr)


if __name__ == "__main__":
    TUNEFARM = sys.argv.pop(1)
    unittest.main(verbosity=2)
