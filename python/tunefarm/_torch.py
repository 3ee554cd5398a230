"""The PyTorch side of tunefarm.optimize: a compiled model as an nn.Module."""

import torch

_DTYPES = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool, "float16": torch.float16,
           "bfloat16": torch.bfloat16}


def _tensor(a, dtype):
    """A NumPy output the library wrote, as a tensor of the model's type (bfloat16 comes as uint16
    bits, which PyTorch takes as int16)."""
    if dtype == torch.bfloat16:
        return torch.from_numpy(a.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(a)


class TorchModule(torch.nn.Module):
    """Takes and returns CPU tensors; inputs that are contiguous and of the model's element
    type are passed to the library without copies (their data_ptr(), after the checks here),
    and outputs are tensors over the arrays the library wrote. The compiled model runs with
    torch.get_num_threads() threads. It has no parameters of its own: the weights are compiled
    into the library.

    A model compiled for a CUDA GPU takes and returns CUDA tensors instead: the library runs on
    the inputs' device and PyTorch's current stream (tf_model_run_device), writing outputs it
    allocates there with PyTorch; nothing is copied or waited for."""

    def __init__(self, compiled):
        super().__init__()
        self.compiled = compiled
        self._run = compiled._model.run_addresses
        self._gpu = compiled._model.device_kind
        self._device = None
        self._specs = [(spec["name"], _DTYPES[spec["dtype"]], torch.Size(spec["shape"])) for spec in compiled.inputs]
        self._outs = [(_DTYPES[spec["dtype"]], torch.Size(spec["shape"])) for spec in compiled.outputs]
        # Shape buckets (a library compiled with a list of sizes): each bucket's input shapes, and
        # its output shapes (a GPU library's outputs are allocated here); a library compiled with
        # --pad-batch runs fewer rows of axis 0 in a larger bucket, padded.
        self._buckets = [[torch.Size(s["shape"]) for s in b["inputs"]] for b in compiled._model.buckets]
        self._bucket_outs = [[torch.Size(s["shape"]) for s in b["outputs"]] for b in compiled._model.buckets]

    def forward(self, *inputs):
        if len(inputs) != len(self._specs):
            n = len(self._specs)
            raise ValueError("the model takes %d input%s, not %d" % (n, "" if n == 1 else "s", len(inputs)))
        keep = []
        bucket, rows = 0, None
        model = self.compiled._model
        if len(self._buckets) > 1 or model.buckets[0]["padded"]:
            shapes = [getattr(x, "shape", None) for x in inputs]
            found = [k for k, b in enumerate(self._buckets) if b == shapes]
            if found:
                bucket = found[0]
            else:
                # A library compiled with --pad-batch runs fewer rows of axis 0 in a larger
                # bucket: the rows in a zero-filled batch of its size, the outputs' first rows.
                padded = model.padded_bucket([tuple(s) for s in shapes]) if all(s is not None for s in shapes) else None
                if padded is None:
                    raise ValueError(model.no_bucket_message([tuple(s) if s is not None else () for s in shapes]))
                bucket, rows = padded, shapes[0][0]
                inputs = [self._padded(x, self._buckets[bucket][k]) for k, x in enumerate(inputs)]
        for x, (name, dtype, _), shape in zip(inputs, self._specs, self._buckets[bucket]):
            if not isinstance(x, torch.Tensor):
                raise TypeError("input '%s' must be a torch.Tensor, not %s" % (name, type(x).__name__))
            if self._gpu and x.device.type != "cuda":
                raise ValueError("input '%s' is on %s: this model was compiled for a %s GPU (pass tensors on it)" %
                                 (name, x.device, self._gpu))
            if not self._gpu and not x.is_cpu:
                raise ValueError("input '%s' is on %s: this model was compiled for the CPU" % (name, x.device))
            if x.dtype != dtype:
                raise TypeError("input '%s' must be %s, not %s" % (name, dtype, x.dtype))
            if x.shape != shape:
                raise ValueError("input '%s' must have shape %s, not %s" % (name, list(shape), list(x.shape)))
            keep.append(x if x.is_contiguous() else x.contiguous())
        if self._gpu:
            outs = self._forward_device(keep, bucket)
        else:
            # The library reads the tensors' memory in place (kept alive by `keep` for the call).
            out = self._run([x.data_ptr() for x in keep], torch.get_num_threads(), bucket)
            outs = [_tensor(a, dtype) for a, (dtype, _) in zip(out, self._outs)]
        if rows is not None:
            outs = [y[:rows] for y in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def _padded(x, shape):
        """`x`'s rows in a zero-filled tensor of `shape` (its type and device), or `x` as it is
        when it is not a tensor (the checks below say so)."""
        if not isinstance(x, torch.Tensor):
            return x
        full = torch.zeros(shape, dtype=x.dtype, device=x.device)
        full[:x.shape[0]] = x
        return full

    def _forward_device(self, inputs, bucket):
        device = inputs[0].device if inputs else torch.device("cuda", torch.cuda.current_device())
        if any(x.device != device for x in inputs):
            raise ValueError("the inputs are on %s: a model runs on one GPU" % sorted({str(x.device) for x in inputs}))
        if self._device is None:
            self.compiled._model.set_device(device.index or 0)
            self._device = device
        elif device != self._device:
            raise ValueError("the inputs are on %s; this model runs on %s (its device is chosen by its first call)" %
                             (device, self._device))
        # The kernels' vector accesses need 16-byte aligned buffers: a view that is not is copied.
        inputs = [x if x.data_ptr() % 16 == 0 else x.clone() for x in inputs]
        outs = [torch.empty(shape, dtype=dtype, device=device)
                for (dtype, _), shape in zip(self._outs, self._bucket_outs[bucket])]
        self.compiled._model.run_device([x.data_ptr() for x in inputs], [y.data_ptr() for y in outs],
                                        torch.cuda.current_stream(device).cuda_stream, bucket)
        return outs

    def extra_repr(self):
        return "library=%s" % self.compiled.path
