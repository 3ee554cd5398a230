#!/usr/bin/env python3
"""The configs a GPU sweep timed (bench/gpu_config_sweep.py's text output, as gpu_session.sh
saves it under docs/results/) as tuning records, JSON lines for `tunefarm query import`: so
that `bench_costmodel quality` can say how well the cost model ranks a template's configs on
the GPU that timed them, on a machine without one.

Usage: bench/sweep_records.py BUILD/bin/tunefarm -o records.jsonl SWEEP.txt [SWEEP.txt ...]
then   BUILD/bin/tunefarm query import --db sweep.db records.jsonl
       BUILD/bench/bench_costmodel quality --db sweep.db --template dense_tc.cuda.v2 --arch cuda [--within yes]

Each timed row of a sweep becomes one correct record of its workload (canonical, as `tunefarm
describe` names it) and full config, one sample: the kernel's own time a call by CUPTI, in the
sweep's microseconds (number 1, repeat 1). Rows the template refused, and rows without a time,
are skipped. The target is the one the sweep's "GPU: ... (cuda -arch=sm_90)" line names; the
device key is cuda-smNN; the time of measurement the first date (YYYY-MM-DD) the file names,
else its modification time.
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys

WORKLOAD = re.compile(r"^([a-z_0-9]+\(.*\)): PyTorch")
ROW = re.compile(r"^\s+([0-9.]+)\s+[0-9.]+x default\s+[0-9.]+x PyTorch\s+(default|\{.*?\})\s+(\{.*\})\s*$")
GPU = re.compile(r"^GPU: (.*) \(((?:cuda|rocm) [^)]*)\)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tunefarm", help="BUILD/bin/tunefarm")
    ap.add_argument("sweeps", nargs="+", help="gpu_config_sweep.py outputs (text)")
    ap.add_argument("-o", "--output", required=True, help="JSON lines to write")
    a = ap.parse_args()
    described = {}

    def describe(spec, target):
        if (spec, target) not in described:
            p = subprocess.run([a.tunefarm, "describe", "-w", spec, "-t", target, "--json"], capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"sweep_records: tunefarm describe {spec} -t '{target}' failed: {p.stderr.strip()}")
            described[(spec, target)] = json.loads(p.stdout)
        return described[(spec, target)]

    count = 0
    with open(a.output, "w") as out:
        for path in a.sweeps:
            target, model, w = None, "", None
            try:
                text = open(path, errors="replace").read()
            except OSError as e:
                sys.exit(f"sweep_records: {path}: {e.strerror}")
            day = re.search(r"\b(20\d\d-\d\d-\d\d)\b", text)
            when = (datetime.datetime.strptime(day.group(1), "%Y-%m-%d").replace(tzinfo=datetime.timezone.utc).timestamp()
                    if day else os.path.getmtime(path))
            for line in text.splitlines():
                if line.startswith("==="):  # the next step's output
                    target, w = None, None
                if m := GPU.match(line):
                    model, target = m.group(1), m.group(2)
                    continue
                if (m := WORKLOAD.match(line)) and target:
                    w = describe(m.group(1), target)
                    continue
                if not (m := ROW.match(line)) or not w:
                    continue
                sm = re.search(r"sm_(\d+)", target)
                out.write(json.dumps({
                    "v": 1, "arch": target.split()[0], "compile_s": 0.0, "config": json.loads(m.group(3)),
                    "correctness": "ok", "device_key": f"cuda-sm{sm.group(1)}" if sm else target.split()[0],
                    "device_model": model, "error_code": "ok", "error_msg": "", "flops": w["flops"],
                    "measured_at": when + count, "op": w["op"], "params": {}, "run": f"sweep {path.split('/')[-1]}",
                    "samples_s": [float(m.group(1)) * 1e-6],
                    "settings": {"cooldown_ms": 0.0, "flush": False, "min_repeat_ms": 0.0, "number": 1, "repeat": 1},
                    "target": w["target"], "template": w["template"], "toolchain": "gpu_config_sweep.py",
                    "workload": w["workload"]}) + "\n")
                count += 1
    print(f"{count} records of {len(described)} workloads in {a.output}")
    if count == 0:
        sys.exit("sweep_records: no timed rows found (is it gpu_config_sweep.py's output?)")


if __name__ == "__main__":
    main()
