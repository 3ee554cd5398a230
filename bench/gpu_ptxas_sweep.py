#!/usr/bin/env python3
"""Every kernel of models' CUDA builds through NVIDIA's ptxas, without a GPU: stack frames
(local memory: a register tile indexed by a loop variable), spills, registers and shared
memory per kernel, and any module ptxas refuses.

Each model is compiled (`tunefarm compile --model M -t 'cuda -arch=ARCH' --precision P`, default
configs unless --db), the PTX modules are read from the library's .tf_gpu_model section
(runtime/gpu_model/plan.h: the header, bucket 0's plan, its modules as [blob offset, bytes]) and
assembled with `ptxas -v` for the architecture each module's `.target` names (sm_90a for wgmma).
One line per build, then one per kernel with a stack frame or spills. Exit 1 when any kernel has
either or a module does not assemble, 2 for bad arguments, 77 when there is no ptxas.

Session 107 found RegNetY-400MF's grouped 3x3 layers with 64-byte stack frames this way.

Usage: gpu_ptxas_sweep.py TUNEFARM MODEL.onnx [MODEL.onnx ...] [--precisions fp32,tf32,fp16,bf16]
                          [--arch sm_90] [--ptxas PATH] [--db FILE]
"""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
MAGIC = b"TFGPUMOD"
PLAN_HEADER_WORDS = 12  # TF_GPU_PLAN_HEADER_WORDS
PLAN_INPUTS, PLAN_OUTPUTS, PLAN_MODULES = 2, 3, 4  # words of a plan's header


def modules_of(library, scratch):
    """The PTX modules of bucket 0's plan, read from the library's .tf_gpu_model section."""
    section = os.path.join(scratch, "section.bin")
    r = subprocess.run(["objcopy", "-O", "binary", "--only-section=.tf_gpu_model", library, section],
                       capture_output=True, text=True)
    if r.returncode or not os.path.exists(section):
        raise ValueError(f"objcopy could not read {library}'s .tf_gpu_model section: {r.stderr.strip()}")
    data = open(section, "rb").read()
    if data[:8] != MAGIC:
        raise ValueError(f"{library} is not a GPU model library (its section starts {data[:8]!r})")
    plans, _, blob, blob_bytes = struct.unpack_from("<4Q", data, 8)
    words = struct.unpack_from(f"<{PLAN_HEADER_WORDS}q", data, plans)
    at = plans + 8 * (PLAN_HEADER_WORDS + 2 * words[PLAN_INPUTS] + 2 * words[PLAN_OUTPUTS])
    modules = []
    for m in range(words[PLAN_MODULES]):
        offset, size = struct.unpack_from("<2q", data, at + 16 * m)
        if offset < 0 or size < 0 or offset + size > blob_bytes:
            raise ValueError(f"{library}: module {m} at [{offset}, +{size}) is outside the blob of {blob_bytes} bytes")
        modules.append(data[blob + offset: blob + offset + size].rstrip(b"\0").decode())
    return modules


def assemble(ptxas, ptx, path):
    """[(kernel, registers, stack bytes, spill bytes, shared bytes)], or the error text."""
    target = re.search(r"^\.target\s+(\w+)", ptx, re.M)
    if not target:
        return None, "no .target line"
    with open(path, "w") as f:
        f.write(ptx)
    r = subprocess.run([ptxas, f"-arch={target.group(1)}", "-v", path, "-o", path + ".cubin"],
                       capture_output=True, text=True)
    out = r.stdout + r.stderr
    if r.returncode:
        return None, out.strip()[-2000:]
    kernels = []
    for name, body in re.findall(r"Compiling entry function '(\w+)' for '\w+'\n(.*?)(?=ptxas info\s+: Compiling|\Z)",
                                 out, re.S):
        def number(pattern):
            m = re.search(pattern, body)
            return int(m.group(1)) if m else 0
        spill = sum(int(x) for x in re.findall(r"(\d+) bytes spill", body))
        kernels.append((name, number(r"Used (\d+) registers"), number(r"(\d+) bytes stack frame"), spill,
                        number(r"(\d+) bytes smem")))
    return kernels, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tunefarm")
    ap.add_argument("models", nargs="+", help="ONNX models")
    ap.add_argument("--precisions", default="fp32", help="comma-separated: " + ",".join(PRECISIONS))
    ap.add_argument("--arch", default="sm_90", help="the cuda target's -arch (sm_80, sm_89, sm_90)")
    ap.add_argument("--ptxas", default=shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas")
    ap.add_argument("--db", help="a tuning database to take configs from (default: none, the default configs)")
    a = ap.parse_args()
    precisions = [p for p in a.precisions.split(",") if p]
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad or not precisions:
        print(f"gpu_ptxas_sweep: --precisions {a.precisions!r}: each one of {', '.join(PRECISIONS)}", file=sys.stderr)
        return 2
    if not re.fullmatch(r"sm_\d+a?", a.arch):
        print(f"gpu_ptxas_sweep: --arch {a.arch!r}: not an sm_NN architecture", file=sys.stderr)
        return 2
    for m in a.models:
        if not os.path.isfile(m):
            print(f"gpu_ptxas_sweep: no model file {m!r}", file=sys.stderr)
            return 2
    if not os.access(a.ptxas, os.X_OK):
        print(f"gpu_ptxas_sweep: no ptxas at {a.ptxas} (NVIDIA's CUDA toolkit; --ptxas PATH): nothing assembled")
        return 77
    failed = 0
    with tempfile.TemporaryDirectory() as scratch:
        for model in a.models:
            for p in precisions:
                what = f"{os.path.basename(model)} {p} {a.arch}"
                lib = os.path.join(scratch, "model.so")
                cmd = [a.tunefarm, "compile", "--model", model, "-t", f"cuda -arch={a.arch}", "--precision", p, "-o", lib]
                cmd += ["--db", a.db] if a.db else ["--no-db"]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode:
                    print(f"FAIL {what}: compile exited {r.returncode}: {r.stderr.strip()[-1000:]}", flush=True)
                    failed += 1
                    continue
                try:
                    modules = modules_of(lib, scratch)
                except ValueError as e:
                    print(f"FAIL {what}: {e}", flush=True)
                    failed += 1
                    continue
                kernels, problems = [], []
                for i, ptx in enumerate(modules):
                    ks, error = assemble(a.ptxas, ptx, os.path.join(scratch, f"m{i}.ptx"))
                    if ks is None:
                        problems.append(f"  module {i}: ptxas refused it: {error}")
                        continue
                    kernels += ks
                    problems += [f"  {k}: {regs} registers, {stack} bytes of stack frame, {spill} bytes spilled, "
                                 f"{smem} bytes of shared memory" for k, regs, stack, spill, smem in ks if stack or spill]
                most = max(kernels, key=lambda k: k[1]) if kernels else None
                print(f"{'FAIL' if problems else 'ok  '} {what}: {len(modules)} modules, {len(kernels)} kernels"
                      + (f", most registers {most[1]} ({most[0]})" if most else ""), flush=True)
                for line in problems:
                    print(line, flush=True)
                failed += bool(problems)
    print(f"{failed} builds with a stack frame, spills or a module ptxas refused")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
