#!/usr/bin/env python3
"""Runs one command-line test case of tunefarm.

A case file holds directives in comment lines ('#' or ';'):
  ARGS: one argument per line, in order; the word OUT stands for a fresh output path
  EXIT: the expected exit status (default 0)
  STDERR: a text that must appear in stderr (repeatable)
  INPUT: NAME = PYTHON-EXPRESSION   writes the expression's value (str or bytes) to the file
         NAME in the working directory first, for inputs too big or odd to keep as files
         (repeatable); arguments name it as NAME or @NAME
  FILECHECK  feed stdout, stderr and then the OUT file to FileCheck-19, with this file as checks
Every case also fails when tunefarm dies of a signal, and an error case (EXIT != 0) fails
when it leaves anything at OUT: a rejected request must not write half a file.

usage: run_cli_case.py TUNEFARM FILECHECK CASE
"""
import os
import subprocess
import sys
import tempfile


def main():
    tunefarm, filecheck, case = sys.argv[1:4]
    args, stderr_wants, exit_want, use_filecheck, inputs = [], [], 0, False, []
    for line in open(case, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line.startswith(("#", ";")):
            continue
        body = line.lstrip("#; ")
        if body.startswith("ARGS:"):
            args.append(body[len("ARGS:"):].strip())
        elif body.startswith("EXIT:"):
            exit_want = int(body[len("EXIT:"):])
        elif body.startswith("STDERR:"):
            stderr_wants.append(body[len("STDERR:"):].strip())
        elif body.startswith("FILECHECK"):
            use_filecheck = True
        elif body.startswith("INPUT:"):
            name, expr = body[len("INPUT:"):].split("=", 1)
            inputs.append((name.strip(), eval(expr, {})))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        for name, value in inputs:
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(value if isinstance(value, bytes) else value.encode())
        argv = [tunefarm] + [out if a == "OUT" else a for a in args]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp)
        print("$", " ".join(argv))
        print(p.stderr, end="")
        if p.returncode < 0:
            sys.exit(f"FAIL: killed by signal {-p.returncode}")
        if p.returncode != exit_want:
            sys.exit(f"FAIL: exit {p.returncode}, expected {exit_want}")
        for want in stderr_wants:
            if want not in p.stderr:
                sys.exit(f"FAIL: stderr lacks {want!r}")
        if exit_want != 0 and os.path.exists(out):
            sys.exit("FAIL: a rejected request left a file at OUT")
        if use_filecheck:
            text = p.stdout + p.stderr + (open(out, encoding="utf-8", errors="replace").read() if os.path.exists(out) else "")
            fc = subprocess.run([filecheck, case], input=text, text=True)
            if fc.returncode != 0:
                sys.exit("FAIL: FileCheck")
    print("PASS")


if __name__ == "__main__":
    main()
