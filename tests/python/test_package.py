"""The Python package against Debian's PyTorch 1.13 and torchvision: models through optimize
match PyTorch, a compiled module inside a larger nn.Module, NumPy and kernel paths, the
database, and every error path. Run by ctest (python_package) with PYTHONPATH=<build>/python
and the tunefarm program in <build>/bin."""

import atexit
import ctypes.util
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import numpy as np
import torch
import torchvision

import tunefarm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from daemon import Daemon  # noqa: E402 (tests/daemon.py)

TMP = tempfile.mkdtemp(prefix="tunefarm-python-test-")
# Removed at exit (its compiled models are 120 MB), unless TUNEFARM_KEEP_TEST_TMP is set.
if os.environ.get("TUNEFARM_KEEP_TEST_TMP", "0") in ("", "0"):
    atexit.register(shutil.rmtree, TMP, True)
# Hermetic: no tuned configs from this machine's default database, compiled models cached here.
os.environ["TUNEFARM_DB"] = os.path.join(TMP, "none.db")
os.environ["TUNEFARM_CACHE"] = os.path.join(TMP, "cache")
BIN = os.path.join(os.path.dirname(tunefarm.__file__), "..", "..", "bin", "tunefarm")


def seeded(module):
    torch.manual_seed(0)
    return module().eval()


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x)


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True, activation="gelu")
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return self.enc(x)


class Models(unittest.TestCase):
    def check(self, model, x, **kw):
        fm = tunefarm.optimize(model, x, **kw)
        self.assertIsInstance(fm, torch.nn.Module)
        with torch.no_grad():
            torch.testing.assert_close(fm(x), model(x), rtol=1e-4, atol=1e-4)
        return fm

    def test_the_readme_example(self):
        m = torchvision.models.resnet18().eval()
        x = torch.randn(1, 3, 224, 224)
        fm = tunefarm.optimize(m, x)
        torch.testing.assert_close(fm(x), m(x), rtol=1e-4, atol=1e-4)

    def test_mobilenet_v2(self):
        self.check(seeded(torchvision.models.mobilenet_v2), torch.randn(1, 3, 96, 96))

    def test_transformer_encoder(self):
        self.check(seeded(Encoder), torch.randn(1, 16, 64), opset=17)

    def test_mlp_and_a_second_call_on_other_values(self):
        m = seeded(MLP)
        fm = self.check(m, torch.randn(1, 64))
        y = torch.randn(1, 64)
        with torch.no_grad():
            torch.testing.assert_close(fm(y), m(y), rtol=1e-4, atol=1e-4)

    def test_inside_a_larger_module(self):
        core = tunefarm.optimize(seeded(MLP), torch.randn(1, 64))

        class Outer(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                torch.manual_seed(1)
                self.pre = torch.nn.Linear(8, 64)
                self.inner = inner

            def forward(self, x):
                return torch.softmax(self.inner(torch.relu(self.pre(x))), dim=-1)

        reference = Outer(seeded(MLP)).eval()
        wrapped = Outer(core).eval()
        x = torch.randn(1, 8)
        with torch.no_grad():
            torch.testing.assert_close(wrapped(x), reference(x), rtol=1e-4, atol=1e-5)
        self.assertIn("inner", dict(wrapped.named_children()))

    def test_threads_follow_torch(self):
        m = seeded(MLP)
        fm = tunefarm.optimize(m, torch.randn(1, 64))
        old = torch.get_num_threads()
        try:
            for n in (1, 2):
                torch.set_num_threads(n)
                with torch.no_grad():
                    torch.testing.assert_close(fm(torch.ones(1, 64)), m(torch.ones(1, 64)), rtol=1e-4, atol=1e-4)
        finally:
            torch.set_num_threads(old)


class NumpyAndLibraries(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = seeded(MLP)
        cls.onnx = os.path.join(TMP, "mlp.onnx")
        torch.onnx.export(cls.model, (torch.randn(1, 64),), cls.onnx, opset_version=13, input_names=["x"],
                          output_names=["y"])

    def test_an_onnx_path_gives_a_numpy_model_described_by_its_sidecar(self):
        cm = tunefarm.optimize(self.onnx)
        self.assertIsInstance(cm, tunefarm.CompiledModel)
        self.assertEqual(cm.inputs, [{"name": "x", "shape": (1, 64), "dtype": "float32"}])
        self.assertEqual(cm.outputs, [{"name": "y", "shape": (1, 10), "dtype": "float32"}])
        x = np.random.default_rng(3).standard_normal((1, 64)).astype(np.float32)
        with torch.no_grad():
            want = self.model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(cm(x), want, rtol=1e-4, atol=1e-5)
        # Into a given array, and with a non-contiguous input (copied).
        out = np.zeros((1, 10), np.float32)
        got = cm.run([x], [out])
        self.assertIs(got[0], out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
        wide = np.zeros((1, 128), np.float32)
        wide[:, ::2] = x
        np.testing.assert_allclose(cm(wide[:, ::2]), want, rtol=1e-4, atol=1e-5)
        # Each kernel's time, named by the sidecar (docs/models.md, "Profiling").
        with open(cm.path + ".json") as f:
            sidecar = json.load(f)
        p = cm.profile([x], calls=4, warmup=1)
        self.assertEqual(p["runs"], 4)
        self.assertEqual(p["sidecar_problem"], "")
        self.assertEqual(sorted(k["function"] for k in p["kernels"]), sorted(k["function"] for k in sidecar["kernels"]))
        self.assertEqual([k["calls"] for k in p["kernels"]], [4] * len(sidecar["kernels"]))
        self.assertEqual([k["seconds"] for k in p["kernels"]], sorted((k["seconds"] for k in p["kernels"]), reverse=True))
        workloads = {k["function"]: k.get("workload", ", ".join(k["nodes"])) for k in sidecar["kernels"]}
        for k in p["kernels"]:
            self.assertEqual(k["what"], workloads[k["function"]])
            self.assertEqual(k["flops"] > 0, k["what"].startswith("matmul("), k)

    def test_dynamic_dimensions_are_sized_by_dims_or_input_shapes(self):
        # An export with a dynamic batch axis, as most exported models have one.
        path = os.path.join(TMP, "mlp_dynamic.onnx")
        torch.onnx.export(self.model, (torch.randn(2, 64),), path, opset_version=13, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        x = np.random.default_rng(4).standard_normal((3, 64)).astype(np.float32)
        with torch.no_grad():
            want = self.model(torch.from_numpy(x)).numpy()
        for kwargs in ({"dims": {"batch": 3}}, {"input_shapes": {"x": (3, 64)}}):
            cm = tunefarm.optimize(path, **kwargs)
            self.assertEqual(cm.inputs[0]["shape"], (3, 64))
            np.testing.assert_allclose(cm(x), want, rtol=1e-4, atol=1e-5)
        with self.assertRaisesRegex(ValueError, r"dynamic dimension 0 \('batch'\); give its size: --dim batch=N"):
            tunefarm.compile_model(path)
        with self.assertRaisesRegex(ValueError, "has no symbolic dimension 'seq'"):
            tunefarm.compile_model(path, dims={"batch": 3, "seq": 8})
        with self.assertRaisesRegex(ValueError, "dims must be a dict"):
            tunefarm.compile_model(path, dims=[("batch", 3)])
        with self.assertRaisesRegex(ValueError, r"dims\['batch'\] must be an int or a list of ints"):
            tunefarm.compile_model(path, dims={"batch": "3"})
        with self.assertRaisesRegex(ValueError, r"dims\['batch'\] must be an int or a list of ints"):
            tunefarm.compile_model(path, dims={"batch": []})
        with self.assertRaisesRegex(ValueError, "size 3 is given twice"):
            tunefarm.compile_model(path, dims={"batch": [3, 3]})

    def dynamic_batch_onnx(self, name):
        """The test's MLP exported with a symbolic batch ('batch'), at TMP/name."""
        path = os.path.join(TMP, name)
        torch.onnx.export(self.model, (torch.randn(2, 64),), path, opset_version=13, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        return path

    def input_and_output(self, rng, n):
        """A random input of n rows and the MLP's output for it (PyTorch's)."""
        x = rng.standard_normal((n, 64)).astype(np.float32)
        with torch.no_grad():
            return x, self.model(torch.from_numpy(x)).numpy()

    def test_a_list_of_sizes_makes_shape_buckets(self):
        # dims={"batch": [1, 3, 8]}: one library, each call runs the bucket of its inputs' shapes.
        cm = tunefarm.optimize(self.dynamic_batch_onnx("mlp_buckets.onnx"), dims={"batch": [1, 3, 8]})
        self.assertEqual(cm.inputs[0]["shape"], (1, 64))  # bucket 0's
        rng = np.random.default_rng(5)
        for n in (8, 1, 3):
            x, want = self.input_and_output(rng, n)
            got = cm(x)
            self.assertEqual(got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        with self.assertRaisesRegex(ValueError, r"no shape bucket takes inputs of shapes \[5, 64\]; its buckets take "
                                                r"\[1, 64\]; \[3, 64\]; \[8, 64\]"):
            cm(np.zeros((5, 64), np.float32))

    def test_pad_batch_runs_fewer_rows_in_the_next_bucket(self):
        # pad_batch=True: 2 and 5 rows run the buckets of 3 and 8 padded, through the NumPy model
        # (into given outputs too) and a TorchModule; 9 rows are refused naming the padded sizes.
        cm = tunefarm.optimize(self.dynamic_batch_onnx("mlp_pad.onnx"), dims={"batch": [1, 3, 8]}, pad_batch=True)
        self.assertEqual([b["padded"] for b in cm._model.buckets], [False, True, True])
        from tunefarm._torch import TorchModule
        module = TorchModule(cm)
        rng = np.random.default_rng(6)
        for n in (2, 5, 1):
            x, want = self.input_and_output(rng, n)
            got = cm(x)
            self.assertEqual(got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
            out = np.full(want.shape, np.nan, np.float32)
            cm._model.run([x], [out])
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
            y = module(torch.from_numpy(x))
            self.assertEqual(tuple(y.shape), want.shape)
            np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-5)
        with self.assertRaisesRegex(ValueError, r"no shape bucket takes inputs of shapes \[9, 64\]; its buckets take "
                                                r"\[1, 64\]; \[3, 64\]; \[8, 64\] \(and fewer rows of axis 0 than 3, 8, padded\)"):
            cm(np.zeros((9, 64), np.float32))
        with self.assertRaisesRegex(ValueError, "no shape bucket takes inputs of shapes"):
            module(torch.zeros(9, 64))
        # The choice is the library's (tf_model_padded_bucket_of, through the C API): shapes it
        # is not given as lists of integers are refused by name.
        self.assertEqual(cm._model.padded_bucket([(4, 64)]), 2)
        self.assertIsNone(cm._model.padded_bucket([(4, 65)]))
        from tunefarm import _tunefarm
        import ctypes
        b = ctypes.c_int(-1)
        self.assertNotEqual(_tunefarm._lib.tfpy_model_padded_bucket(cm._model._h, b"[[4, \"x\"]]", ctypes.byref(b)), 0)
        self.assertIn("input shapes are not a list of lists of integers", _tunefarm._lib.tfpy_error().decode())

    def test_load_a_library_written_by_the_command_line(self):
        lib = os.path.join(TMP, "mlp_cli.so")
        subprocess.run([BIN, "compile", "--model", self.onnx, "-o", lib, "--no-db"], check=True, capture_output=True)
        cm = tunefarm.load(lib)
        x = np.ones((1, 64), np.float32)
        with torch.no_grad():
            want = self.model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(cm(x), want, rtol=1e-4, atol=1e-5)

    def test_a_kernel_compiled_with_a_config(self):
        k = tunefarm.compile_kernel("matmul(M=33,N=17,K=9)", config={"tile_m": 4, "tile_n": 16})
        self.assertEqual(k.metadata["config"]["tile_m"], 4)
        rng = np.random.default_rng(5)
        a = rng.standard_normal((33, 9)).astype(np.float32)
        b = rng.standard_normal((9, 17)).astype(np.float32)
        c = np.zeros((33, 17), np.float32)
        k(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)

    def test_a_kernel_without_out_leaves_no_file(self):
        # Its library goes to a temporary folder that is gone once the kernel loaded it, also
        # when the compile fails; the kernel still runs.
        scratch = os.path.join(TMP, "scratch")
        os.makedirs(scratch)
        with mock.patch.object(tempfile, "tempdir", scratch):
            k = tunefarm.compile_kernel("matmul(M=5,N=6,K=7)")
            self.assertRaises(ValueError, tunefarm.compile_kernel, "nosuchop(M=1)")
        self.assertEqual(os.listdir(scratch), [])
        a, b = np.ones((5, 7), np.float32), np.ones((7, 6), np.float32)
        c = np.zeros((5, 6), np.float32)
        k(a, b, c)
        np.testing.assert_array_equal(c, np.full((5, 6), 7, np.float32))

    def test_an_int8_kernel_takes_arrays_of_its_types(self):
        k = tunefarm.compile_kernel("matmul(M=19,N=40,K=30,dtype=uint8,weight_dtype=int8)")
        self.assertEqual([arg["dtype"] for arg in k.metadata["args"]], ["uint8", "int8", "int32"])
        rng = np.random.default_rng(6)
        a = rng.integers(0, 256, (19, 30)).astype(np.uint8)
        b = rng.integers(-128, 128, (30, 40)).astype(np.int8)
        c = np.zeros((19, 40), np.int32)
        k(a, b, c)
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))
        with self.assertRaisesRegex(TypeError, "input 'A' must be uint8, not float32"):
            k(a.astype(np.float32), b, c)
        with self.assertRaisesRegex(TypeError, "output 'C' must be int32, not float32"):
            k(a, b, c.astype(np.float32))


    def test_a_16_bit_kernel_takes_float16_arrays_or_the_bits_of_bfloat16(self):
        rng = np.random.default_rng(7)
        k = tunefarm.compile_kernel("matmul(M=9,N=12,K=16,dtype=float16,trans_b=1)")
        self.assertEqual([arg["dtype"] for arg in k.metadata["args"]], ["float16", "float16", "float32"])
        a = rng.standard_normal((9, 16)).astype(np.float16)
        b = rng.standard_normal((12, 16)).astype(np.float16)  # N x K
        c = np.zeros((9, 12), np.float32)
        k(a, b, c)
        np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32).T, rtol=1e-5, atol=1e-5)
        with self.assertRaisesRegex(TypeError, "input 'A' must be float16, not float32"):
            k(a.astype(np.float32), b, c)
        k = tunefarm.compile_kernel("matmul(M=5,N=6,K=8,dtype=bfloat16)")
        bits = lambda x: (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731
        value = lambda h: (h.astype(np.uint32) << 16).view(np.float32)  # noqa: E731
        a, b = bits(rng.standard_normal((5, 8))), bits(rng.standard_normal((8, 6)))
        c = np.zeros((5, 6), np.float32)
        k(a, b, c)
        np.testing.assert_allclose(c, value(a) @ value(b), rtol=1e-5, atol=1e-5)
        with self.assertRaisesRegex(TypeError, "must be uint16 \\(the bits of bfloat16 values"):
            k(value(a), b, c)


class DatabaseFacts(unittest.TestCase):
    def test_the_same_facts_as_query_json(self):
        db = os.path.join(TMP, "tuned.db")
        w = "matmul(M=32,N=32,K=32)"
        subprocess.run([BIN, "tune", "-w", w, "--local", "--trials", "4", "--db", db], check=True,
                       capture_output=True)
        d = tunefarm.Database(db)

        def query(*args):
            r = subprocess.run([BIN, "query", *args, "--json", "--db", db], check=True, capture_output=True, text=True)
            return json.loads(r.stdout)

        self.assertEqual(d.best(w), query("best", "-w", w))
        self.assertEqual(d.best(w)["tier"], "exact")
        self.assertEqual(d.best(), query("best"))
        self.assertEqual(d.runs(), query("runs"))
        self.assertEqual(d.models(), query("models"))
        # compile_kernel takes the tuned config.
        k = tunefarm.compile_kernel(w, db=db)
        self.assertEqual(k.metadata["config"], d.best(w)["record"]["config"])


class TuneFirst(unittest.TestCase):
    def test_optimize_with_tune_tunes_the_whole_model_then_compiles_with_it(self):
        db = os.path.join(TMP, "tune_first.db")
        m = seeded(MLP)
        x = torch.randn(1, 64)
        fm = tunefarm.optimize(m, x, tune=6, db=db)
        with torch.no_grad():
            torch.testing.assert_close(fm(x), m(x), rtol=1e-4, atol=1e-4)
        models = tunefarm.Database(db).models()
        self.assertEqual(len(models), 1)
        self.assertEqual(models[0]["tunable_kernels"], 2)
        self.assertEqual(models[0]["tuned_kernels"], 2)
        # A failed tuning run is an error with the command's message.
        with self.assertRaises(tunefarm.TunefarmError) as c:
            tunefarm.optimize(m, x, tune={"trials": 4, "strategy": "nosuch"}, db=db)
        self.assertIn("nosuch", str(c.exception))


def start_daemon(test, program, *args):
    """A daemon of the build (tunefarm-tuner, -tracker, -rpc-server) started with tests/daemon.py,
    and the port it printed; stopped when the test ends."""
    import time
    d = Daemon([os.path.join(os.path.dirname(BIN), program), *args],
               os.path.join(TMP, "%s-%d.log" % (program, time.time_ns())))
    test.addCleanup(d.stop)
    return d.port


class ThroughTheServiceAndTheFarm(unittest.TestCase):
    """optimize(tune=, server=) and Database(server) against a real tunefarm-tuner, and
    optimize(tune={tracker, key}) on a board of a real tracker."""

    def test_optimize_tunes_on_farm_boards(self):
        token = os.path.join(TMP, "farm.token")
        with open(token, "w") as f:
            f.write("farm-token-0123456789abcdef\n")
        os.chmod(token, 0o600)
        tracker = "127.0.0.1:%d" % start_daemon(self, "tunefarm-tracker", "--port", "0", "--token-file", token)
        start_daemon(self, "tunefarm-rpc-server", "--tracker", tracker, "--key", "cpu", "--port", "0",
                     "--token-file", token, "--work-dir", TMP)
        db = os.path.join(TMP, "farm.db")
        m = seeded(MLP)
        x = torch.randn(1, 64)
        fm = tunefarm.optimize(m, x, tune={"trials": 6, "tracker": tracker, "key": "cpu", "token_file": token}, db=db)
        with torch.no_grad():
            torch.testing.assert_close(fm(x), m(x), rtol=1e-4, atol=1e-4)
        runs = tunefarm.Database(db).runs()
        self.assertEqual(len(runs), 2)  # one per task, measured on the board
        with self.assertRaises(tunefarm.TunefarmError) as c:
            tunefarm.optimize(m, x, tune={"trials": 4, "tracker": tracker, "key": "nosuchkey", "token_file": token},
                              db=db)
        self.assertIn("nosuchkey", str(c.exception))
        with self.assertRaises(tunefarm.TunefarmError):  # no token: the tracker refuses
            tunefarm.optimize(m, x, tune={"trials": 4, "tracker": tracker, "key": "cpu"}, db=db)
        with self.assertRaises(ValueError) as c:
            tunefarm.optimize(m, x, tune={"trials": 4, "trackr": tracker}, db=db)
        self.assertIn("trackr", str(c.exception))

    def test_optimize_tunes_and_compiles_through_the_service(self):
        db = os.path.join(TMP, "service.db")
        server = "127.0.0.1:%d" % start_daemon(self, "tunefarm-tuner", "--port", "0", "--db", db, "--local-boards", "1",
                                               "--workers", "1")
        m = seeded(MLP)
        x = torch.randn(1, 64)
        fm = tunefarm.optimize(m, x, tune=6, server=server)  # submit --model --watch, then compile --server
        with torch.no_grad():
            torch.testing.assert_close(fm(x), m(x), rtol=1e-4, atol=1e-4)
        with open(fm.compiled.path + ".json") as f:
            sidecar = json.load(f)
        self.assertEqual([k["config_source"] for k in sidecar["kernels"] if "config_source" in k],
                         ["tuned (exact)"] * 2)  # compiled with the service's configs
        d = tunefarm.Database(server)
        r = subprocess.run([BIN, "query", "best", "--json", "--server", server], check=True, capture_output=True,
                           text=True)
        self.assertEqual(d.best(), json.loads(r.stdout))
        self.assertEqual(len(d.best()), 2)  # the MLP's two matmuls, tuned by the service's job
        self.assertEqual({run["status"] for run in d.runs()}, {"done"})
        # Model results in the service's database come back through the service as
        # `query models --server --json` says them: the job's own (submit --model sends the
        # model, and the service times it when the job is done), then one that tune --model
        # --local writes there.
        models = d.models()
        self.assertEqual(len(models), 1)
        self.assertEqual((models[0]["tunable_kernels"], models[0]["device_key"]), (2, "local"))
        onnx = os.path.join(TMP, "mlp-service.onnx")
        torch.onnx.export(m, (x,), onnx, opset_version=13)
        subprocess.run([BIN, "tune", "--model", onnx, "--local", "--trials", "4", "--db", db], check=True,
                       capture_output=True)
        models = d.models()
        self.assertEqual(len(models), 2)
        self.assertEqual([m["tunable_kernels"] for m in models], [2, 2])
        r = subprocess.run([BIN, "query", "models", "--json", "--server", server], check=True, capture_output=True,
                           text=True)
        self.assertEqual(models, json.loads(r.stdout))
        with self.assertRaises(tunefarm.TunefarmError) as c:
            tunefarm.optimize(m, x, server="127.0.0.1:1", cache_dir=os.path.join(TMP, "nocache"))
        self.assertIn("127.0.0.1:1", str(c.exception))


class Errors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.fm = tunefarm.optimize(seeded(MLP), torch.randn(1, 64))
        cls.cm = cls.fm.compiled

    def assertRaisesWith(self, kind, text, fn, *args, **kw):
        with self.assertRaises(kind) as c:
            fn(*args, **kw)
        self.assertIn(text, str(c.exception))

    def test_wrong_inputs_to_a_torch_module(self):
        self.assertRaisesWith(ValueError, "must have shape [1, 64], not [2, 64]", self.fm, torch.randn(2, 64))
        self.assertRaisesWith(TypeError, "must be torch.float32, not torch.float64", self.fm,
                              torch.randn(1, 64, dtype=torch.float64))
        self.assertRaisesWith(ValueError, "takes 1 input, not 2", self.fm, torch.randn(1, 64), torch.randn(1, 64))
        self.assertRaisesWith(TypeError, "must be a torch.Tensor, not list", self.fm, [0.0] * 64)
        self.assertRaisesWith(ValueError, "is on meta", self.fm, torch.randn(1, 64, device="meta"))
        # Each call's outputs are new tensors: a result kept is not overwritten by the next call.
        x = torch.randn(1, 64)
        a = self.fm(x)
        a_copy = a.clone()
        self.fm(torch.randn(1, 64))
        self.assertTrue(torch.equal(a, a_copy))

    def test_wrong_inputs_to_a_numpy_model(self):
        self.assertRaisesWith(TypeError, "must be float32, not float64", self.cm, np.zeros((1, 64)))
        self.assertRaisesWith(ValueError, "must have shape [1, 64], not [64]", self.cm, np.zeros(64, np.float32))
        self.assertRaisesWith(TypeError, "must be a NumPy array", self.cm, "x")
        self.assertRaisesWith(ValueError, "takes 1 input, not 0", self.cm)
        x = np.zeros((1, 64), np.float32)
        self.assertRaisesWith(ValueError, "must have shape [1, 10], not [10]", self.cm.run, [x], [np.zeros(10, np.float32)])
        self.assertRaisesWith(ValueError, "has 1 output, not 2", self.cm.run, [x], [x, x])
        ro = np.zeros((1, 10), np.float32)
        ro.setflags(write=False)
        self.assertRaisesWith(ValueError, "read-only", self.cm.run, [x], [ro])
        strided = np.zeros((1, 20), np.float32)[:, ::2]
        self.assertRaisesWith(ValueError, "C-contiguous", self.cm.run, [x], [strided])

        self.assertRaisesWith(ValueError, "calls must be at least 1 (0) and warmup 0 or more (10)", self.cm.profile,
                              [np.zeros((1, 64), np.float32)], 0)
    def test_bad_files_and_arguments(self):
        self.assertRaisesWith(ValueError, "no such model library", tunefarm.load, os.path.join(TMP, "missing.so"))
        not_a_model = os.path.join(TMP, "kernel.so")
        tunefarm.compile_kernel("matmul(M=2,N=2,K=2)", out=not_a_model)
        self.assertRaisesWith(ValueError, "not a tunefarm model library", tunefarm.load, not_a_model)
        self.assertRaisesWith(ValueError, "no such model file", tunefarm.optimize, os.path.join(TMP, "missing.onnx"))
        self.assertRaisesWith(TypeError, "torch.nn.Module or an .onnx path, not int", tunefarm.optimize, 3)
        self.assertRaisesWith(ValueError, "needs example_inputs", tunefarm.optimize, seeded(MLP))
        self.assertRaisesWith(ValueError, "example inputs are on meta", tunefarm.optimize, seeded(MLP),
                              torch.randn(1, 64, device="meta"))
        self.assertRaisesWith(ValueError, "no tuning database at", tunefarm.Database, os.path.join(TMP, "no.db"))
        self.assertRaisesWith(ValueError, "unknown operator", tunefarm.compile_kernel, "nosuchop(M=1)")
        self.assertRaisesWith(ValueError, "bad JSON", tunefarm._tunefarm.Kernel, "matmul(M=2,N=2,K=2)", "", "{", "",
                              os.path.join(TMP, "k.so"))
        k = tunefarm.compile_kernel("matmul(M=2,N=2,K=2)")
        self.assertRaisesWith(ValueError, "takes 3 arrays", k, np.zeros((2, 2), np.float32))
        garbage = os.path.join(TMP, "garbage.onnx")
        with open(garbage, "wb") as f:
            f.write(b"not a model")
        self.assertRaisesWith(ValueError, "garbage.onnx", tunefarm.optimize, garbage)
        onnx = os.path.join(TMP, "errors_mlp.onnx")
        torch.onnx.export(seeded(MLP), (torch.randn(1, 64),), onnx, opset_version=13)
        # A model compiled for a GPU loads anywhere; without the driver a call says so.
        gpu = tunefarm.load(tunefarm.compile_model(onnx, target="cuda -arch=sm_90"))
        self.assertEqual([tuple(i["shape"]) for i in gpu.inputs], [(1, 64)])
        self.assertEqual(gpu._model.device_kind, "cuda")
        self.assertRaisesWith(ValueError, "per-kernel profiles of cuda libraries are not implemented", gpu.profile,
                              [np.zeros((1, 64), np.float32)])
        if ctypes.util.find_library("cuda") is None:
            self.assertRaisesWith(RuntimeError, "the driver's library (libcuda.so.1) did not load", gpu,
                                  np.zeros((1, 64), np.float32))
        # Shape buckets for a GPU: one library, each bucket's shapes; a bucket it has not is
        # refused by name before the driver is needed.
        dyn = os.path.join(TMP, "errors_mlp_dyn.onnx")
        torch.onnx.export(seeded(MLP), (torch.randn(1, 64),), dyn, opset_version=13, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        gpu_buckets = tunefarm.load(tunefarm.compile_model(dyn, target="cuda -arch=sm_90", dims={"batch": [1, 4]}))
        self.assertEqual([tuple(b["inputs"][0]["shape"]) for b in gpu_buckets.buckets], [(1, 64), (4, 64)])
        self.assertRaisesWith(ValueError, "no shape bucket 5 (it has 2)", gpu_buckets._model.run_device, [0], [0], 0, 5)
        if ctypes.util.find_library("cuda") is None:
            self.assertRaisesWith(RuntimeError, "the driver's library (libcuda.so.1) did not load",
                                  gpu_buckets._model.run_device, [0], [0], 0, 1)
        # As a PyTorch module it takes CUDA tensors (and runs on their stream); a CPU library
        # has no device entry point.
        module = tunefarm.optimize(seeded(MLP), (torch.randn(1, 64),), target="cuda -arch=sm_90")
        self.assertRaisesWith(ValueError, "compiled for a cuda GPU", module, torch.randn(1, 64))
        # Products on the GPU's tensor cores (the weights in 16 bits: weight_dtype=float16); tf32
        # is for tensor cores only, and an unknown precision is refused by name.
        tc_path = tunefarm.compile_model(onnx, target="cuda -arch=sm_90", precision="fp16")
        self.assertEqual(tunefarm.load(tc_path)._model.device_kind, "cuda")
        with open(tc_path + ".json") as f:
            kernels = json.load(f)["kernels"]
        self.assertTrue(any("weight_dtype=float16" in k.get("workload", "") for k in kernels), kernels)
        self.assertRaisesWith(ValueError, "--precision tf32 rounds the products as NVIDIA's tensor cores do",
                              tunefarm.compile_model, onnx, precision="tf32")
        self.assertRaisesWith(ValueError, "--precision 'fp8' is not one of", tunefarm.optimize, seeded(MLP),
                              (torch.randn(1, 64),), precision="fp8")
        cpu_path = tunefarm.compile_model(onnx)
        cpu = tunefarm.load(cpu_path)
        self.assertEqual(cpu._model.device_kind, "")
        self.assertRaisesWith(RuntimeError, "a CPU model takes host buffers", cpu._model.run_device, [0], [0], 0)
        # A library cut short (it killed the interpreter with SIGBUS), one for another machine
        # and a path with a NUL in it are refused by name.
        with open(cpu_path, "rb") as f:
            data = f.read()
        for keep in (len(data) * 2 // 3, len(data) - 1, 100):
            cut = os.path.join(TMP, f"cut{keep}.so")
            with open(cut, "wb") as f:
                f.write(data[:keep])
            self.assertRaisesWith(ValueError, "cut" + str(keep) + ".so: not a model library for this machine: truncated",
                                  tunefarm.load, cut)
        self.assertRaisesWith(ValueError, "has a NUL byte", tunefarm.load, cpu_path + "\x00junk")
        other = os.path.join(TMP, "other.so")
        machine, name = (62, "x86_64") if platform.machine() == "aarch64" else (183, "aarch64")
        with open(other, "wb") as f:
            f.write(data[:18] + machine.to_bytes(2, "little") + data[20:])  # e_machine
        self.assertRaisesWith(ValueError, f"built for {name}, but this machine is", tunefarm.load, other)

    def test_other_pythons_load_the_package(self):
        """The compiled core is a C library called through ctypes, not an extension module built
        for one Python: other interpreters (pyenv's 3.12 and 3.13 on this machine, as the GPU
        server's 3.12 venv) compile, load and describe models with the same package. They have
        no NumPy here, so they do not run the model; the package imports without it."""
        pythons = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")))
        if not pythons:
            self.skipTest("no Python 3.12 or later besides Debian's here (pyenv's)")
        onnx = os.path.join(TMP, "other_python_mlp.onnx")
        torch.onnx.export(seeded(MLP), (torch.randn(1, 64),), onnx, opset_version=13)
        code = ("import sys, tunefarm\n"
                "assert 'numpy' not in sys.modules\n"
                "lib = tunefarm.compile_model(sys.argv[1], out=sys.argv[2], db='')\n"
                "m = tunefarm.load(lib)\n"
                "k = tunefarm.compile_kernel('matmul(M=2,N=3,K=4)', out=sys.argv[2] + '.k.so')\n"
                "print(sys.version_info[:2], m.inputs[0]['shape'], m.outputs[0]['shape'], k.metadata['workload'])\n")
        for py in pythons:
            out = os.path.join(TMP, "other_python_%s.so" % os.path.basename(os.path.dirname(os.path.dirname(py))))
            p = subprocess.run([py, "-c", code, onnx, out], capture_output=True, text=True, timeout=300,
                               env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(tunefarm.__file__))})
            self.assertEqual(p.returncode, 0, py + ": " + p.stderr)
            self.assertIn("(1, 64) (1, 10) matmul(M=2,N=3,K=4,epilogue=none)", p.stdout, py)

    def test_gpu_example_inputs_choose_the_target(self):
        """optimize's target from example inputs on a GPU. This machine has none: PyTorch's
        device queries are replaced by FAKE answers (an H100's capability, a ROCm build's
        MI210); the real path is the same function with the real answers."""
        cuda = {torch.device("cuda", 0)}
        with mock.patch.object(torch.version, "hip", None), \
                mock.patch.object(torch.cuda, "get_device_capability", lambda d: (9, 0)):
            self.assertEqual(tunefarm._target_for(torch, cuda, None), "cuda -arch=sm_90")
            self.assertEqual(tunefarm._target_for(torch, cuda, "cuda -arch=sm_80"), "cuda -arch=sm_80")
        props = mock.Mock(gcnArchName="gfx90a:sramecc+:xnack-")
        with mock.patch.object(torch.version, "hip", "6.0"), \
                mock.patch.object(torch.cuda, "get_device_properties", lambda d: props):
            self.assertEqual(tunefarm._target_for(torch, cuda, None), "rocm -mcpu=gfx90a")
        self.assertEqual(tunefarm._target_for(torch, {torch.device("cpu")}, None), None)
        self.assertRaisesWith(ValueError, "a model runs on one device", tunefarm._target_for, torch,
                              cuda | {torch.device("cpu")}, None)
        self.assertRaisesWith(ValueError, "but target is 'llvm' (a CPU)", tunefarm._target_for, torch, cuda, "llvm")

    def test_imports_with_numpy_alone(self):
        """import tunefarm without PyTorch (its extension linked OpenMP only through torch)."""
        onnx = os.path.join(TMP, "numpy_alone_mlp.onnx")
        torch.onnx.export(seeded(MLP), (torch.randn(1, 64),), onnx, opset_version=13)
        lib = tunefarm.compile_model(onnx)
        code = ("import sys, numpy as np, tunefarm\n"
                "assert 'torch' not in sys.modules\n"
                "m = tunefarm.load(sys.argv[1])\n"
                "print(m(np.ones((1, 64), np.float32)).shape)\n")
        p = subprocess.run([sys.executable, "-c", code, lib], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(tunefarm.__file__))})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "(1, 10)")


if __name__ == "__main__":
    unittest.main()
