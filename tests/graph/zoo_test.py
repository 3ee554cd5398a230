#!/usr/bin/env python3
"""The model zoo: torchvision's classification and segmentation models (Debian's
python3-torchvision), seeded random weights (BatchNorm statistics that matter, and every layer
torchvision initializes to zero -- ViT's head, RegNet's biases -- given random values so that
outputs depend on every layer), exported to ONNX at test time, compiled by `tunefarm compile
--model` for this CPU (and with --emulate-gpu, scheduled for a CUDA GPU and run serially here),
run, and compared with PyTorch: within 1e-4 of the output's magnitude, and classifiers pick the
same class. Each model that does not export, compile, run or match is a failure, listed with
its reason at the end; the test fails if any is.

Sets (--set): `ci` (default) one model of each family at a small input, in the default test
run (the CUDA build of every third with --emulate-gpu some); `all` every model of the installed
torchvision (the large ones too: an hour or more, for a nightly run: configure with
-DTUNEFARM_ZOO_FULL=ON, then ctest -L zoo_full). Under the sanitizer pass (TF_SANITIZED=1,
scripts/sanitize.sh) every fourth model of the set, CPU builds only.

`--emulate-gpu only` builds the CUDA libraries alone (every model), for a GPU pass after a CPU one.
`--precision tf32|fp16|bf16` builds them with their products on tensor cores (emulated as generic
kernels of the same rounding: docs/precision.md), matched within issue 55's bounds of PyTorch's
float32 output instead (1e-3 of its magnitude for tf32, 1e-2 for fp16 and bf16; the class not
compared).

Usage: zoo_test.py TUNEFARM [--set ci|all] [--models a,b] [--emulate-gpu none|some|all|only]
                   [--precision fp32|tf32|fp16|bf16] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from export_model import realistic  # noqa: E402 (BatchNorm statistics and zero-initialized parameters random)

# name -> (constructor, input height/width): the smallest input each family takes (VGG and
# AlexNet's adaptive pools export only where their input divides; Inception's stem needs 75).
SMALL = 64


def classification():
    m = torchvision.models
    zoo = {}
    for name in m.list_models(module=m) if hasattr(m, "list_models") else []:
        zoo[name] = SMALL
    for name in ("alexnet", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn"):
        if name in zoo:
            zoo[name] = 224
    for name in ("inception_v3",):
        if name in zoo:
            zoo[name] = 96
    for name in ("maxvit_t",):
        if name in zoo:
            zoo[name] = 224
    return zoo


def segmentation():
    m = torchvision.models
    return {name: SMALL for name in (m.list_models(module=m.segmentation) if hasattr(m, "list_models") else [])}


# One of each family: what the default test run compiles.
CI_SET = ["resnet18", "resnext50_32x4d", "mobilenet_v2", "mobilenet_v3_small", "mnasnet0_5",
          "efficientnet_b0", "regnet_y_400mf", "regnet_x_400mf", "densenet121", "shufflenet_v2_x0_5",
          "squeezenet1_1", "googlenet", "inception_v3", "convnext_tiny", "swin_t", "vit_b_32", "alexnet",
          "fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]


def build(name):
    """The model in eval mode with seeded random weights, and its input."""
    torch.manual_seed(0)
    seg = name in segmentation()
    size = segmentation()[name] if seg else classification()[name]
    kwargs = {"weights": None}
    if seg:
        kwargs.update(num_classes=5, weights_backbone=None, aux_loss=False)
        model = getattr(torchvision.models.segmentation, name)(**kwargs)
    else:
        kwargs["num_classes"] = 10
        if name in ("googlenet", "inception_v3"):
            kwargs.update(aux_logits=False, init_weights=False)
        if name.startswith("vit_"):
            kwargs["image_size"] = 64 if name.endswith(("_16", "_32")) else 56
            size = kwargs["image_size"]
        model = getattr(torchvision.models, name)(**kwargs)
    realistic(model.eval())
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    return model, x, not seg


def run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{os.path.basename(cmd[0])} {cmd[1]} took more than 1800 s") from None
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit {r.returncode}")
    return r.stdout


# The largest error of a build relative to the float32 output's magnitude, by --precision.
BOUNDS = {"fp32": 1e-4, "tf32": 1e-3, "fp16": 1e-2, "bf16": 1e-2}


def check(tunefarm, name, d, emulate_gpu, cpu=True, precision="fp32"):
    """One model: (ok, note)."""
    model, x, classifier = build(name)
    with torch.no_grad():
        want = model(x)
    if isinstance(want, dict):  # segmentation: {"out": ...}
        want = want["out"]
    want = want.numpy()
    path = os.path.join(d, name + ".onnx")
    try:
        torch.onnx.export(model, (x,), path, opset_version=13 if "swin" not in name else 14, input_names=["x"],
                          output_names=["y"], do_constant_folding=True)
    except Exception as e:  # noqa: BLE001 (the exporter's own failure: not tunefarm's)
        return None, "export: " + str(e).splitlines()[0][:150]
    xin = os.path.join(d, "x.npy")
    np.save(xin, x.numpy())
    mag = float(np.abs(want).max())
    notes = []
    gpu = ["-t", "cuda -arch=sm_90", "--emulate-gpu", "--precision", precision]
    builds = ([("cpu", [])] if cpu else []) + ([("gpu", gpu)] if emulate_gpu else [])
    for tag, flags in builds:
        bound = BOUNDS[precision if tag == "gpu" else "fp32"]
        lib = os.path.join(d, f"{name}_{tag}.so")
        y = os.path.join(d, "y.npy")
        t0 = time.time()
        try:
            run([tunefarm, "compile", "--model", path, "--no-db", *flags, "-o", lib])
            compile_s = time.time() - t0
            run([tunefarm, "run", "--model", lib, "--input", "x=" + xin, "--output", y, "--repeat", "1"])
        except RuntimeError as e:
            return False, f"{tag}: {e}"
        got = np.load(y)
        err = float(np.abs(got.astype(np.float64) - want).max()) if got.shape == want.shape else float("inf")
        same = not classifier or bound > 1e-4 or (got.argmax(-1) == want.argmax(-1)).all()
        if not (err <= bound * mag and same):
            return False, f"{tag}: max error {err:.3g} of magnitude {mag:.3g}" + ("" if same else ", another class")
        side = json.load(open(lib + ".json"))
        emulated = f" ({side['emulated_products']} tensor-core)" if side.get("emulated_products") else ""
        notes.append(f"{tag} {len(side['kernels'])} kernels{emulated}, error {err / mag:.2g} of the magnitude, "
                     f"compile {compile_s:.1f} s")
        os.remove(lib)
    return True, "; ".join(notes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tunefarm")
    ap.add_argument("--set", choices=["ci", "all"], default="ci")
    ap.add_argument("--models", help="comma-separated names instead of a set")
    ap.add_argument("--emulate-gpu", choices=["none", "some", "all", "only"], default="none",
                    help="also the CUDA build, its kernels run serially here: of every model, or every third; "
                    "only: the CUDA build alone, of every model")
    ap.add_argument("--precision", choices=sorted(BOUNDS), default="fp32",
                    help="the CUDA builds' --precision (tensor cores, emulated as generic kernels of their rounding)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    if not hasattr(torchvision.models, "list_models"):
        print("zoo_test: this torchvision has no list_models (0.14 or later needed)")
        return 1
    every = {**classification(), **segmentation()}
    names = a.models.split(",") if a.models else (CI_SET if a.set == "ci" else sorted(every))
    gpu_every = {"none": 0, "some": 3, "all": 1, "only": 1}[a.emulate_gpu]
    cpu = a.emulate_gpu != "only"
    if a.precision != "fp32" and gpu_every == 0:
        print("zoo_test: --precision is for the CUDA builds: give --emulate-gpu some, all or only")
        return 2
    if os.environ.get("TF_SANITIZED") == "1":  # tests/sanitized.h: fewer repetitions of one check
        names, gpu_every, cpu = names[::4], 0, True
    unknown = [n for n in names if n not in every]
    if unknown:
        print("zoo_test: not models of this torchvision: " + ", ".join(unknown))
        return 2
    results, failures, skipped = {}, [], []
    with tempfile.TemporaryDirectory() as d:
        for index, name in enumerate(names):
            t0 = time.time()
            ok, note = check(a.tunefarm, name, d, gpu_every > 0 and index % gpu_every == 0, cpu, a.precision)
            results[name] = {"ok": ok, "note": note, "seconds": round(time.time() - t0, 1)}
            status = "ok  " if ok else ("SKIP" if ok is None else "FAIL")
            print(f"{status} {name:30s} {time.time() - t0:6.1f} s  {note}", flush=True)
            if ok is False:
                failures.append(f"{name}: {note}")
            elif ok is None:
                skipped.append(f"{name}: {note}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if skipped:
        print(f"\n{len(skipped)} not exported by this PyTorch (not tunefarm's to compile):\n  " + "\n  ".join(skipped))
    if failures:
        print(f"\n{len(failures)} of {len(names)} models do not compile, run or match:\n  " + "\n  ".join(failures))
        return 1
    print(f"\nall {len(names) - len(skipped)} models compile and match PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
