"""The PyTorch side of tunefarm.optimize: a compiled model as an nn.Module."""

import torch

_DTYPES = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool}


class TorchModule(torch.nn.Module):
    """Takes and returns CPU tensors; inputs that are contiguous and of the model's element
    type are passed to the library without copies (their data_ptr(), after the checks here),
    and outputs are tensors over the arrays the library wrote. The compiled model runs with
    torch.get_num_threads() threads. It has no parameters of its own: the weights are compiled
    into the library."""

    def __init__(self, compiled):
        super().__init__()
        self.compiled = compiled
        self._run = compiled._model.run_addresses
        self._specs = [(spec["name"], _DTYPES[spec["dtype"]], torch.Size(spec["shape"])) for spec in compiled.inputs]

    def forward(self, *inputs):
        if len(inputs) != len(self._specs):
            n = len(self._specs)
            raise ValueError("the model takes %d input%s, not %d" % (n, "" if n == 1 else "s", len(inputs)))
        keep = []
        for x, (name, dtype, shape) in zip(inputs, self._specs):
            if not isinstance(x, torch.Tensor):
                raise TypeError("input '%s' must be a torch.Tensor, not %s" % (name, type(x).__name__))
            if not x.is_cpu:
                raise ValueError("input '%s' is on %s: this model was compiled for the CPU" % (name, x.device))
            if x.dtype != dtype:
                raise TypeError("input '%s' must be %s, not %s" % (name, dtype, x.dtype))
            if x.shape != shape:
                raise ValueError("input '%s' must have shape %s, not %s" % (name, list(shape), list(x.shape)))
            keep.append(x if x.is_contiguous() else x.contiguous())
        # The library reads the tensors' memory in place (kept alive by `keep` for the call).
        out = self._run([x.data_ptr() for x in keep], torch.get_num_threads())
        if len(out) == 1:
            return torch.from_numpy(out[0])
        return tuple(torch.from_numpy(a) for a in out)

    def extra_repr(self):
        return "library=%s" % self.compiled.path
