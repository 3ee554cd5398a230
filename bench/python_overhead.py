#!/usr/bin/python3
"""A compiled model called from Python (the tunefarm package) against the same library called
through its C ABI, interleaved round by round: the overhead of a Python call on a small MLP
(784-512-256-10), and ResNet-18 (batch 1, 224x224) from Python against the command line.

Each round: N calls of the C ABI timed in C++ in this process (CompiledModel.time_calls: the
library's own time, same arrays), N calls from Python on a NumPy array (CompiledModel.run)
and N through the nn.Module (TorchModule, torch tensors), alternating in blocks of N/10, each
block after 2 untimed calls and every call timed alone (time.perf_counter); then `tunefarm run --model LIB --repeat N
--json` (the median of N single calls after its --warmup-ms, a fresh process). Entries are
medians over all rounds' calls (the command line's: of its round medians). Same thread count
for all: --threads sets OMP_NUM_THREADS for the command line and torch.set_num_threads here.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py build/bin/tunefarm
       [--models mlp,resnet18] [--threads 1] [--rounds 5] [--calls 200]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import export_model  # noqa: E402

import tunefarm  # noqa: E402
from tunefarm._torch import TorchModule  # noqa: E402


def cli_median_ms(binary, lib, calls, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    r = subprocess.run([binary, "run", "--model", lib, "--repeat", str(calls), "--json"], capture_output=True,
                       text=True, env=env, check=True)
    return json.loads(r.stdout)["median_ms"]


def python_calls_ms(fn, x, calls, warm):
    for _ in range(warm):
        fn(x)
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tunefarm")
    p.add_argument("--models", default="mlp,resnet18")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    tmp = tempfile.mkdtemp(prefix="tunefarm-python-bench-")
    for name in a.models.split(","):
        model, x = export_model.export(name, os.path.join(tmp, name + ".onnx"))
        lib = tunefarm.compile_model(os.path.join(tmp, name + ".onnx"), out=os.path.join(tmp, name + ".so"), db="")
        cm = tunefarm.load(lib)
        module = TorchModule(cm)
        xn = x.numpy()
        calls = a.calls if name == "mlp" else max(10, a.calls // 10)
        abi, cli, py, pt = [], [], [], []
        block = max(2, calls // 10)
        for _ in range(a.rounds):
            # Small blocks of each, alternating, so drift of the machine hits all alike.
            for _ in range(calls // block):
                abi += [t * 1e3 for t in cm.time_calls([xn], block, 2, a.threads)]
                py += python_calls_ms(lambda v: cm.run([v], None, a.threads), xn, block, 2)
                with torch.no_grad():
                    pt += python_calls_ms(module, x, block, 2)
            cli.append(cli_median_ms(a.tunefarm, lib, calls, a.threads))
        c, n, t, k = statistics.median(abi), statistics.median(py), statistics.median(pt), statistics.median(cli)
        print(f"{name:9s} {a.threads} thr  C ABI {c * 1e3:9.1f} us  python/numpy {n * 1e3:9.1f} us  "
              f"python/torch {t * 1e3:9.1f} us  overhead numpy {(n - c) * 1e3:+6.1f} us  torch {(t - c) * 1e3:+6.1f} us  "
              f"command line {k * 1e3:9.1f} us  cli/numpy {k / n:.3f}  cli/torch {k / t:.3f}")

if __name__ == "__main__":
    main()
