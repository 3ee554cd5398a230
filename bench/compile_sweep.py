#!/usr/bin/env python3
"""Compile time over a template's knob space: random configs (half of them pushed to the
largest split factors, where unrolling makes the most code) of each workload, each compiled
by `tunefarm compile --no-db`, timed, and the slowest listed. The compiler's budgets
(compiler/unroll_loops.h, compiler/inline_budget.h) must keep every config to seconds: a
config past them is refused (exit 2) or compiled with some unrolled loops kept as loops.

usage: compile_sweep.py TUNEFARM [--target T] [--per-workload N] [--seed S] [--timeout S] WORKLOAD...

Prints one line per compile and the ten slowest; exits 1 when a compile timed out or died
of a signal.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tunefarm")
    ap.add_argument("workloads", nargs="+")
    ap.add_argument("--target", default="llvm -mcpu=native")
    ap.add_argument("--per-workload", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    results, bad = [], 0
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "k.so")
        for wl in a.workloads:
            p = subprocess.run([a.tunefarm, "describe", "-w", wl, "-t", a.target, "--json"], capture_output=True,
                               text=True)
            if p.returncode != 0:
                sys.exit(f"describe {wl}: {p.stderr.strip()}")
            knobs = json.loads(p.stdout)["space"]["knobs"]
            for _ in range(a.per_workload):
                cfg = {k["name"]: rng.choice(k["candidates"]) for k in knobs}
                if rng.random() < 0.5:
                    for k in knobs:
                        if k["kind"] == "split" and rng.random() < 0.6:
                            cfg[k["name"]] = max(k["candidates"])
                start = time.time()
                try:
                    c = subprocess.run([a.tunefarm, "compile", "--no-db", "-w", wl, "-t", a.target, "--config",
                                        json.dumps(cfg), "-o", out], capture_output=True, text=True,
                                       timeout=a.timeout)
                    status = "signal" if c.returncode < 0 else str(c.returncode)
                except subprocess.TimeoutExpired:
                    status = "timeout"
                took = time.time() - start
                bad += status in ("timeout", "signal")
                results.append((took, wl, cfg, status))
                print(f"{took:7.2f} s  exit {status:7}  {wl}  {json.dumps(cfg)}", flush=True)
    results.sort(key=lambda r: -r[0])
    print(f"\n{len(results)} compiles; slowest:")
    for took, wl, cfg, status in results[:10]:
        print(f"{took:7.2f} s  exit {status:7}  {wl}  {json.dumps(cfg)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
