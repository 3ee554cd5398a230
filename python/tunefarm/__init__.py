"""tunefarm from Python: compile, tune and run ONNX and PyTorch models and single kernels.

    import torch, torchvision, tunefarm
    m = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 224, 224)
    fm = tunefarm.optimize(m, x)
    torch.testing.assert_close(fm(x), m(x), rtol=1e-4, atol=1e-4)

Compiled models are the libraries `tunefarm compile --model` writes; they are called here
through the compiled core (libtunefarm_python.so, a C library called with ctypes: any Python 3
loads it) with the caller's NumPy arrays or PyTorch tensors, without copies when they are
contiguous and of the model's element type. Tuned configs come from the tuning database
(docs/database.md) or, with server=, the tuning service. docs/python.md has the whole story.
"""

import hashlib
import inspect
import json
import os
import shutil
import subprocess
import tempfile

from . import _tunefarm

__all__ = ["optimize", "load", "compile_model", "compile_kernel", "Database", "CompiledModel", "TunefarmError"]


class TunefarmError(RuntimeError):
    """A tunefarm command (tuning, the service) failed; its message is the command's."""


def _binary():
    """The `tunefarm` program: next to this package in a build tree (build/bin), else on PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "..", "..", "bin", "tunefarm"), shutil.which("tunefarm")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise TunefarmError("the tunefarm program is neither next to this package (build/bin) nor on PATH: "
                        "tuning and the tuning service need it")


def _run_cli(args):
    r = subprocess.run([_binary()] + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise TunefarmError("tunefarm %s failed (exit %d): %s" % (" ".join(args[:2]), r.returncode,
                                                                  (r.stderr or r.stdout).strip()))
    return r.stdout


def _cache_dir(cache_dir):
    d = cache_dir or os.environ.get("TUNEFARM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")), "tunefarm")
    os.makedirs(d, exist_ok=True)
    return d


class CompiledModel:
    """A compiled model library: call it with NumPy arrays (in the model's input order), get
    NumPy arrays back. `inputs` and `outputs` give names, shapes and dtypes."""

    def __init__(self, path):
        self._model = _tunefarm.Model(os.fspath(path))

    @property
    def path(self):
        return self._model.path

    @property
    def inputs(self):
        return self._model.inputs

    @property
    def outputs(self):
        return self._model.outputs

    @property
    def buckets(self):
        """Each shape bucket's inputs and outputs ({"inputs": [...], "outputs": [...]}): one for a
        library of one set of sizes; inputs and outputs are bucket 0's."""
        return self._model.buckets

    def run(self, inputs, outputs=None, threads=0):
        """Runs the model: `outputs` (optional) are arrays to write into; `threads` > 0 sets the
        calling thread's OpenMP thread count first (else it stays what it is)."""
        return self._model.run(list(inputs), outputs, int(threads))

    def __call__(self, *inputs):
        out = self._model.run(inputs, None, 0)
        return out[0] if len(out) == 1 else tuple(out)

    def time_calls(self, inputs, calls, warmup=10, threads=0):
        """The seconds of each of `calls` calls timed in C++ (the C ABI's own time, in this
        process), after `warmup` untimed calls."""
        return self._model.time_calls(list(inputs), int(calls), int(warmup), int(threads))

    def profile(self, inputs, calls=10, warmup=10, threads=0):
        """Each kernel's time over `calls` calls (after `warmup` untimed ones), as `tunefarm run
        --model --profile` prints it (docs/models.md, "Profiling"): {"runs", "seconds" (the
        calls', end to end), "kernels": [{"function", "kind", "what" (its workload or nodes),
        "flops" (a call; 0: not known), "bucket", "calls", "seconds" (in all)}, ...], longest
        first}. CPU libraries only."""
        return self._model.profile(list(inputs), int(calls), int(warmup), int(threads))


def load(path):
    """A compiled model library (`tunefarm compile --model` or `compile_model`)."""
    return CompiledModel(path)


def _dim_args(dims, input_shapes):
    """--dim and --input-shape arguments for `dims` ({name: size}) and `input_shapes` ({input:
    shape}); ValueError for anything else."""
    if dims is not None and not isinstance(dims, dict):
        raise ValueError("dims must be a dict of dimension names to sizes, not %s" % type(dims).__name__)
    if input_shapes is not None and not isinstance(input_shapes, dict):
        raise ValueError("input_shapes must be a dict of input names to shapes, not %s" % type(input_shapes).__name__)
    args = []
    def is_size(v):
        return isinstance(v, int) and not isinstance(v, bool)
    for name, size in (dims or {}).items():
        # A list of sizes: one shape bucket per size (compile_model and optimize).
        sizes = list(size) if isinstance(size, (list, tuple)) else [size]
        if not sizes or not all(is_size(v) for v in sizes):
            raise ValueError("dims[%r] must be an int or a list of ints, not %r" % (name, size))
        args += ["--dim", "%s=%s" % (name, ",".join(str(v) for v in sizes))]
    for name, shape in (input_shapes or {}).items():
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise ValueError("input_shapes[%r] must be a sequence of ints, not %r" % (name, shape))
        args += ["--input-shape", "%s=%s" % (name, ",".join(str(d) for d in shape))]
    return args


def compile_model(onnx_path, out=None, target=None, db=None, server=None, opt_level=2, precision="fp32", dims=None,
                  input_shapes=None, pad_batch=False):
    """Compiles an .onnx model with the tuned configs of `db` (a database file; None: the
    default database, $TUNEFARM_DB or ~/.local/share/tunefarm/tuning.db, when it exists) or of
    the tuning service at `server` (HOST:PORT), its products at `precision` (fp32; bf16 or fp16
    on CPUs; tf32, fp16 or bf16 on tensor cores of cuda targets: docs/precision.md). A model
    with dynamic input dimensions needs their sizes: `dims` by name ({"batch": 8}), or
    `input_shapes` ({"x": (1, 3, 224, 224)}), as --dim and --input-shape (docs/models.md); a
    list of sizes ({"batch": [1, 8, 32]}) makes one shape bucket per size, and the library runs
    the bucket of its inputs' shapes; `pad_batch` (--pad-batch) runs fewer rows of axis 0 in the
    next larger bucket, padded, where the model keeps those rows apart (ValueError where it
    does not). Returns the library's path."""
    dim_args = _dim_args(dims, input_shapes)
    onnx_path = os.fspath(onnx_path)
    if out is None:
        # Named by the model's contents and what it is compiled for (target, configs' source).
        h = hashlib.sha256()
        with open(onnx_path, "rb") as f:
            h.update(f.read())
        h.update(repr((target, os.fspath(db) if db else db, server, opt_level, precision, dim_args,
                       bool(pad_batch))).encode())
        out = os.path.join(_cache_dir(None), "%s-%s.so" % (os.path.basename(onnx_path).rsplit(".", 1)[0],
                                                            h.hexdigest()[:16]))
    out = os.fspath(out)
    if server is not None:
        args = ["compile", "--model", onnx_path, "-o", out, "-O", str(opt_level), "--server", server,
                "--precision", precision] + dim_args + (["--pad-batch"] if pad_batch else [])
        if target:
            args += ["-t", target]
        _run_cli(args)
        return out
    if db is None:
        default = _tunefarm.default_database()
        db = default if os.path.exists(default) else ""
    _tunefarm.compile_model(onnx_path, out, target or "", os.fspath(db), opt_level, precision=precision, dims=dims,
                            input_shapes=input_shapes, pad_batch=pad_batch)
    return out


def compile_kernel(workload, target=None, config=None, db=None, out=None):
    """Compiles one kernel (a workload spec, e.g. 'matmul(M=64,N=64,K=64)') with `config` (a
    dict), else the database's tuned config, else the default. The result is callable with
    arrays of its arguments' types (float32; uint8, int8 and int32 for integer workloads such
    as 'matmul(M=64,N=64,K=64,dtype=uint8,weight_dtype=int8)'; float16, or uint16 arrays of the
    bits of bfloat16, for dtype=float16 / bfloat16), its inputs then its output
    (written in place), when it was compiled for this machine; `.metadata` is its sidecar
    (arguments with their dtype, config, FLOPs). The library is written to `out` (and its
    sidecar beside it) when given, else to a temporary folder removed once it is loaded."""
    cfg = json.dumps(config) if config is not None else ""

    def kernel(path):
        return _tunefarm.Kernel(workload, target or "", cfg, os.fspath(db) if db else "", os.fspath(path))

    if out is not None:
        return kernel(out)
    # A library of its own in a temporary folder, removed once the kernel has loaded it (the
    # loaded code stays mapped): one folder a call would otherwise stay in /tmp for good.
    folder = tempfile.mkdtemp(prefix="tunefarm-kernel-")
    try:
        return kernel(os.path.join(folder, "kernel.so"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Database:
    """The tuning database, read-only: a file path, or "HOST:PORT" of the tuning service (read
    through the tunefarm program). Methods return what `tunefarm query ... --json` prints."""

    def __init__(self, path_or_server=None):
        self._server = None
        self._db = None
        if path_or_server is not None and not os.path.exists(path_or_server) and ":" in path_or_server \
                and "/" not in path_or_server:
            self._server = path_or_server
            return
        path = path_or_server or _tunefarm.default_database()
        if not os.path.exists(path):
            raise ValueError("no tuning database at %s" % path)
        self._db = _tunefarm.Database(os.fspath(path))

    def _query(self, *args):
        return json.loads(_run_cli(["query"] + list(args) + ["--json", "--server", self._server]))

    def best(self, workload=None, target=None):
        """The best config of `workload` on `target` (this machine when None): its tier, record,
        robust median; without a workload, the best record of every (workload, target)."""
        if self._server:
            return self._query("best", *(["-w", workload] if workload else []), *(["-t", target] if target else []))
        if workload is None:
            return self._db.best_all()
        return self._db.best(workload, target or "")

    def runs(self):
        if self._server:
            return self._query("runs")
        return self._db.runs()

    def models(self):
        if self._server:
            return self._query("models")
        return self._db.models()


def _tune(onnx_path, tune, target, db, server, precision="fp32", dim_args=()):
    """Whole-model tuning before compiling: `tune` is a trial count, or a dict of trials,
    tracker, key and token_file (the farm's client token), strategy; without a tracker, on this
    machine."""
    opts = {"trials": tune} if isinstance(tune, int) else dict(tune)
    unknown = sorted(set(opts) - {"trials", "tracker", "key", "token_file", "strategy"})
    if unknown:
        raise ValueError("tune= takes trials, tracker, key, token_file and strategy, not %s" % ", ".join(unknown))
    if server is not None:
        args = ["submit", "--model", onnx_path, "--trials", str(opts.get("trials", 200)), "--server", server,
                "--watch", "--precision", precision, *dim_args]
        if target:
            args += ["-t", target]
        _run_cli(args)
        return
    args = ["tune", "--model", onnx_path, "--trials", str(opts.get("trials", 200)), "--precision", precision, *dim_args]
    if opts.get("tracker"):
        args += ["--tracker", opts["tracker"], "--key", opts.get("key", "")]
        if opts.get("token_file"):
            args += ["--token-file", os.fspath(opts["token_file"])]
    else:
        args += ["--local"]
    if opts.get("strategy"):
        args += ["--strategy", opts["strategy"]]
    if target:
        args += ["-t", target]
    if db:
        args += ["--db", os.fspath(db)]
    _run_cli(args)


def _target_for(torch, devices, target):
    """The target a Module is compiled for, from its example inputs' device: `target` as given,
    else this machine for CPU tensors, else the GPU that holds them (a CUDA device's compute
    capability, `cuda -arch=sm_XY`; on PyTorch's ROCm build, whose devices are also "cuda",
    `rocm -mcpu=<gcnArchName>`)."""
    if len(devices) > 1:
        raise ValueError("example inputs are on %s: a model runs on one device" % sorted(str(d) for d in devices))
    device = next(iter(devices))
    if device.type == "cpu":
        return target
    if device.type != "cuda":
        raise ValueError("example inputs are on %s: models compile for CPUs and CUDA or ROCm GPUs" % device)
    if target is not None:
        if not target.split()[0] in ("cuda", "rocm"):
            raise ValueError("example inputs are on %s, but target is '%s' (a CPU): pass CPU tensors, or a GPU "
                             "target" % (device, target))
        return target
    if getattr(torch.version, "hip", None):
        return "rocm -mcpu=" + torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]
    major, minor = torch.cuda.get_device_capability(device)
    return "cuda -arch=sm_%d%d" % (major, minor)


def optimize(model, example_inputs=None, target=None, db=None, tune=None, server=None, cache_dir=None,
             opset=13, precision="fp32", dims=None, input_shapes=None, pad_batch=False):
    """A compiled version of `model`: an .onnx path, or a torch.nn.Module (exported to ONNX with
    `example_inputs`, a tensor or a tuple of them). For a Module the result is an nn.Module
    taking and returning torch tensors; for a path, a CompiledModel taking NumPy arrays.
    Example inputs on a GPU compile the Module for that GPU (unless `target` says which), and
    the result then takes and returns tensors on it.
    `tune` (a trial count, or a dict: trials, tracker, key, strategy) tunes the whole model
    first (tunefarm tune --model, or submit --model with `server`); the tuned configs of `db`
    (or the service) are then used. `precision` is --precision: on a GPU's inputs, "tf32",
    "fp16" or "bf16" runs the products on its tensor cores. A .half() or .bfloat16() model with
    inputs of that type takes and returns tensors of that type (computed in float32 between
    them, its products in `precision`). `dims` and `input_shapes` size an .onnx model's dynamic
    dimensions (compile_model; a list of sizes makes one shape bucket per size, and `pad_batch`
    runs fewer rows of axis 0 in the next larger one, padded)."""
    cache = _cache_dir(cache_dir)
    torch_module = None
    if isinstance(model, (str, os.PathLike)):
        onnx_path = os.fspath(model)
        if not os.path.isfile(onnx_path):
            raise ValueError("no such model file: %s" % onnx_path)
    else:
        import torch  # only for Modules
        if not isinstance(model, torch.nn.Module):
            raise TypeError("optimize takes a torch.nn.Module or an .onnx path, not %s" % type(model).__name__)
        if example_inputs is None:
            raise ValueError("optimize needs example_inputs to export a torch.nn.Module")
        args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        for a in args:
            if not isinstance(a, torch.Tensor):
                raise TypeError("example_inputs must be tensors, not %s" % type(a).__name__)
        target = _target_for(torch, {a.device for a in args}, target)
        fd, onnx_path = tempfile.mkstemp(suffix=".onnx", dir=cache)
        os.close(fd)
        was_training = model.training
        model.eval()
        try:
            # PyTorch 2.x defaults to the dynamo exporter, which needs onnxscript (not a
            # dependency of ours, and absent from plain PyTorch installs): the TorchScript one.
            kwargs = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
            torch.onnx.export(model, args, onnx_path, opset_version=opset,
                              input_names=["input%d" % i for i in range(len(args))], do_constant_folding=True,
                              **kwargs)
        finally:
            model.train(was_training)
        with open(onnx_path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:16]
        named = os.path.join(cache, "model-%s.onnx" % digest)
        os.replace(onnx_path, named)
        onnx_path = named
        torch_module = True
    if tune is not None:
        _tune(onnx_path, tune, target, db, server, precision, _dim_args(dims, input_shapes))
    lib = compile_model(onnx_path, target=target, db=db, server=server, precision=precision, dims=dims,
                        input_shapes=input_shapes, pad_batch=pad_batch)
    compiled = CompiledModel(lib)
    if torch_module:
        from ._torch import TorchModule
        return TorchModule(compiled)
    return compiled
