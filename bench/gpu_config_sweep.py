#!/usr/bin/env python3
"""Configs of a kernel against its default on one NVIDIA GPU, by the kernels' own time: each
workload compiled with the default config and with each config of --configs (knobs set in the
default, as `compile -c` does; a config the template refuses is listed with its reason), every
build checked against PyTorch and its kernels (a split-K sum included) timed by CUPTI through
torch.profiler, as is PyTorch's call in the same precision. Launch overheads do not count on
either side: for kernels of a few microseconds (a BERT layer's 128-row GEMMs) event timing of
CuPy launches measures the launches. Says whether a template's space holds configs better
than its default, and which: what the defaults and the tuner's search need.

Usage: bench/gpu_config_sweep.py BUILD/bin/tunefarm [--precision fp16 [--half-operands]] [--groups bert]
                                 [-w WORKLOAD ...] [--configs '[{"tiles_m": 4}, ...]'] [--large] [--half] [--deep]
                                 [--random N [--seed S]] [--list [--target T]] [--calls 20]
Without --configs, a grid of block tiles (32 x 32 to 128 x 64, 4 and 8 warps, K chunks and stages
that fit 48 KiB of shared memory) and split_k 1, 2, 4 for the tensor-core templates; --large adds
block tiles of 128 x 64 and 128 x 128 with K chunks of 32 and 64 and 3-4 stages (70-210 KiB of
dynamic shared memory, which sm_80 and sm_90 allow a block); --half times the default and every
config of the grid also with half_tiles (fp16/bf16 operands' tiles held in 16 bits); --wgmma times
a grid of Hopper's warpgroup-level products instead (sm_90 only: blocks of 64 x 64 to 128 x 256,
K chunks of 64, 3-4 stages, split_k 1, 2, 4; and each tile with its products in flight across
the next chunk, wgmma_in_flight, at 3 and 4 stages; elsewhere each is listed as refused); --deep a grid of
deep pipelines (6 to 12 stages: 32 x 32 to 64 x 64 blocks, K chunks of 32 and 64, split_k 1, 2, 4). --random N times
N configs of each workload's own template drawn at random from its knobs' candidates (`tunefarm
describe`'s space; --seed), those the template refuses drawn again (up to 8 N draws): any
template, fp32's dense.cuda and conv2d.cuda too, and a sample of the space rather than a grid around
the default (for bench/sweep_records.py and `bench_costmodel quality`). --list prints each
workload's configs (--target's, default sm_90, checked by compiling) and exits: no GPU needed.
--half-operands gives the groups' products 16-bit operands as gpu_bench.py's flag does; a -w
workload that names its types (dtype=, weight_dtype=, precision=: a model's kernels, e.g.
matmul(...,dtype=float32,weight_dtype=float16) for float32 activations and 16-bit weights) is
timed as it is. Each argument has its declared type. Needs an NVIDIA GPU, PyTorch with CUDA and
CuPy (exits 2 without).
"""
import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench  # noqa: E402
import gpu_profile  # noqa: E402

# Block tiles of 32 x 32 to 128 x 64 with 4 and 8 warps, each with the K chunk (unroll_k) and
# stages that fit 48 KiB of static shared memory (float32 tiles: 64 x 64 at unroll_k 2 and 3
# stages does not).
TILES = [{"warps_m": 2, "warps_n": 2, "tiles_m": 2, "tiles_n": 2, "unroll_k": 1, "stages": 4},
         {"warps_m": 2, "warps_n": 2, "tiles_m": 2, "tiles_n": 2, "unroll_k": 2, "stages": 2},
         {"warps_m": 2, "warps_n": 2, "tiles_m": 2, "tiles_n": 4, "unroll_k": 2, "stages": 2},
         {"warps_m": 2, "warps_n": 2, "tiles_m": 2, "tiles_n": 4, "unroll_k": 1, "stages": 4},
         {"warps_m": 2, "warps_n": 4, "tiles_m": 2, "tiles_n": 2, "unroll_k": 1, "stages": 4},
         {"warps_m": 4, "warps_n": 2, "tiles_m": 2, "tiles_n": 2, "unroll_k": 1, "stages": 3},
         {"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "unroll_k": 1, "stages": 3},
         {"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "unroll_k": 1, "stages": 2},
         {"warps_m": 2, "warps_n": 2, "tiles_m": 1, "tiles_n": 2, "unroll_k": 2, "stages": 4}]


# Past 48 KiB (dynamic shared memory): CUTLASS's 128 x 128 and 128 x 64 blocks with deeper K
# chunks and more stages in flight, and its 64 x 64 warp tiles (4 x 8 tiles, 128 accumulators a
# lane: in registers since session 94) in blocks of 128 x 128, 128 x 256 and 256 x 128.
LARGE_TILES = [{"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 8, "unroll_k": 2, "stages": 4},
               {"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 8, "unroll_k": 4, "stages": 3},
               {"warps_m": 2, "warps_n": 4, "tiles_m": 4, "tiles_n": 8, "unroll_k": 2, "stages": 3},
               {"warps_m": 4, "warps_n": 2, "tiles_m": 4, "tiles_n": 8, "unroll_k": 2, "stages": 3},
               {"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "unroll_k": 2, "stages": 3},
               {"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "unroll_k": 2, "stages": 4},
               {"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "unroll_k": 4, "stages": 3},
               {"warps_m": 2, "warps_n": 4, "tiles_m": 4, "tiles_n": 4, "unroll_k": 2, "stages": 3},
               {"warps_m": 2, "warps_n": 4, "tiles_m": 4, "tiles_n": 4, "unroll_k": 2, "stages": 4},
               {"warps_m": 2, "warps_n": 4, "tiles_m": 4, "tiles_n": 4, "unroll_k": 4, "stages": 3},
               {"warps_m": 4, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "unroll_k": 2, "stages": 4}]


# Deep pipelines (6 to 12 stages, session 98): a short K's chunks all or mostly in flight, as
# cuBLAS runs a BERT layer's 128-row GEMMs on Hopper (64 x 64 blocks, K chunks of 64, 13 stages):
# the 16-bit default's 32 x 32 and 64 x 32 blocks deeper, and 64 x 64 blocks of K chunks of 32 and
# 64 (4 and 8 warps) at 4 to 12 stages. Configs with more stages than a workload's K has chunks
# for are refused by name (listed as such).
DEEP_TILES = [dict(t, stages=s) for t, depths in (
    ({"warps_m": 2, "warps_n": 2, "tiles_m": 1, "tiles_n": 2, "unroll_k": 2}, (6, 8, 12)),
    ({"warps_m": 2, "warps_n": 2, "tiles_m": 2, "tiles_n": 2, "unroll_k": 2}, (6, 8, 12)),
    ({"warps_m": 2, "warps_n": 2, "tiles_m": 2, "tiles_n": 4, "unroll_k": 2}, (4, 8, 12)),
    ({"warps_m": 2, "warps_n": 2, "tiles_m": 2, "tiles_n": 4, "unroll_k": 4}, (4, 6, 8, 12)),
    ({"warps_m": 2, "warps_n": 4, "tiles_m": 2, "tiles_n": 2, "unroll_k": 4}, (6, 12)),
) for s in depths]


def deep_grid():
    return [dict(t, split_k=s) for t in DEEP_TILES for s in (1, 2, 4)]


# Hopper's warpgroup-level products (wgmma, sm_90; fp16/bf16 with half_tiles): warpgroups of 4
# warps along the rows, each a 64 x 8*tiles_n tile, K chunks of 64, 3-4 stages; blocks of 64 x 64
# to 128 x 256 (CUTLASS's sm90 tiles are 128 x 128 to 128 x 256).
WGMMA_TILES = [{"warps_m": 4, "warps_n": 1, "tiles_m": 1, "tiles_n": 8, "unroll_k": 4, "stages": 3},
               {"warps_m": 4, "warps_n": 1, "tiles_m": 1, "tiles_n": 16, "unroll_k": 4, "stages": 3},
               {"warps_m": 4, "warps_n": 2, "tiles_m": 1, "tiles_n": 16, "unroll_k": 4, "stages": 3},
               {"warps_m": 8, "warps_n": 1, "tiles_m": 1, "tiles_n": 16, "unroll_k": 4, "stages": 3},
               {"warps_m": 8, "warps_n": 1, "tiles_m": 1, "tiles_n": 16, "unroll_k": 4, "stages": 4},
               {"warps_m": 8, "warps_n": 1, "tiles_m": 1, "tiles_n": 32, "unroll_k": 4, "stages": 3},
               {"warps_m": 4, "warps_n": 1, "tiles_m": 1, "tiles_n": 32, "unroll_k": 2, "stages": 3}]


def wgmma_grid():
    # Each tile as it is (every K chunk's products waited for before the next chunk's copies), and
    # with each chunk's products in flight across the next (wgmma_in_flight): 3 stages (the copies
    # one chunk ahead; 128 x 128 blocks of 16-bit tiles then fit two a multiprocessor) and 4 (two
    # ahead, one block).
    plain = [dict(t, split_k=s, shared=True, half_tiles=True, wgmma=True) for t in WGMMA_TILES for s in (1, 2, 4)]
    flight = [dict(t, stages=st, split_k=s, shared=True, half_tiles=True, wgmma=True, wgmma_in_flight=True)
              for t in WGMMA_TILES for st, s in ((3, 1), (4, 1), (4, 4))]
    return plain + flight


def default_grid(large=False):
    grid = [dict(t, split_k=s) for t in TILES for s in (1, 2, 4)]
    return grid + ([dict(t, split_k=s) for t in LARGE_TILES for s in (1, 2)] if large else [])


def compile_one(tunefarm, workload, target, out, config):
    """(path, None) or (None, the refusal)."""
    cmd = [tunefarm, "compile", "-w", workload, "--emit", "so", "-o", out, "--json", "-t", target, "--no-db"]
    cmd += ["-c", json.dumps(config)] if config else []
    r = subprocess.run(cmd, capture_output=True, text=True)
    return (out, None) if r.returncode == 0 else (None, r.stderr.strip().splitlines()[-1] if r.stderr else "failed")


def random_draws(tunefarm, workload, target, n, seed):
    """Up to n distinct configs of `workload`'s template on `target`, each knob drawn uniformly
    from its candidates (tunefarm describe's space), in a seeded order."""
    r = subprocess.run([tunefarm, "describe", "-w", workload, "-t", target, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        gpu_bench.fail("tunefarm describe %s: %s" % (workload, (r.stderr.strip().splitlines() or ["failed"])[-1]))
    knobs = json.loads(r.stdout)["space"]["knobs"]
    size = 1
    for k in knobs:
        size *= len(k["candidates"])
    rng = random.Random("%s:%s" % (seed, workload))
    seen, out = set(), []
    while len(out) < min(n, size):
        c = {k["name"]: rng.choice(k["candidates"]) for k in knobs}
        if json.dumps(c, sort_keys=True) not in seen:
            seen.add(json.dumps(c, sort_keys=True))
            out.append(c)
    return out


def build_configs(a, workload, target, configs, tmp, wi):
    """[(config or None for the default, path or None, refusal)]: the default and `configs` compiled,
    or with --random, the default and the first a.random of up to 8 x a.random random draws that
    the template takes."""
    draws = random_draws(a.tunefarm, workload, target, 8 * a.random, a.seed) if a.random else configs
    jobs = [None] + draws
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        built = list(pool.map(lambda jc: compile_one(a.tunefarm, workload, target,
                                                     os.path.join(tmp, "w%dc%d.ptx" % (wi, jc[0])), jc[1]),
                              enumerate(jobs)))
    out = [(c, path, refusal) for c, (path, refusal) in zip(jobs, built)]
    if a.random:
        out = out[:1] + [x for x in out[1:] if x[1] is not None][:a.random]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tunefarm")
    ap.add_argument("--precision", default="fp16", choices=["fp32", "tf32", "fp16", "bf16"])
    ap.add_argument("--groups", default="bert", help="gpu_bench.py's groups: " + ",".join(gpu_bench.GROUPS))
    ap.add_argument("-w", "--workload", action="append", default=[])
    ap.add_argument("--configs", help="a JSON list of configs (knobs set in the default)")
    ap.add_argument("--large", action="store_true", help="add block tiles past 48 KiB of shared memory")
    ap.add_argument("--half", action="store_true",
                    help="each config (and the default) also with half_tiles: the tiles in 16 bits")
    ap.add_argument("--deep", action="store_true",
                    help="the grid of deep pipelines instead (6 to 12 stages; tensor-core templates)")
    ap.add_argument("--wgmma", action="store_true",
                    help="the grid of wgmma configs instead (sm_90, fp16/bf16; half_tiles)")
    ap.add_argument("--half-operands", action="store_true",
                    help="with --precision fp16|bf16: the groups' operands in 16 bits (as gpu_bench.py's flag)")
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="N configs of each workload's template drawn at random (any template, fp32 too)")
    ap.add_argument("--seed", type=int, default=1, help="with --random: the draws' seed")
    ap.add_argument("--list", action="store_true", help="print each workload's configs and exit (no GPU needed)")
    ap.add_argument("--target", default="cuda -arch=sm_90", help="with --list: the target the configs are for")
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args()
    if a.random < 0 or a.random > 10000:
        gpu_bench.fail("--random %d: give a count of configs from 1 to 10000" % a.random)
    if a.random and (a.configs or a.wgmma or a.deep or a.large or a.half):
        gpu_bench.fail("--random draws the configs itself: not with --configs, --wgmma, --deep, --large or --half")
    if a.deep and (a.configs or a.wgmma):
        gpu_bench.fail("--deep is a grid of its own: not with --configs or --wgmma")
    if a.half_operands and a.precision not in ("fp16", "bf16"):
        gpu_bench.fail("--half-operands takes --precision fp16 or bf16, not %s" % a.precision)
    configs = (json.loads(a.configs) if a.configs else wgmma_grid() if a.wgmma else deep_grid() if a.deep
               else default_grid(a.large))
    if a.half:
        configs = [{"half_tiles": True}] + [dict(c, half_tiles=h) for c in configs for h in (False, True)]
    workloads = [gpu_bench.with_precision(w, a.precision, a.half_operands)
                 for w in list(a.workload) + [w for g in a.groups.split(",") if g for w in gpu_bench.GROUPS[g]]]
    workloads = [w for w in workloads if w]
    if a.list:
        tmp = tempfile.mkdtemp(prefix="gpu_sweep.")
        for wi, w in enumerate(workloads):
            built = build_configs(a, w, a.target, configs, tmp, wi)
            print("%s: %d configs on %s" % (w, len(built) - 1, a.target))
            for c, path, refusal in built[1:]:
                print("  %s%s" % (json.dumps(c, separators=(",", ":")), "" if path else "  refused: " + refusal[:100]))
        return
    try:
        import torch
        import cupy as cp
    except ImportError as e:
        gpu_bench.fail("needs PyTorch with CUDA and CuPy: %s" % e)
    if not torch.cuda.is_available():
        gpu_bench.fail("PyTorch sees no CUDA GPU on this machine")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    major, minor = torch.cuda.get_device_capability()
    target = "cuda -arch=sm_%d%d" % (major, minor)
    peer_type = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)
    print("GPU: %s (%s); PyTorch %s; %s; kernel time by CUPTI (us a call)" %
          (torch.cuda.get_device_name(), target, torch.__version__, a.precision), flush=True)
    tmp = tempfile.mkdtemp(prefix="gpu_sweep.")
    torch.manual_seed(0)
    for wi, w in enumerate(workloads):
        op, p = gpu_bench.params_of(w)
        rows = []
        peer_us = None
        for config, path, refusal in build_configs(a, w, target, configs, tmp, wi):
            label = "default" if config is None else json.dumps(config, separators=(",", ":"))
            if path is None:
                rows.append((float("inf"), label, "refused: " + refusal[:100]))
                continue
            k = gpu_bench.Kernel(cp, torch, path)
            types = [gpu_bench.torch_dtype(torch, x.get("dtype")) for x in k.side["args"]]
            args = [torch.randn(*x["shape"], device="cuda").to(t) if x["role"] == "input"
                    else torch.empty(*x["shape"], device="cuda", dtype=t) for x, t in zip(k.side["args"], types)]
            ptrs = tuple(cp.uint64(t.data_ptr()) for t in args)
            checked = [(t.to(peer_type) if peer_type and i < 2 else t).float() for i, t in enumerate(args)]
            ref = gpu_bench.reference(torch, op, p, checked)
            k(ptrs)
            torch.cuda.synchronize()
            err = (args[-1].float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
            times = gpu_profile.kernel_times(torch, lambda: k(ptrs), a.calls)
            us = sum(t for t, _ in times.values())
            full = json.dumps(k.config, separators=(",", ":"))
            # A 16-bit output is rounded once more (2^-11 of the value for fp16, 2^-8 for bf16).
            tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(types[-1], 2e-3 if a.precision == "tf32" else 1e-4)
            bad = "" if err < tol else "  MISMATCH %.2g" % err
            rows.append((us, label, full + bad))
            if peer_us is None:
                peer_args = [t.to(peer_type) if peer_type and i < len(args) - 1 else t for i, t in enumerate(args)]
                with torch.no_grad():
                    pt = gpu_profile.kernel_times(torch, lambda: gpu_bench.reference(torch, op, p, peer_args), a.calls)
                peer_us = sum(t for t, _ in pt.values())
        default_us = rows[0][0]
        print("\n%s: PyTorch %.1f us; default %.1f us (%.2fx PyTorch)" % (w, peer_us, default_us, peer_us / default_us),
              flush=True)
        for us, label, info in sorted(rows, key=lambda r: r[0]):
            if us == float("inf"):
                print("  %8s  %-70s %s" % ("-", label, info))
            else:
                print("  %8.1f  %5.2fx default %5.2fx PyTorch  %-70s %s" %
                      (us, default_us / us, peer_us / us, label, info), flush=True)


if __name__ == "__main__":
    main()
