#!/usr/bin/env python3
"""Quantized models against ONNX Runtime (docs/precision.md): float32 models exported by PyTorch
(fixed seeds, exported at test time), quantized by `tunefarm quantize`, then the same QDQ file
run by `tunefarm run --model` (int8 kernels) and by ONNX Runtime 1.30 (onnxruntime-node
through bench/ort_peer.js) on the same seeded inputs: >= 99% of the output elements within one
output quantization step of ONNX Runtime's (a step: the output's range over 255, what
quantizing it per tensor to uint8 would give), and none past four. ONNX Runtime runs the QDQ
file twice: without graph optimisations (each QuantizeLinear / DequantizeLinear and the float
operators between them as written: the model's meaning), and with all of them (its int8
kernels). Both are compared on CPUs with VNNI; without it (AVX2 alone) ONNX Runtime's u8 x s8
kernels add pairs of products in saturating 16-bit lanes (vpmaddubsw) and are off by up to 6
steps (a residual CNN: 30% of its outputs within one step, while ours and the unoptimised
QDQ evaluation agree on all of them), so only the unoptimised run is the reference there. The
float32 models agree to float32 rounding.

ONNX Runtime comes from scripts/install-ort.sh (scripts/test.sh runs it): $TUNEFARM_ORT_DIR, else
~/.cache/tunefarm/ort, else bench/ort. Without it the test fails saying how to install it.

And the operators of ONNX opsets 18 to 23 (and an opset 9 model, which ONNX Runtime runs as written and
we convert to opset 11), in the models test_graph_import builds for them:
every output against ONNX Runtime's (test_newer_opsets).

Usage: ort_test.py TUNEFARM_BINARY [TEST_GRAPH_IMPORT_BINARY]
"""
import json
import os
import subprocess
import sys
import unittest

import numpy as np
import torch

TUNEFARM = None
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models_for_tests  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ort_dir():
    for d in (os.environ.get("TUNEFARM_ORT_DIR"),
              os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tunefarm", "ort"),
              os.path.join(ROOT, "bench", "ort")):
        if d and os.path.isdir(os.path.join(d, "node_modules", "onnxruntime-node")):
            return d
    return None


from models_for_tests import Classifier, Encoder, InvertedResidual, ResidualCnn  # noqa: E402


def has_vnni():
    """Whether this CPU has VNNI (AVX512-VNNI or AVX-VNNI): ONNX Runtime's u8 x s8 kernels sum
    exactly with it, and in saturating 16-bit pairs without (AVX2's vpmaddubsw)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


EXACT_ORT_INT8 = has_vnni()


def run(*args):
    return models_for_tests.run(TUNEFARM, *args)


class OrtTest(models_for_tests.ModelTestCase):
    @classmethod
    def setUpClass(cls):
        folder = ort_dir()
        if folder is None:
            raise AssertionError("ONNX Runtime is not installed: run scripts/install-ort.sh (scripts/test.sh does)")
        env = dict(os.environ, NODE_PATH=os.path.join(folder, "node_modules"))
        cls.peer = subprocess.Popen(["node", os.path.join(ROOT, "bench", "ort_peer.js")], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True, env=env)

    @classmethod
    def tearDownClass(cls):
        cls.peer.stdin.close()
        cls.peer.wait(timeout=30)

    def ort(self, model, x, optimization="all"):
        raw_in, raw_out = os.path.join(self.d, "in.raw"), os.path.join(self.d, "out.raw")
        x.astype(np.float32).tofile(raw_in)
        req = {"op": "load", "id": model + optimization, "model": model, "threads": 1, "input": raw_in,
               "dims": list(x.shape), "output": raw_out, "optimization": optimization}
        self.peer.stdin.write(json.dumps(req) + "\n")
        self.peer.stdin.flush()
        reply = json.loads(self.peer.stdout.readline())
        self.assertTrue(reply["ok"], reply)
        return np.fromfile(raw_out, dtype=np.float32).reshape(reply["dims"])

    def ours(self, model, x):
        xp, yp = os.path.join(self.d, "x.npy"), os.path.join(self.d, "y.npy")
        np.save(xp, x.astype(np.float32))
        run("run", "--model", model, "--input", f"x={xp}", "--output", yp, "--repeat", "1", "--no-db")
        return np.load(yp)

    def check(self, name, model, shape, seed, int8_nodes=None):
        path = os.path.join(self.d, name + ".onnx")
        torch.onnx.export(model.eval(), (torch.randn(*shape),), path, opset_version=17, input_names=["x"],
                          output_names=["y"])
        q = os.path.join(self.d, name + ".int8.onnx")
        run("quantize", path, "-o", q, "--samples", "4")
        info = json.loads(run("import", q, "--json"))
        self.assertGreater(info["int8_nodes"], 0)
        if int8_nodes is not None:
            self.assertEqual(info["int8_nodes"], int8_nodes, name)
        x = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)
        # float32: both compute the model as exported.
        want32, got32 = self.ort(path, x), self.ours(path, x)
        self.assertLess(np.abs(want32 - got32).max(), 1e-4 * max(1.0, np.abs(want32).max()), name)
        # int8: the same QDQ file.
        got = self.ours(q, x)
        for optimization, what in (("disabled", "QDQ evaluation"), ("all", "int8 kernels")):
            if optimization == "all" and not EXACT_ORT_INT8:
                print(f"figure: {name}: ONNX Runtime's int8 kernels not compared (no VNNI: they saturate)")
                continue
            want = self.ort(q, x, optimization)
            self.assertEqual(want.shape, got.shape)
            step = float(want.max() - want.min()) / 255
            off = np.abs(want - got) / step
            within = float((off <= 1).mean())
            print(f"figure: {name} int8 against ONNX Runtime's {what}: {within:.2%} of {off.size} elements within "
                  f"one output step ({step:.3g}), largest {off.max():.2f} steps", flush=True)
            self.assertGreaterEqual(within, 0.99, f"{name} against ONNX Runtime's {what}")
            self.assertLessEqual(off.max(), 4.0, f"{name} against ONNX Runtime's {what}")
        # And the QDQ model differs from the float one: the comparison above is of int8 arithmetic.
        self.assertGreater(np.abs(got - got32).max(), 0)

    def test_a_classifier(self):
        self.check("cls", Classifier(), (64, 32), 5)

    def test_a_cnn(self):
        self.check("cnn", ResidualCnn(), (16, 3, 24, 24), 6)

    def test_mobilenet_blocks(self):
        # int8 depthwise convolutions (qdepthwise_conv2d_nchwc) between int8 1x1 ones: all but
        # the 3-channel stem in int8 (six convolutions and the Linear).
        self.check("mbv2", InvertedResidual(), (8, 3, 20, 20), 9, int8_nodes=7)

    def test_a_transformer_layer(self):
        self.check("enc", Encoder(), (1, 16, 64), 7)

    def test_newer_opsets(self):
        """The operators of opsets 18 to 23 (Split num_outputs, Pad wrap, Scatter max/min,
        AveragePool dilations, Gelu tanh, GroupNormalization per group and per channel,
        RMSNormalization, LRN, Resize axes / keep_aspect_ratio_policy / half_pixel_symmetric,
        Attention with grouped heads, a past, causal limits, softcap and masks, the trigonometric
        and hyperbolic functions, Mish, Shrink, IsNaN, IsInf, CastLike, MeanVarianceNormalization,
        LpNormalization, RotaryEmbedding, GridSample of volumes and images, a model of
        model-local functions calling each other, inlined at import, one of If, Loop and
        Scan nodes, written out at import, one of sequences, lists at import, and an If on a
        run-time condition, both branches computed and selected, and a Loop of a run-time
        condition under a constant trip count, its iterations selected):
        the models test_graph_import builds for them (checked there against their definitions
        and compiled against the reference), every output here against ONNX Runtime's: our
        reference evaluation, our library for this CPU and our CUDA library run emulated."""
        if IMPORT_TEST is None:
            self.skipTest("no test_graph_import binary given (ort_test.py TUNEFARM TEST_GRAPH_IMPORT)")
        env = dict(os.environ, TF_OPSET_MODELS_DIR=self.d)
        subprocess.run([IMPORT_TEST, "--gtest_filter=OnnxImport.NewerOpsetsMatchTheirDefinitions:"
                        "OnnxImport.Opset19FormsCompileAsTheReference:OnnxImport.AttentionMatchesItsDefinition:"
                        "OnnxImport.MathAndNormalizingOperatorsMatchTheirDefinitions:"
                        "OnnxImport.RotaryEmbeddingMatchesItsDefinition:OnnxImport.GridSampleCompilesAsTheReference:"
                        "OnnxImport.ModelLocalFunctionsAreInlined:OnnxImport.ControlFlowIsWrittenOut:OnnxImport.SequencesAreListsAtImport:"
                        "OnnxImport.IfOnARunTimeConditionSelectsItsBranch:"
                        "OnnxImport.LoopOfARunTimeConditionSelectsItsIterations:OnnxImport.OlderOpsetsAreConvertedAtImport"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        # The inputs the C++ tests feed.
        models = {"newer_opsets": (np.sin(0.37 * np.arange(180)) * 2 + 0.1).reshape(2, 6, 3, 5),
                  "opset19_forms": np.sin(0.29 * np.arange(168) + 0.3).reshape(1, 4, 6, 7) * 1.7,
                  "attention": np.sin(0.53 * np.arange(240) + 0.2).reshape(2, 5, 24) * 1.3,
                  "functions": (np.sin(0.41 * np.arange(120, dtype=np.float32) + 0.1) * 0.95).reshape(2, 3, 4, 5),
                  "rotary": np.sin(0.37 * np.arange(240) + 0.5).reshape(2, 5, 24) * 1.1,
                  "gridsample": np.sin(0.23 * np.arange(360) + 0.7).reshape(2, 3, 3, 4, 5) * 2.0,
                  "local_functions": np.sin(0.9 * np.arange(6) + 0.3).reshape(2, 3) * 3.0,
                  "control_flow": np.sin(1.3 * np.arange(6) + 0.2).reshape(2, 3) * 2.5,
                  "sequences": np.sin(0.7 * np.arange(6) + 0.4).reshape(2, 3) * 1.5,
                  "runtime_if": np.array([0.5, -2.0, 0.75]),
                  "runtime_loop": np.array([6.0, -1.0, 0.5]),
                  "old_opset": np.sin(0.61 * np.arange(24) + 0.1).reshape(1, 2, 3, 4) * 1.7}
        for name, x in models.items():
            model = os.path.join(self.d, name + ".onnx")
            x = x.astype(np.float32)
            folder = os.path.join(self.d, name + "_ort")
            os.makedirs(folder, exist_ok=True)
            raw_in = os.path.join(self.d, "in.raw")
            x.tofile(raw_in)
            req = {"op": "load", "id": name, "model": model, "threads": 1, "input": raw_in, "dims": list(x.shape),
                   "output": os.path.join(self.d, "out.raw"), "outputs_dir": folder}
            self.peer.stdin.write(json.dumps(req) + "\n")
            self.peer.stdin.flush()
            reply = json.loads(self.peer.stdout.readline())
            self.assertTrue(reply["ok"], reply)
            xp = os.path.join(self.d, "x.npy")
            np.save(xp, x)
            emulated = os.path.join(self.d, name + ".cuda.so")
            run("compile", "--model", model, "-t", "cuda -arch=sm_90", "--emulate-gpu", "-o", emulated, "--no-db")
            # Our reference evaluation, the library for this CPU, and the library for a CUDA GPU
            # (its kernels scheduled for sm_90, fused attention included, run serially here).
            for how, lib in (("--reference", model), ("--no-check", model), ("--no-check", emulated)):
                args = ["run", "--model", lib, "--input", f"x={xp}", "--repeat", "1", "--no-db", how]
                for o in reply["outputs"]:
                    args += ["--output", f"{o['name']}={os.path.join(folder, o['name'] + '.npy')}"]
                run(*args)
                for o in reply["outputs"]:
                    kinds = {"float32": np.float32, "bool": np.uint8, "int64": np.int64}
                    self.assertIn(o["type"], kinds, o)
                    want = np.fromfile(o["file"], dtype=kinds[o["type"]]).reshape(o["dims"])
                    got = np.load(os.path.join(folder, o["name"] + ".npy"))
                    what = f"{name} {o['name']} {how} {os.path.basename(lib)}"
                    self.assertEqual(want.shape, got.shape, what)
                    if o["type"] != "float32":  # bool and int64: equal
                        self.assertEqual(want.astype(np.int64).tolist(), got.astype(np.int64).tolist(), what)
                        continue
                    self.assertTrue(np.array_equal(np.isnan(want), np.isnan(got)), what)
                    self.assertTrue(np.array_equal(want[np.isinf(want)], got[np.isinf(want)]), what)
                    finite = np.isfinite(want)
                    err = float(np.abs(want - got)[finite].max(initial=0.0))
                    self.assertLess(err, 2e-6 * max(1.0, float(np.abs(want[finite]).max(initial=0.0))), what)
                print(f"figure: {name} ({how} {os.path.basename(lib)}): {len(reply['outputs'])} outputs match ONNX Runtime",
                      flush=True)


IMPORT_TEST = None

if __name__ == "__main__":
    TUNEFARM = sys.argv.pop(1)
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        IMPORT_TEST = sys.argv.pop(1)
    unittest.main(verbosity=2)
