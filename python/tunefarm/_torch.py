"""The PyTorch side of tunefarm.optimize: a compiled model as an nn.Module."""

import torch

_DTYPES = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool}


class TorchModule(torch.nn.Module):
    """Takes and returns CPU tensors; inputs that are contiguous and of the model's element
    type are passed to the library without copies (torch.Tensor.numpy shares the memory), and
    outputs are tensors over the arrays the library wrote. The compiled model runs with
    torch.get_num_threads() threads. It has no parameters of its own: the weights are compiled
    into the library."""

    def __init__(self, compiled):
        super().__init__()
        self.compiled = compiled
        self._run = compiled._model.run
        self._specs = [(spec["name"], _DTYPES[spec["dtype"]]) for spec in compiled.inputs]

    def forward(self, *inputs):
        if len(inputs) != len(self._specs):
            n = len(self._specs)
            raise ValueError("the model takes %d input%s, not %d" % (n, "" if n == 1 else "s", len(inputs)))
        arrays = []
        for x, (name, want) in zip(inputs, self._specs):
            if not isinstance(x, torch.Tensor):
                raise TypeError("input '%s' must be a torch.Tensor, not %s" % (name, type(x).__name__))
            if x.device.type != "cpu":
                raise ValueError("input '%s' is on %s: this model was compiled for the CPU" % (name, x.device))
            if x.dtype != want:
                raise TypeError("input '%s' must be %s, not %s" % (name, want, x.dtype))
            if x.requires_grad:
                x = x.detach()
            arrays.append(x.numpy() if x.is_contiguous() else x.contiguous().numpy())
        out = self._run(arrays, None, torch.get_num_threads())
        if len(out) == 1:
            return torch.from_numpy(out[0])
        return tuple(torch.from_numpy(a) for a in out)

    def extra_repr(self):
        return "library=%s" % self.compiled.path
