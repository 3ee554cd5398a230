#!/usr/bin/python3
"""Export a model with PyTorch to ONNX, with random weights from a fixed seed, for trying
`tunefarm compile --model` and for bench/model_bench.py. Needs Debian's python3-torch and
python3-torchvision (scripts/install-deps.sh installs them); run it with /usr/bin/python3.

Usage: export_model.py NAME -o FILE.onnx [--input FILE.npy] [--expect FILE.npy] [--dynamic-batch]
  NAME: resnet18, resnet50, mobilenet_v2 (batch 1, 3x224x224), bert2 (2 BERT-base encoder
        layers, sequence 128, hidden 768), bert_base (the 12 layers), bert_base_b8 and
        bert_base_b8_s384 (8 sequences of 128 and 384 tokens), mlp (784-512-256-10), lstm (a
        2-layer LSTM, hidden 512, over 64 steps of 256 features, and a linear head),
        resnext50, regnet_y_400mf, squeezenet1_1; or any classification model of torchvision
        by its name (convnext_tiny, efficientnet_b0, ...: 3x224x224, Inception-v3 3x299x299;
        ZOO lists those bench/model_bench.py --zoo times), or segmentation model
        (fcn_resnet50, deeplabv3_mobilenet_v3_large, lraspp_mobilenet_v3_large, ...: 3x320x320,
        21 classes, the "out" tensor)
  --input/--expect: also save a random input and PyTorch's output for it.
  --dynamic-batch: the batch axis symbolic ('batch': compile --model --dim batch=1,8,32).
"""
import argparse
import inspect
import sys

import numpy as np
import torch
import torchvision


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                       torch.nn.ReLU(), torch.nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


class Recurrent(torch.nn.Module):
    """A sequence classifier: a 2-layer LSTM (hidden 512) over 64 steps of 256 features, and a
    linear head on the last step's output."""

    def __init__(self, features=256, hidden=512, layers=2, classes=10):
        super().__init__()
        self.lstm = torch.nn.LSTM(features, hidden, num_layers=layers, batch_first=True)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class Encoder(torch.nn.Module):
    """Transformer encoder layers (attention, LayerNorm, GELU); by default two of BERT-base's:
    hidden 768, 12 heads, feed-forward 3072. tests/graph/torch_models_test.py uses a small one."""

    def __init__(self, d=768, heads=12, ff=3072, layers=2):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, batch_first=True, activation="gelu")
        self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        # TransformerEncoder deep-copies one layer, and the ONNX exporter stores equal
        # initializers once: every layer would then read the same 28 MB of weights (which a
        # GPU's 50 MB L2 holds), where a trained BERT-base has 12 layers of their own (340 MB).
        # Each layer gets its own draw.
        for lay in self.enc.layers:
            lay.self_attn._reset_parameters()
            lay.linear1.reset_parameters()
            lay.linear2.reset_parameters()

    def forward(self, x):
        return self.enc(x)


MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(), (1, 3, 224, 224), 13),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(), (1, 3, 224, 224), 13),
    "resnet50": (lambda: torchvision.models.resnet50(), (1, 3, 224, 224), 13),
    "bert2": (Encoder, (1, 128, 768), 17),
    "bert_base": (lambda: Encoder(layers=12), (1, 128, 768), 17),
    # Batched BERT-base (issue 56: servers batch): 8 sequences of 128 and of 384 tokens.
    "bert_base_b8": (lambda: Encoder(layers=12), (8, 128, 768), 17),
    "bert_base_b8_s384": (lambda: Encoder(layers=12), (8, 384, 768), 17),
    "mlp": (MLP, (1, 784), 13),
    "lstm": (Recurrent, (1, 64, 256), 13),
    # Grouped convolutions (ResNeXt: 32 groups; RegNetY: groups of 8 channels) and fire
    # modules (SqueezeNet).
    "resnext50": (lambda: torchvision.models.resnext50_32x4d(), (1, 3, 224, 224), 13),
    "regnet_y_400mf": (lambda: torchvision.models.regnet_y_400mf(), (1, 3, 224, 224), 13),
    "squeezenet1_1": (lambda: torchvision.models.squeezenet1_1(), (1, 3, 224, 224), 13),
}


# The zoo bench/model_bench.py --zoo times against ONNX Runtime: one classification model of each
# torchvision family, a RegNet with groups of 24, and the two MobileNet-v3 segmentation models
# (FCN-ResNet50 at 320x320 takes half a second a call: time it with --models)
# (tests/graph/zoo_test.py checks them, and every other one, for accuracy).
ZOO = ["resnet50", "resnext50_32x4d", "wide_resnet50_2", "mobilenet_v2", "mobilenet_v3_large", "mnasnet1_0",
       "efficientnet_b0", "regnet_y_400mf", "regnet_x_400mf", "regnet_y_1_6gf", "densenet121", "shufflenet_v2_x1_0",
       "squeezenet1_1", "googlenet", "inception_v3", "convnext_tiny", "swin_t", "vit_b_16", "alexnet", "vgg11",
       "lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large"]


def realistic(model):
    """Weights whose activations keep their magnitude, as trained ones do: BatchNorm statistics
    and scales random (fresh ones are the identity, and many layers of them shrink the
    activations to denormals), and every parameter torchvision initializes to zero (ViT's head,
    RegNet's biases) random, so that outputs depend on every layer. Seeded."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (torch.nn.BatchNorm2d, torch.nn.BatchNorm1d)) and mod.running_mean is not None:
                c = mod.num_features
                mod.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                if mod.weight is not None:
                    mod.weight.copy_(torch.rand(c, generator=g) + 0.5)
                    mod.bias.copy_(torch.randn(c, generator=g) * 0.1)
            for p in mod.parameters(recurse=False):
                if p.numel() and not p.abs().max() > 0:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return model


class SegmentationOutput(torch.nn.Module):
    """A torchvision segmentation model returning its "out" tensor (it returns a dict)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def torchvision_model(name):
    """(constructor, input shape, opset) of a torchvision classification or segmentation model
    (segmentation: 21 classes, no auxiliary head, 3x320x320), or None."""
    m = torchvision.models
    if hasattr(m, "list_models") and name in m.list_models(module=m.segmentation):
        make = getattr(m.segmentation, name)
        return (lambda: SegmentationOutput(realistic(make(weights=None, weights_backbone=None, aux_loss=False).eval())),
                (1, 3, 320, 320), 13)
    names = m.list_models(module=m) if hasattr(m, "list_models") else []
    if name not in names:
        return None
    kwargs = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=False)
    size = 299 if name == "inception_v3" else 224
    return (lambda: realistic(getattr(torchvision.models, name)(**kwargs).eval()), (1, 3, size, size),
            14 if name.startswith(("swin", "vit")) else 13)


def build(name):
    """The module in eval mode with its seeded weights, an input, and the export opset."""
    make, shape, opset = MODELS.get(name) or torchvision_model(name) or (None, None, None)
    if make is None:
        raise SystemExit(f"export_model: no model named {name} (known: {', '.join(sorted(MODELS))}, or a torchvision "
                         "classification or segmentation model)")
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    return model, x, opset


def export(name, path, dynamic_batch=False, realistic_weights=False):
    """Exports model `name` to `path`; `dynamic_batch`: its batch axis (0 of input and output)
    the symbolic dimension `batch` (compile --model --dim batch=N, or buckets batch=1,8,32);
    `realistic_weights`: realistic() applied to the models that keep torchvision's fresh
    initialization (resnet18, mobilenet_v2, ...: MobileNet-v2's outputs are then ~1e-9, which
    16-bit floats flush to zero)."""
    model, x, opset = build(name)
    if realistic_weights:
        model = realistic(model)
    kwargs = {}
    if dynamic_batch:
        kwargs["dynamic_axes"] = {"x": {0: "batch"}, "y": {0: "batch"}}
    # PyTorch 2.x defaults to the dynamo exporter (which needs onnxscript); the TorchScript one
    # is what these models were checked with.
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    torch.onnx.export(model, (x,), path, opset_version=opset, input_names=["x"], output_names=["y"],
                      do_constant_folding=True, **kwargs)
    return model, x


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="one of " + ", ".join(sorted(MODELS)) + ", or a torchvision classification or "
                   "segmentation model")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--input")
    p.add_argument("--expect")
    p.add_argument("--dynamic-batch", action="store_true",
                   help="export the batch axis as the symbolic dimension 'batch' (size it with --dim batch=N)")
    a = p.parse_args()
    model, x = export(a.name, a.output, a.dynamic_batch)
    if a.input:
        np.save(a.input, x.numpy())
    if a.expect:
        with torch.no_grad():
            np.save(a.expect, model(x).numpy())
    print(f"wrote {a.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
