"""The package's compiled core, libtunefarm_python.so (python/capi.cc), through ctypes: models
and kernels loaded and called without copies of C-contiguous arrays of the right element type,
compiling and the database as the command line does them. A C library rather than an
extension module, so the package imports in any Python 3 (Debian's 3.11 here, the GPU
server's 3.12 venv) and needs no build per interpreter. NumPy is imported only where arrays
are made or checked.

Errors: ValueError for bad input (the library's UserError, bad JSON, a wrong shape or count),
TypeError for a wrong element type or a non-array, RuntimeError for a failure."""

import ctypes
import json
import os

_LIB_NAME = "libtunefarm_python.so"


def _load():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, _LIB_NAME)
    # In a bundle (scripts/bundle.sh: <bundle>/python/tunefarm) LLVM's linker, which compiles of
    # GPU models start, is <bundle>/libexec/ld.lld, which compiler/link.cc (looking beside the
    # running program, here Python) would not find: it takes TUNEFARM_LLD first.
    lld = os.path.normpath(os.path.join(here, "..", "..", "libexec", "ld.lld"))
    if "TUNEFARM_LLD" not in os.environ and os.path.isfile(lld):
        os.environ["TUNEFARM_LLD"] = lld
    if not os.path.isfile(path):
        raise ImportError("the tunefarm package has no %s next to it (%s): build the project (it is made into "
                          "build/python/tunefarm) or use the bundle's package" % (_LIB_NAME, path))
    lib = ctypes.CDLL(path)
    c, p, i, u64 = ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64
    pp = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "tfpy_error": ([], c), "tfpy_result": ([], c),
        "tfpy_model_open": ([c, pp], i), "tfpy_model_close": ([p], None),
        "tfpy_model_run": ([p, pp, pp, i, i], i),
        "tfpy_model_run_device": ([p, ctypes.POINTER(u64), ctypes.POINTER(u64), p, i], i),
        "tfpy_model_set_device": ([p, i], i),
        "tfpy_model_padded_bucket": ([p, c, ctypes.POINTER(i)], i),
        "tfpy_model_time_calls": ([p, pp, pp, i, i, i, i, ctypes.POINTER(ctypes.c_double)], i),
        "tfpy_model_profile": ([p, pp, pp, i, i, i, i], i),
        "tfpy_compile_model": ([c, c, c, c, i, ctypes.c_int64, c, c], i),
        "tfpy_kernel_open": ([c, c, c, c, c, pp], i), "tfpy_kernel_close": ([p], None),
        "tfpy_kernel_call": ([p, pp, i], i),
        "tfpy_db_open": ([c, pp], i), "tfpy_db_close": ([p], None), "tfpy_db_query": ([p, c, c, c], i),
        "tfpy_host_target": ([], c), "tfpy_default_database": ([], c),
    }
    for name, (args, res) in sigs.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    return lib


_lib = _load()


def _text(s):
    if "\x00" in s:
        raise ValueError("%r has a NUL byte" % s)
    return s.encode()


def _check(rc):
    """Raises what a call's return code says (python/capi.cc), with the library's message."""
    if rc == 0:
        return
    msg = _lib.tfpy_error().decode(errors="replace")
    raise ValueError(msg) if rc == 1 else RuntimeError(msg)


def _result():
    return json.loads(_lib.tfpy_result().decode())


def _pointers(values):
    return (ctypes.c_void_p * max(len(values), 1))(*values)


def _shape_str(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


class _Arg:
    """An argument's name, shape (a tuple) and NumPy element type, checked against arrays. A
    bfloat16 model input or output, which NumPy has no type for, is a uint16 array of its bits
    (PyTorch's bfloat16 tensors through tunefarm.optimize are taken as they are)."""

    def __init__(self, spec):
        import numpy as np
        self.name, self.shape = spec["name"], tuple(spec["shape"])
        self.bfloat16 = spec["dtype"] == "bfloat16"
        self.dtype = np.dtype(np.uint16 if self.bfloat16 else spec["dtype"])

    def new(self):
        import numpy as np
        return np.empty(self.shape, dtype=self.dtype)

    def checked(self, a, role):
        """`a` as a C-contiguous NumPy array of this type and shape, or a TypeError/ValueError
        naming the argument. A non-contiguous input is copied (only here); an output must be
        contiguous and writable (written in place)."""
        import numpy as np
        if not isinstance(a, np.ndarray):
            raise TypeError("%s '%s' must be a NumPy array (or a PyTorch tensor through tunefarm.optimize), not %s" %
                            (role, self.name, type(a).__name__))
        if a.dtype != self.dtype:
            raise TypeError("%s '%s' must be %s, not %s" % (role, self.name, "uint16 (the bits of bfloat16 values: NumPy has "
                                                            "no bfloat16)" if self.bfloat16 else self.dtype.name, a.dtype))
        if a.shape != self.shape:
            raise ValueError("%s '%s' must have shape %s, not %s" % (role, self.name, _shape_str(self.shape),
                                                                   _shape_str(a.shape)))
        if role == "output":
            if not a.flags.c_contiguous:
                raise ValueError("output '%s' must be C-contiguous (the model writes it in place)" % self.name)
            if not a.flags.writeable:
                raise ValueError("output '%s' is read-only" % self.name)
        elif not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        return a


def _count(n, what):
    return "%d %s%s" % (n, what, "" if n == 1 else "s")


class Model:
    """A compiled model library (tunefarm compile --model)."""

    def __init__(self, path):
        path = os.fspath(path)
        handle = ctypes.c_void_p()
        _check(_lib.tfpy_model_open(_text(path), ctypes.byref(handle)))
        self._h = handle
        info = _result()
        self.path = path
        self._info = info
        self.inputs = [{"name": s["name"], "shape": tuple(s["shape"]), "dtype": s["dtype"]} for s in info["inputs"]]
        self.outputs = [{"name": s["name"], "shape": tuple(s["shape"]), "dtype": s["dtype"]} for s in info["outputs"]]
        self.device_kind = info["device_kind"]
        # Shape buckets (compile --model --dim batch=1,8,32): each bucket's inputs and outputs;
        # one bucket, the tables', for a library of one set of sizes.
        self.buckets = [{"inputs": [{"name": s["name"], "shape": tuple(s["shape"]), "dtype": s["dtype"]}
                                    for s in b["inputs"]],
                         "outputs": [{"name": s["name"], "shape": tuple(s["shape"]), "dtype": s["dtype"]}
                                     for s in b["outputs"]],
                         "padded": bool(b.get("padded", False))} for b in info.get("buckets", [info])]
        self._args = None  # per bucket (_Arg inputs, _Arg outputs), made with NumPy at the first call
        self._bucket = 0   # the bucket of the last inputs checked
        self._rows = None  # their rows of axis 0 where they run that bucket padded
        self._in_t = ctypes.c_void_p * max(len(self.inputs), 1)
        self._out_t = ctypes.c_void_p * max(len(self.outputs), 1)

    def __del__(self):
        if getattr(self, "_h", None):
            _lib.tfpy_model_close(self._h)
            self._h = None

    def _specs(self, bucket=0):
        if self._args is None:
            self._args = [([_Arg(s) for s in b["inputs"]], [_Arg(s) for s in b["outputs"]])
                          for b in self._info.get("buckets", [self._info])]
        return self._args[bucket]

    def padded_bucket(self, shapes):
        """The bucket inputs of these shapes run padded (compile --pad-batch): of the buckets
        that may, whose inputs have these shapes but for more rows of axis 0 (as many in every
        input), the one of fewest rows, as the library chooses it; None when none."""
        if not any(b["padded"] for b in self.buckets):
            return None
        bucket = ctypes.c_int(-1)
        _check(_lib.tfpy_model_padded_bucket(self._h, _text(json.dumps([[int(d) for d in s] for s in shapes])),
                                             ctypes.byref(bucket)))
        return bucket.value if bucket.value >= 0 else None

    def no_bucket_message(self, shapes):
        pads = [str(b["inputs"][0]["shape"][0]) for b in self.buckets if b["padded"]]
        return "no shape bucket takes inputs of shapes %s; its buckets take %s%s" % (
            ", ".join(_shape_str(s) for s in shapes),
            "; ".join(", ".join(_shape_str(s["shape"]) for s in b["inputs"]) for b in self.buckets),
            " (and fewer rows of axis 0 than %s, padded)" % ", ".join(pads) if pads else "")

    def _inputs(self, inputs):
        """`inputs` checked against the bucket whose shapes they have (self._bucket), or padded
        up to the one they run padded (self._rows: their rows)."""
        import numpy as np
        ins = self._specs()[0]
        if len(inputs) != len(ins):
            raise ValueError("the model takes %s, not %d" % (_count(len(ins), "input"), len(inputs)))
        self._bucket, self._rows = 0, None
        if len(self.buckets) > 1 or self.buckets[0]["padded"]:
            shapes = [tuple(getattr(a, "shape", ())) for a in inputs]
            found = [k for k, b in enumerate(self.buckets) if [s["shape"] for s in b["inputs"]] == shapes]
            if not found:
                padded = self.padded_bucket(shapes)
                if padded is None:
                    raise ValueError(self.no_bucket_message(shapes))
                self._bucket, self._rows = padded, shapes[0][0]
                ins = self._specs(padded)[0]
                # The rows in a zero-filled batch of the bucket's size (types checked first).
                out = []
                for a, s in zip(inputs, ins):
                    if isinstance(a, np.ndarray) and a.dtype == s.dtype:
                        full = np.zeros(s.shape, dtype=s.dtype)
                        full[:self._rows] = a
                        a = full
                    out.append(s.checked(a, "input"))
                return out
            self._bucket = found[0]
            ins = self._specs(self._bucket)[0]
        return [s.checked(a, "input") for a, s in zip(inputs, ins)]

    def run(self, inputs, outputs=None, threads=0):
        """Runs the model: `inputs` in the model's order; `outputs` (optional) arrays to write
        into, else new ones. `threads` > 0 sets this thread's OpenMP team size first."""
        keep = self._inputs(inputs)
        outs_spec = self._specs(self._bucket)[1]
        if self._rows is not None:
            # Run padded: the outputs' first rows, into `outputs` where given.
            rows = self._rows
            outs = [s.new() for s in outs_spec]
            self._call([a.ctypes.data for a in keep], outs, threads, self._bucket)
            if outputs is None:
                return [o[:rows].copy() for o in outs]
            if len(outputs) != len(outs):
                raise ValueError("the model has %s, not %d" % (_count(len(outs), "output"), len(outputs)))
            for o, given in zip(outs, outputs):
                want = (rows,) + tuple(o.shape[1:])
                if getattr(given, "shape", None) != want or getattr(given, "dtype", None) != o.dtype:
                    raise ValueError("an output of %d rows must be a %s array of shape %s" % (rows, o.dtype, _shape_str(want)))
                given[...] = o[:rows]
            return list(outputs)
        if outputs is None:
            outs = [s.new() for s in outs_spec]
        else:
            if len(outputs) != len(outs_spec):
                raise ValueError("the model has %s, not %d" % (_count(len(outs_spec), "output"), len(outputs)))
            outs = [s.checked(a, "output") for a, s in zip(outputs, outs_spec)]
        self._call([a.ctypes.data for a in keep], outs, threads, self._bucket)
        return outs

    def _call(self, inputs, outs, threads, bucket=0):
        _check(_lib.tfpy_model_run(self._h, self._in_t(*inputs), self._out_t(*[a.ctypes.data for a in outs]),
                                   int(threads), int(bucket)))

    def run_addresses(self, inputs, threads=0, bucket=0):
        """Runs the model on inputs given as addresses (PyTorch tensors' data_ptr()) that the
        caller checked against shape bucket `bucket` and keeps alive for the call; new output
        arrays."""
        if len(inputs) != len(self.inputs):
            raise ValueError("the model takes %s, not %d" % (_count(len(self.inputs), "input"), len(inputs)))
        outs = [s.new() for s in self._specs(bucket)[1]]
        self._call(inputs, outs, threads, bucket)
        return outs

    def run_device(self, inputs, outputs, stream, bucket=0):
        """A GPU library's call on device addresses (CUDA tensors' data_ptr(), checked by the
        caller against shape bucket `bucket`) and a stream; queued, not waited for."""
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise ValueError("the model takes %s and %s, not %d and %d" % (
                _count(len(self.inputs), "input"), _count(len(self.outputs), "output"), len(inputs), len(outputs)))
        u64 = ctypes.c_uint64
        _check(_lib.tfpy_model_run_device(self._h, (u64 * max(len(inputs), 1))(*inputs),
                                          (u64 * max(len(outputs), 1))(*outputs), ctypes.c_void_p(stream),
                                          int(bucket)))

    def set_device(self, index):
        _check(_lib.tfpy_model_set_device(self._h, int(index)))

    def time_calls(self, inputs, calls, warmup=10, threads=0):
        """The seconds of each of `calls` calls on `inputs`, timed in the library one at a time
        after `warmup` untimed ones."""
        if calls < 1 or warmup < 0:
            raise ValueError("calls must be at least 1 (%d) and warmup 0 or more (%d)" % (calls, warmup))
        keep = self._inputs(inputs)
        outs = [s.new() for s in self._specs(self._bucket)[1]]
        seconds = (ctypes.c_double * calls)()
        _check(_lib.tfpy_model_time_calls(self._h, self._in_t(*[a.ctypes.data for a in keep]),
                                          self._out_t(*[a.ctypes.data for a in outs]), int(calls), int(warmup),
                                          int(threads), int(self._bucket), seconds))
        return list(seconds)

    def profile(self, inputs, calls=10, warmup=10, threads=0):
        """`calls` calls on `inputs` with each kernel timed, after `warmup` untimed ones: a dict of
        runs, seconds (the calls' own) and kernels, each kernel call that ran (function, kind,
        what: its workload or nodes, flops a call, bucket, calls, seconds over all runs), the
        longest first."""
        if calls < 1 or warmup < 0:
            raise ValueError("calls must be at least 1 (%d) and warmup 0 or more (%d)" % (calls, warmup))
        keep = self._inputs(inputs)
        outs = [s.new() for s in self._specs(self._bucket)[1]]
        _check(_lib.tfpy_model_profile(self._h, self._in_t(*[a.ctypes.data for a in keep]),
                                       self._out_t(*[a.ctypes.data for a in outs]), int(calls), int(warmup),
                                       int(threads), int(self._bucket)))
        return _result()


class Kernel:
    """One compiled kernel (tunefarm.compile_kernel)."""

    def __init__(self, workload, target, config, db, out):
        handle = ctypes.c_void_p()
        _check(_lib.tfpy_kernel_open(_text(workload), _text(target), _text(config), _text(os.fspath(db)),
                                     _text(os.fspath(out)), ctypes.byref(handle)))
        self._h = handle
        info = _result()
        self.metadata = info["metadata"]
        self._args = info["args"]
        self._runs_here = info["runs_here"]

    def __del__(self):
        if getattr(self, "_h", None):
            _lib.tfpy_kernel_close(self._h)
            self._h = None

    def __call__(self, *arrays):
        """Calls the kernel on arrays of its arguments' types: its inputs, then its output
        (written in place)."""
        if not self._runs_here:
            raise ValueError("this kernel was compiled for another target: it cannot run here")
        if len(arrays) != len(self._args):
            raise ValueError("the kernel takes %d arrays (its inputs, then its output), not %d" %
                             (len(self._args), len(arrays)))
        last = len(self._args) - 1
        keep = [_Arg(s).checked(a, "output" if k == last else "input") for k, (a, s) in enumerate(zip(arrays, self._args))]
        _check(_lib.tfpy_kernel_call(self._h, _pointers([a.ctypes.data for a in keep]), len(keep)))


class Database:
    """A tuning database file, read-only; what `tunefarm query ... --json` prints."""

    def __init__(self, path):
        handle = ctypes.c_void_p()
        _check(_lib.tfpy_db_open(_text(os.fspath(path)), ctypes.byref(handle)))
        self._h = handle

    def __del__(self):
        if getattr(self, "_h", None):
            _lib.tfpy_db_close(self._h)
            self._h = None

    def _query(self, what, workload="", target=""):
        _check(_lib.tfpy_db_query(self._h, what.encode(), _text(workload), _text(target)))
        return _result()

    def best(self, workload, target=""):
        return self._query("best", workload, target)

    def best_all(self):
        return self._query("best")

    def runs(self):
        return self._query("runs")

    def models(self):
        return self._query("models")


def compile_model(onnx, out, target="", db="", opt_level=2, max_memory=0, precision="fp32", dims=None,
                  input_shapes=None, pad_batch=False):
    """Compiles an ONNX model into the library `out` with its products at `precision`
    (--precision) and its dynamic dimensions sized by `dims` ({name: size}) and `input_shapes`
    ({input: shape}), `pad_batch` as --pad-batch: library, target, kernels, tunable, tuned,
    workspace_bytes."""
    binding = json.dumps({"dims": dims or {}, "input_shapes": {k: list(v) for k, v in (input_shapes or {}).items()},
                          "pad_batch": bool(pad_batch)})
    _check(_lib.tfpy_compile_model(_text(os.fspath(onnx)), _text(os.fspath(out)), _text(target), _text(os.fspath(db)),
                                   int(opt_level), int(max_memory), _text(precision), _text(binding)))
    return _result()


def host_target():
    return _lib.tfpy_host_target().decode()


def default_database():
    return _lib.tfpy_default_database().decode()
