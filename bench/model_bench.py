#!/usr/bin/python3
"""Whole-model latency: tunefarm's compiled library against ONNX Runtime 1.30 (CPU, every graph
optimisation), PyTorch eager and TorchScript (frozen + optimize_for_inference), batch 1, at 1
and 2 threads, in one run with the calls interleaved (round robin, so drift hits all alike): each
runtime in blocks of --calls timed calls, each block after --warmup-ms of untimed calls.

Our library is called through its C ABI with ctypes; every call is timed, and each entry is
the median of the calls of all rounds. With --db, the model is compiled twice, with default
schedules ("ours") and with the database's tuned configs ("tuned"), and both are timed.
ONNX Runtime runs in a Node process (bench/ort_peer.js, onnxruntime-node, whose package
ships the CPU library) that times its own calls when asked, between ours; its sessions use
T intra-op threads and one inter-op thread. Install it once into bench/ort (the default
--ort folder; --ignore-scripts skips a download of GPU binaries that fails offline):
    npm install --prefix bench/ort --ignore-scripts onnxruntime-node@1.30.0
Without it the benchmark says so and goes on without the column.

PyTorch's matmuls run in OpenBLAS, whose pool torch.set_num_threads does not size: both
pools get the same count, and OpenBLAS its right core type (OPENBLAS_CORETYPE: SkylakeX with
AVX-512, Haswell with AVX2, overridable). Our kernels run on the library's own pool, whose
teams libgomp's omp_get_max_threads() sizes, so torch.set_num_threads sizes them too (the
same libgomp).

The ceiling: before each model's rounds at a thread count, bench_fma_peak (built beside
TUNEFARM, in build/bench; --peak names another) measures the fp32 FMA peak of that many threads
at once, and a second line of the row holds the model's arithmetic against it: its tasks' FLOPs
(`tunefarm import --json`, each task times its count), the GFLOPS each build reached, their
share of the peak, and the time the model would take if all of it ran at the peak. ours/tuned
cannot exceed ours' time over that ("at most"), unless a task has an alternative doing fewer
FLOPs (Winograd: the row says so and its GFLOPS are effective, counted as the direct form's).

Usage: model_bench.py TUNEFARM [--models resnet18,mobilenet_v2,bert2,mlp | --zoo] [--threads 1,2]
                      [--calls 10] [--rounds 3] [--warmup-ms 50] [--db PATH] [--ort DIR | --no-ort]
                      [--without PASS] [--base TUNEFARM2] [--peak PATH | --no-peak] [--json FILE]
Prints one row per model and thread count: ms per inference and the ratios ort/ours (above
1: tunefarm is faster than ONNX Runtime), ort/tuned and ours/tuned with --db, eager/ours and
ours/optimized, then the line of the ceiling; then the geometric mean of ort/ours (and
ort/tuned, ours/tuned) over the rows.
--without PASS also compiles each model with that graph pass disabled and times it in the same
rounds ("without"), to measure what the pass is worth.
--base TUNEFARM2 also compiles each model with another build of tunefarm (an earlier commit's, say)
and times its library in the same rounds ("base"), printing base/ours (above 1: TUNEFARM's
library is faster): an A/B of a compiler change that the machine's drift between two runs
cannot blur.
--int8 also quantizes each model (`tunefarm quantize`, --int8-samples seeded random samples)
and times the QDQ model compiled by us ("ours_int8") and run by ONNX Runtime ("ort_int8", its
int8 kernels), with the ratios ort_int8/ours_int8 and ours/ours_int8, and how far our QDQ
build's outputs are from ONNX Runtime's on the same QDQ model (relative to the magnitude).
--bf16 also compiles each model with `--precision bf16` ("ours_bf16": its MatMul/Gemm with
constant weights in bfloat16 kernels) and prints ours/ours_bf16 and the bf16 build's largest
error relative to the fp32 model's output magnitude. (ONNX Runtime has no bfloat16 CPU path to
compare with.) --fp16 likewise with `--precision fp16` ("ours_fp16": float16 weights, float32
arithmetic).
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time



def openblas_core():
    """OpenBLAS 0.3.21 misdetects newer CPUs as old ones: name the core its kernels fit."""
    flags = open("/proc/cpuinfo").read()
    return "SkylakeX" if " avx512f" in flags else "Haswell" if " avx2" in flags else None


if "OPENBLAS_CORETYPE" not in os.environ and openblas_core():
    os.environ["OPENBLAS_CORETYPE"] = openblas_core()
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import export_model  # noqa: E402


class Library:
    """A compiled model through its C ABI."""

    def __init__(self, path, x):
        self.lib = ctypes.CDLL(path)
        self.lib.tf_model_output_shape.restype = ctypes.POINTER(ctypes.c_int64)
        self.lib.tf_model_workspace_bytes.restype = ctypes.c_uint64
        nd = self.lib.tf_model_output_ndim(0)
        shape = [self.lib.tf_model_output_shape(0)[i] for i in range(nd)]
        self.x = np.ascontiguousarray(x, dtype=np.float32)
        self.y = np.zeros(shape, dtype=np.float32)
        self.ws = np.zeros(self.lib.tf_model_workspace_bytes() // 4 + 16, dtype=np.float32)
        self.ins = (ctypes.c_void_p * 1)(self.x.ctypes.data)
        self.outs = (ctypes.c_void_p * 1)(self.y.ctypes.data)
        # 64-byte aligned workspace inside the array.
        self.ws_ptr = ctypes.c_void_p((self.ws.ctypes.data + 63) // 64 * 64)

    def __call__(self):
        if self.lib.tf_model_run(self.ins, self.outs, self.ws_ptr) != 0:
            raise RuntimeError("tf_model_run failed")
        return self.y


class OrtPeer:
    """ONNX Runtime sessions in a Node process (bench/ort_peer.js)."""

    def __init__(self, folder):
        self.folder = folder
        self.proc = subprocess.Popen(
            ["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_peer.js")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, NODE_PATH=os.path.join(folder, "node_modules")))

    def ask(self, req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the ONNX Runtime peer (node bench/ort_peer.js) exited")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise RuntimeError("ONNX Runtime: " + reply.get("error", "unknown error"))
        return reply

    def load(self, key, model_path, threads, x, d):
        raw_in, raw_out = os.path.join(d, key.replace("/", "_") + ".in"), os.path.join(d, key.replace("/", "_") + ".out")
        np.ascontiguousarray(x, dtype=np.float32).tofile(raw_in)
        r = self.ask({"op": "load", "id": key, "model": model_path, "threads": threads, "input": raw_in,
                      "dims": list(x.shape), "output": raw_out})
        return np.fromfile(raw_out, dtype=np.float32).reshape(r["dims"])

    def time(self, key, calls, warmup_s=0):
        return self.ask({"op": "time", "id": key, "calls": calls, "warmup_ms": warmup_s * 1e3})["times_s"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def ort_folder(folder):
    """The folder with node_modules/onnxruntime-node, or None after saying what is missing."""
    if not os.path.isdir(os.path.join(folder, "node_modules", "onnxruntime-node")):
        print(f"ONNX Runtime peer missing: no {folder}/node_modules/onnxruntime-node; install it with\n"
              f"  npm install --prefix {folder} --ignore-scripts onnxruntime-node@1.30.0\n"
              "going on without the ort column", flush=True)
        return None
    if subprocess.run(["node", "--version"], capture_output=True).returncode != 0:
        print("ONNX Runtime peer missing: no `node` on PATH; going on without the ort column", flush=True)
        return None
    return folder


def timed(f, calls, warmup_s):
    """`calls` timed calls of f, after calling it for warmup_s untimed."""
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        f()
    out = []
    for _ in range(calls):
        s = time.perf_counter()
        f()
        out.append(time.perf_counter() - s)
    return out


def fma_peak(path, threads):
    """GFLOPS of `threads` threads' fp32 multiply-adds at once, from bench_fma_peak; 0 (said on
    stderr) where it cannot measure it (a CPU without AVX2+FMA, another architecture)."""
    p = subprocess.run([path, "--json", "--threads", str(threads)], capture_output=True, text=True)
    try:
        if p.returncode == 0:
            return float(json.loads(p.stdout.splitlines()[-1])["gflops"])
    except (ValueError, KeyError, IndexError):
        pass
    print(f"the FMA peak is not measured: {path} --threads {threads} exited {p.returncode}: "
          f"{(p.stderr or p.stdout).strip()[:300]}", file=sys.stderr)
    return 0


def model_flops(tunefarm, path):
    """(FLOPs per call of the model's tunable tasks, whether a task has a fewer-FLOP alternative)."""
    out = subprocess.run([tunefarm, "import", path, "--json"], check=True, capture_output=True, text=True).stdout
    tasks = json.loads(out)["tasks"]
    flops = sum(t["count"] * t["flops"] for t in tasks if t["alternative_to"] < 0)
    return flops, any(t["alternative_to"] >= 0 for t in tasks)


def geomean(v):
    return float(np.exp(np.mean(np.log(v)))) if v else float("nan")


def summarize(rows, ratios, json_path, lowest_digits=2):
    """The geometric mean (and lowest) of each ratio over the rows that have it; the rows to
    `json_path` when given."""
    for r in ratios:
        v = [row[r] for row in rows if r in row]
        if v:
            print(f"geometric mean {r.replace('_over_', '/')} {geomean(v):.3f} over {len(v)} rows "
                  f"(lowest {min(v):.{lowest_digits}f})", flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=2)


def set_threads(n):
    torch.set_num_threads(n)
    try:
        ctypes.CDLL("libopenblas.so.0").openblas_set_num_threads(n)
    except OSError:
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tunefarm")
    p.add_argument("--models", default="resnet18,mobilenet_v2,bert2,mlp")
    p.add_argument("--zoo", action="store_true",
                   help="time the zoo instead: one torchvision classification model of each family at 224x224 and two "
                        "segmentation models at 320x320 "
                        "(scripts/export_model.py ZOO), with the geometric mean and lowest ratio at the end")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup-ms", type=float, default=50,
                   help="untimed calls before each block of timed calls: each runtime has its own thread pool, "
                        "whose workers sleep or spin after the others' calls and take a few ms of calls to wake")
    p.add_argument("--db", help="tuning database: also compile each model with its tuned configs (\"tuned\")")
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort")
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tunefarm", "ort")
    p.add_argument("--ort", default=here if os.path.isdir(here) or not os.path.isdir(cache) else cache,
                   help="folder holding node_modules/onnxruntime-node (default: bench/ort, else "
                        "~/.cache/tunefarm/ort where scripts/install-ort.sh puts it)")
    p.add_argument("--no-ort", action="store_true", help="do not time ONNX Runtime")
    p.add_argument("--without", help="also time each model compiled with this graph pass disabled")
    p.add_argument("--base", help="also time each model compiled by this other tunefarm binary (base/ours)")
    p.add_argument("--peak", help="bench_fma_peak to measure the FMA peak with (default: beside TUNEFARM, "
                                  "../bench/bench_fma_peak)")
    p.add_argument("--no-peak", action="store_true", help="do not measure the FMA peak")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--int8", action="store_true", help="also time each model quantized by tunefarm quantize")
    p.add_argument("--int8-samples", type=int, default=4, help="calibration samples for --int8")
    p.add_argument("--bf16", action="store_true", help="also time each model compiled with --precision bf16")
    p.add_argument("--fp16", action="store_true", help="also time each model compiled with --precision fp16")
    p.add_argument("--int8-args", default="",
                   help="more arguments for tunefarm quantize, e.g. '--per-tensor' (ONNX Runtime fuses only some "
                        "QDQ patterns: compare its best)")
    a = p.parse_args()
    if a.base and not (os.path.isfile(a.base) and os.access(a.base, os.X_OK)):
        p.error(f"--base {a.base}: no such executable (another build's bin/tunefarm)")
    if a.zoo:
        a.models = ",".join(export_model.ZOO)
    threads = [int(t) for t in a.threads.split(",")]
    peak_path = None
    if not a.no_peak:
        peak_path = a.peak or os.path.join(os.path.dirname(os.path.abspath(a.tunefarm)), "..", "bench",
                                           "bench_fma_peak")
        if not os.access(peak_path, os.X_OK):
            print(f"the FMA peak is not measured: no bench_fma_peak at {peak_path} (build it, or pass --peak)",
                  file=sys.stderr)
            peak_path = None
    folder = None if a.no_ort else ort_folder(a.ort)
    peer = OrtPeer(folder) if folder else None
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in a.models.split(","):
            path = os.path.join(d, name + ".onnx")
            model, x = export_model.export(name, path)
            t0 = time.time()

            def build(tag, flags, tunefarm=a.tunefarm):
                lib_path = os.path.join(d, f"{name}-{tag}.so")
                subprocess.run([tunefarm, "compile", "--model", path, "-o", lib_path] + flags, check=True,
                               stdout=subprocess.DEVNULL)
                return Library(lib_path, x.numpy())

            flops, fewer_flops = model_flops(a.tunefarm, path) if peak_path else (0, False)
            db_flags = ["--db", a.db] if a.db else ["--no-db"]  # the builds beside the default one
            libs = {"ours": build("default", ["--no-db"])}
            compile_s = time.time() - t0
            if a.db:
                libs["tuned"] = build("tuned", ["--db", a.db])
            if a.without:
                libs["without"] = build("without", ["--disable-pass", a.without] + db_flags)
            if a.base:
                libs["base"] = build("base", db_flags, a.base)
            q_path = None
            if a.int8:
                q_path = os.path.join(d, name + ".int8.onnx")
                subprocess.run([a.tunefarm, "quantize", path, "-o", q_path, "--samples", str(a.int8_samples)] +
                               a.int8_args.split(), check=True, stdout=subprocess.DEVNULL)
                lib_path = os.path.join(d, f"{name}-int8.so")
                subprocess.run([a.tunefarm, "compile", "--model", q_path, "-o", lib_path] +
                               db_flags, check=True, stdout=subprocess.DEVNULL)
                libs["ours_int8"] = Library(lib_path, x.numpy())
            halves = [h for h, on in (("bf16", a.bf16), ("fp16", a.fp16)) if on]
            for h in halves:
                libs[f"ours_{h}"] = build(h, ["--precision", h] + db_flags)
            with torch.no_grad():
                want = model(x).numpy()
                scripted = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model)))
                scripted(x)
                scripted(x)
            mag = float(np.abs(want).max())
            errors = {k: float(np.abs(lib() - want).max()) for k, lib in libs.items()}
            runners = dict(libs)
            runners["eager"] = lambda: model(x)
            runners["optimized"] = lambda: scripted(x)
            for t in threads:
                set_threads(t)
                key = f"{name}/{t}"
                if peer:
                    errors["ort"] = float(np.abs(peer.load(key, path, t, x.numpy(), d) - want).max())
                    if q_path:
                        ort_q = peer.load(key + "/int8", q_path, t, x.numpy(), d)
                        errors["ort_int8"] = float(np.abs(ort_q - want).max())
                        # Our QDQ build against ONNX Runtime's on the same QDQ model.
                        int8_gap = float(np.abs(libs["ours_int8"]() - ort_q).max()) / max(mag, 1e-30)
                peak = fma_peak(peak_path, t) if peak_path and flops else 0
                peers = (["ort"] + (["ort_int8"] if q_path else [])) if peer else []
                samples = {k: [] for k in list(runners) + peers}
                with torch.no_grad():
                    for f in runners.values():  # warm-up at this thread count
                        f()
                    peer_keys = {"ort": key, "ort_int8": key + "/int8"}
                    for k in peers:
                        peer.time(peer_keys[k], 2)
                    for _ in range(a.rounds):
                        for k, f in runners.items():
                            samples[k] += timed(f, a.calls, a.warmup_ms / 1e3)
                        for k in peers:
                            samples[k] += peer.time(peer_keys[k], a.calls, a.warmup_ms / 1e3)
                ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
                spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in samples.items()}
                row = {"model": name, "threads": t, "ms": ms, "max_error": errors, "magnitude": mag,
                       "compile_s": compile_s, "spread": spread,
                       "eager_over_ours": ms["eager"] / ms["ours"], "ours_over_optimized": ms["ours"] / ms["optimized"]}
                if peer:
                    row["ort_over_ours"] = ms["ort"] / ms["ours"]
                    if a.db:
                        row["ort_over_tuned"] = ms["ort"] / ms["tuned"]
                if a.db:
                    row["ours_over_tuned"] = ms["ours"] / ms["tuned"]
                if a.base:
                    row["base_over_ours"] = ms["base"] / ms["ours"]
                for h in halves:
                    row[f"ours_over_ours_{h}"] = ms["ours"] / ms[f"ours_{h}"]
                    row[f"{h}_error"] = errors[f"ours_{h}"] / max(mag, 1e-30)
                if q_path:
                    row["ours_over_ours_int8"] = ms["ours"] / ms["ours_int8"]
                    if peer:
                        row["ort_int8_over_ours_int8"] = ms["ort_int8"] / ms["ours_int8"]
                        row["int8_gap_to_ort"] = int8_gap
                rows.append(row)
                line = f"{name:13s} {t} thr  " + "  ".join(f"{k} {v:7.2f} ms" for k, v in ms.items())
                for r in ("ort_over_ours", "ort_over_tuned", "ours_over_tuned", "base_over_ours", "eager_over_ours",
                          "ours_over_optimized", "ours_over_ours_int8", "ort_int8_over_ours_int8",
                          "ours_over_ours_bf16", "ours_over_ours_fp16"):
                    if r in row:
                        line += f"  {r.replace('_over_', '/')} {row[r]:5.2f}"
                for h in halves:
                    line += f"  ours_{h} error {row[f'{h}_error']:.2%} of the magnitude"
                if "int8_gap_to_ort" in row:
                    line += f"  ours_int8 vs ort_int8 outputs {row['int8_gap_to_ort']:.2%} of the magnitude"
                line += (f"  (max error {max(v for k, v in errors.items() if not any(t in k for t in ('int8', 'bf16', 'fp16'))):.2g} "
                         f"of {mag:.2g}; spread "
                         + ", ".join(f"{k} {v:.0%}" for k, v in spread.items()) + f"; compile {compile_s:.1f} s)")
                if peak:
                    at_peak_ms = flops / (peak * 1e9) * 1e3
                    row.update(gflop=flops / 1e9, peak_gflops=peak, at_peak_ms=at_peak_ms,
                               fewer_flop_alternatives=fewer_flops,
                               of_peak={k: at_peak_ms / ms[k] for k in ms})
                    line += (f"\n{'':13s} {t} thr  peak {peak:.1f} GFLOPS measured, {flops / 1e9:.3f} GFLOP a call: "
                             + ", ".join(f"{k} {flops / ms[k] * 1e-6:.0f} GFLOPS ({at_peak_ms / ms[k]:.0%})"
                                         for k in ("ours", "tuned", "ort") if k in ms)
                             + f"; at the peak {at_peak_ms:.2f} ms")
                    if fewer_flops:
                        line += " (a task has a fewer-FLOP alternative: effective GFLOPS, no ceiling)"
                    else:
                        row["ours_over_tuned_ceiling"] = ms["ours"] / at_peak_ms
                        line += (f", so tuning can make it at most {row['ours_over_tuned_ceiling']:.2f}x faster"
                                 " (ours/tuned)")
                print(line, flush=True)
    if peer:
        peer.close()
    summarize(rows, ("ort_over_ours", "ort_over_tuned", "ours_over_tuned", "base_over_ours", "ort_int8_over_ours_int8",
                     "ours_over_ours_int8", "ours_over_ours_bf16", "ours_over_ours_fp16"), a.json)


if __name__ == "__main__":
    main()
