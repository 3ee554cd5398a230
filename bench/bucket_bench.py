#!/usr/bin/python3
"""Shape buckets against static builds and ONNX Runtime, at each bucket's batch size.

Usage: bench/bucket_bench.py TUNEFARM [--models resnet50] [--batches 1,8,32] [--threads 1,2]
         [--rounds 3] [--min-ms 300] [--ort FOLDER] [--no-ort] [--db DB] [--json FILE]

Each model (scripts/export_model.py, its batch axis exported as the symbolic dimension `batch`)
is compiled once as a library of buckets (`compile --model --dim batch=1,8,32`) and once per
size as a static library (`--dim batch=N`), both with default schedules (`--no-db`) unless
--db gives tuned configs. At each thread count and batch size the bucketed library (called
through tf_model_run_shaped: the dispatch on the inputs' shapes included), the static one and
ONNX Runtime 1.30 (bench/ort_peer.js, on the same dynamic-batch .onnx) are timed in the same
process, round robin (each round starting with the next of them), each sample the median of
enough calls to fill --min-ms. Prints, per row,
the medians and static/bucket (the goal: within 5%, >= 0.95) and ort/bucket; the geometric
means at the end. Both libraries and ONNX Runtime are checked against PyTorch first.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# model_bench sets OPENBLAS_CORETYPE before numpy and torch load.
from model_bench import OrtPeer, export_model, ort_folder, set_threads, summarize, timed  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


class ShapedLibrary:
    """A model library called through tf_model_run_shaped on one set of inputs."""

    def __init__(self, path, x):
        self.lib = ctypes.CDLL(path)
        self.lib.tf_model_workspace_bytes.restype = ctypes.c_uint64
        self.lib.tf_model_bucket_output_shape.restype = ctypes.POINTER(ctypes.c_int64)
        self.lib.tf_model_bucket_of.argtypes = [ctypes.c_void_p]
        self.x = np.ascontiguousarray(x, dtype=np.float32)
        self.shape = (ctypes.c_int64 * self.x.ndim)(*self.x.shape)
        self.shapes = (ctypes.c_void_p * 1)(ctypes.cast(self.shape, ctypes.c_void_p))
        bucket = self.lib.tf_model_bucket_of(self.shapes)
        if bucket < 0:
            raise SystemExit(f"{path}: no bucket for inputs of shape {list(self.x.shape)}")
        nd = self.lib.tf_model_output_ndim(0)
        out = self.lib.tf_model_bucket_output_shape(bucket, 0)
        self.y = np.zeros([out[i] for i in range(nd)], dtype=np.float32)
        self.ws = np.zeros(self.lib.tf_model_workspace_bytes() // 4 + 16, dtype=np.float32)
        self.ins = (ctypes.c_void_p * 1)(self.x.ctypes.data)
        self.outs = (ctypes.c_void_p * 1)(self.y.ctypes.data)
        self.ws_ptr = ctypes.c_void_p((self.ws.ctypes.data + 63) // 64 * 64)

    def __call__(self):
        status = self.lib.tf_model_run_shaped(self.shapes, self.ins, self.outs, self.ws_ptr)
        if status != 0:
            raise RuntimeError(f"tf_model_run_shaped returned {status}")
        return self.y


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tunefarm")
    p.add_argument("--models", default="resnet50")
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-ms", type=float, default=300, help="each sample: calls filling at least this long")
    p.add_argument("--db", help="tuning database (default: default schedules, --no-db)")
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort")
    cache = os.path.expanduser("~/.cache/tunefarm/ort")
    p.add_argument("--ort", default=here if os.path.isdir(here) or not os.path.isdir(cache) else cache)
    p.add_argument("--no-ort", action="store_true")
    p.add_argument("--json")
    a = p.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    configs = ["--db", a.db] if a.db else ["--no-db"]
    folder = None if a.no_ort else ort_folder(a.ort)
    peer = OrtPeer(folder) if folder else None
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in a.models.split(","):
            path = os.path.join(d, name + ".onnx")
            model, x1 = export_model.export(name, path, dynamic_batch=True)
            bucketed = os.path.join(d, name + "-buckets.so")
            out = subprocess.run([a.tunefarm, "compile", "--model", path, "--dim", "batch=" + a.batches, "-o", bucketed,
                                  *configs], check=True, capture_output=True, text=True).stdout
            side = json.load(open(bucketed + ".json"))
            print(f"{name}: {len(side['buckets'])} buckets, {len(side['kernels'])} kernels, weights "
                  f"{side['constant_bytes'] / 1e6:.1f} MB, library {os.path.getsize(bucketed) / 1e6:.1f} MB", flush=True)
            for n in batches:
                static = os.path.join(d, f"{name}-b{n}.so")
                subprocess.run([a.tunefarm, "compile", "--model", path, "--dim", f"batch={n}", "-o", static, *configs],
                               check=True, capture_output=True)
                x = torch.randn(n, *x1.shape[1:], generator=torch.Generator().manual_seed(n))
                with torch.no_grad():
                    want = model(x).numpy()
                mag = float(np.abs(want).max())
                libs = {"bucket": ShapedLibrary(bucketed, x.numpy()), "static": ShapedLibrary(static, x.numpy())}
                errors = {k: float(np.abs(f() - want).max()) for k, f in libs.items()}
                for k, e in errors.items():
                    if not e <= 1e-3 * max(mag, 1e-30):
                        raise SystemExit(f"{name} batch {n}: the {k} library's output is off by {e:.3g} "
                                         f"(magnitude {mag:.3g})")
                for t in threads:
                    set_threads(t)
                    key = f"{name}/{n}/{t}"
                    runners = dict(libs)
                    if peer:
                        errors["ort"] = float(np.abs(peer.load(key, path, t, x.numpy(), d) - want).max())
                    for k, f in runners.items():  # warm-up, and how many calls fill --min-ms
                        f()
                    one = min(timed(f, 1, 0)[0] for f in runners.values())
                    calls = max(1, int(a.min_ms / 1e3 / max(one, 1e-6)))
                    if peer:
                        peer.time(key, 1)
                    samples = {k: [] for k in list(runners) + (["ort"] if peer else [])}
                    order = list(samples)
                    for r in range(a.rounds):
                        # Each round in another order: none always runs right after another's
                        # (ONNX Runtime's threads spin for a while after its calls).
                        for k in order[r % len(order):] + order[:r % len(order)]:
                            if k == "ort":
                                samples[k].append(statistics.median(peer.time(key, calls, 0.05)))
                            else:
                                samples[k].append(statistics.median(timed(runners[k], calls, 0.05)))
                    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
                    spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in samples.items()}
                    row = {"model": name, "batch": n, "threads": t, "ms": ms, "spread": spread, "max_error": errors,
                           "magnitude": mag, "static_over_bucket": ms["static"] / ms["bucket"]}
                    if peer:
                        row["ort_over_bucket"] = ms["ort"] / ms["bucket"]
                    rows.append(row)
                    print(f"{name:10s} batch {n:3d} {t} thr  " + "  ".join(f"{k} {v:8.2f} ms" for k, v in ms.items())
                          + f"  static/bucket {row['static_over_bucket']:.3f}"
                          + (f"  ort/bucket {row['ort_over_bucket']:.2f}" if peer else "")
                          + f"  (max error {max(errors.values()):.2g} of {mag:.2g}; {calls} calls a sample; spread "
                          + ", ".join(f"{k} {v:.0%}" for k, v in spread.items()) + ")", flush=True)
    if peer:
        peer.close()
    summarize(rows, ("static_over_bucket", "ort_over_bucket"), a.json, lowest_digits=3)


if __name__ == "__main__":
    main()
