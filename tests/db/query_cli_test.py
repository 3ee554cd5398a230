#!/usr/bin/env python3
"""`tunefarm query` end to end: a database filled by import, every subcommand's JSON answer,
the plain sqlite3 shell reading the same file, and the error paths.

usage: query_cli_test.py TUNEFARM
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import unittest

TUNEFARM = None
X86 = "llvm -mtriple=x86_64-pc-linux-gnu -mcpu=skylake"
A72 = "llvm -mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a72"


def record(m, target, tile, seconds, arch="x86_64", error="ok", run=""):
    return {
        "v": 1, "workload": f"matmul(M={m},N=64,K=64,epilogue=none)", "op": "matmul",
        "params": {"M": m, "N": 64, "K": 64}, "flops": 2 * m * 64 * 64,
        "target": target, "arch": arch, "device_key": "local", "device_model": "cpu",
        "toolchain": "test", "template": "dense.cpu.v1",
        "config": {"tile_m": tile, "tile_n": 16},
        "samples_s": [] if error != "ok" else [seconds, seconds * 1.01, seconds * 0.99],
        "settings": {"number": 10, "repeat": 3, "min_repeat_ms": 50.0, "flush": False, "cooldown_ms": 0.0},
        "error_code": error, "error_msg": "" if error == "ok" else "it broke",
        "compile_s": 0.05, "measured_at": 1.7e9 + tile, "correctness": "ok", "run": run,
    }


class QueryCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.db = os.path.join(self.tmp.name, "tuning.db")
        self.jsonl = os.path.join(self.tmp.name, "records.jsonl")
        recs = [record(64, X86, t, t * 1e-4) for t in (1, 2, 4, 8)]
        recs += [record(64, X86, 16, 0, error="timeout")]
        recs += [record(128, A72, 4, 3e-4, arch="aarch64", run="run-7")]
        with open(self.jsonl, "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        self.assertEqual(self.q("import", self.jsonl)["added"], 6)

    def tearDown(self):
        self.tmp.cleanup()

    def run_tf(self, *args, expect=0):
        p = subprocess.run([TUNEFARM, *args], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, expect, f"{args}: {p.stderr}")
        self.assertGreaterEqual(p.returncode, 0, "killed by a signal")
        return p

    def q(self, sub, *args, expect=0):
        p = self.run_tf("query", sub, "--db", self.db, "--json", *args, expect=expect)
        return json.loads(p.stdout) if expect == 0 else p

    def test_best_tiers(self):
        exact = self.q("best", "-w", "matmul(M=64,N=64,K=64)", "-t", X86)
        self.assertEqual(exact["tier"], "exact")
        self.assertEqual(exact["record"]["config"]["tile_m"], 1)
        self.assertAlmostEqual(exact["record"]["gflops"], 2 * 64 ** 3 / 1e-4 * 1e-9)
        arch = self.q("best", "-w", "matmul(M=64,N=64,K=64)", "-t", "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell")
        self.assertEqual(arch["tier"], "same-arch")
        near = self.q("best", "-w", "matmul(M=100,N=64,K=64)", "-t", A72)
        self.assertEqual(near["tier"], "nearest-shape")
        self.assertEqual(near["record"]["workload"], "matmul(M=128,N=64,K=64,epilogue=none)")
        none = self.q("best", "-w", "conv2d_nchw(N=1,C=3,H=8,W=8,K=4,R=3,S=3)", "-t", X86)
        self.assertEqual(none["tier"], "none")
        pairs = self.q("best")
        self.assertEqual([r["workload"] for r in pairs],
                         ["matmul(M=128,N=64,K=64,epilogue=none)", "matmul(M=64,N=64,K=64,epilogue=none)"])

    def test_top_history_stats_runs(self):
        top = self.q("top", "-k", "2", "-w", "matmul(M=64, K=64, N=64)")  # any spelling of the workload
        self.assertEqual([r["config"]["tile_m"] for r in top], [1, 2])
        hist = self.q("history", "-t", X86)
        self.assertEqual([r["config"]["tile_m"] for r in hist], [1, 2, 4, 8, 16])
        stats = self.q("stats")
        self.assertEqual(stats["records"], 6)
        self.assertEqual(stats["errors"], {"ok": 5, "timeout": 1})
        self.assertEqual(stats["per_run"]["run-7"], 1)
        runs = self.q("runs")
        self.assertEqual([r["uuid"] for r in runs], ["run-7"])

    def test_curve(self):
        w = "matmul(M=64,N=64,K=64)"
        curves = self.q("curve", "-w", w)
        self.assertEqual(len(curves), 1)  # the records of no run form one curve
        pts = curves[0]["points"]
        self.assertEqual([p[0] for p in pts], [1, 2, 3, 4, 5])  # one point per new config
        self.assertEqual([p[2] for p in pts], [1e-4] * 5)  # the first is the best, the timeout adds a trial
        self.assertEqual(pts[4][1], 0)  # the timeout's own time
        csv = self.run_tf("query", "curve", "--db", self.db, "-w", w, "--csv").stdout.splitlines()
        self.assertEqual(csv[0], "run,strategy,target,trial,config_s,best_s,best_gflops")
        self.assertEqual(len(csv), 6)
        png = os.path.join(self.tmp.name, "curve.png")
        self.run_tf("query", "curve", "--db", self.db, "-w", w, "-o", png)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # Errors: no records of the workload, gnuplot missing, an output gnuplot cannot write.
        p = self.run_tf("query", "curve", "--db", self.db, "-w", "matmul(M=3,N=3,K=3)", "--csv", expect=2)
        self.assertIn("no records of matmul(M=3,N=3,K=3,epilogue=none)", p.stderr)
        env = dict(os.environ, PATH="/nonexistent")
        p = subprocess.run([TUNEFARM, "query", "curve", "--db", self.db, "-w", w, "-o", png + "2"],
                           capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("gnuplot is not installed (Debian package gnuplot-nox)", p.stderr)
        p = self.run_tf("query", "curve", "--db", self.db, "-w", w, "-o", "/nonexistent-dir/c.png", expect=2)
        self.assertIn("gnuplot could not draw /nonexistent-dir/c.png", p.stderr)

    def test_export_import_roundtrip_and_sqlite_shell(self):
        out = os.path.join(self.tmp.name, "out.jsonl")
        self.run_tf("query", "export", "--db", self.db, out)
        with open(out) as f:
            lines = [json.loads(l) for l in f]
        self.assertEqual(len(lines), 6)
        copy = os.path.join(self.tmp.name, "copy.db")
        p = self.run_tf("query", "import", "--db", copy, out, "--json")
        self.assertEqual(json.loads(p.stdout)["added"], 6)
        p = self.run_tf("query", "import", "--db", copy, out, "--json")
        self.assertEqual(json.loads(p.stdout)["added"], 0)
        # The file is an ordinary SQLite database with a convenience view.
        con = sqlite3.connect(copy)
        rows = con.execute("SELECT workload, error_code FROM record_view ORDER BY id").fetchall()
        self.assertEqual(len(rows), 6)
        self.assertEqual(con.execute("PRAGMA integrity_check").fetchone()[0], "ok")

    def test_distill(self):
        dry = self.q("distill", "--keep", "2", "--dry-run")
        self.assertEqual(dry["removed"], 3)  # tiles 4 and 8, and the timeout
        self.assertEqual(self.q("stats")["records"], 6)
        real = self.q("distill", "--keep", "2")
        self.assertEqual(real["removed"], 3)
        self.assertEqual(self.q("stats")["records"], 3)

    def test_errors(self):
        p = self.run_tf("query", "stats", "--db", os.path.join(self.tmp.name, "absent.db"), expect=2)
        self.assertIn("no tuning database at", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "absent.db")))  # queries create nothing
        notdb = os.path.join(self.tmp.name, "notes.txt")
        with open(notdb, "w") as f:
            f.write("my notes\n")
        p = self.run_tf("query", "stats", "--db", notdb, expect=1)
        self.assertIn("is not a tunefarm database", p.stderr)
        p = self.run_tf("query", "import", "--db", notdb, self.jsonl, expect=1)
        self.assertIn("is not a tunefarm database", p.stderr)
        with open(notdb) as f:
            self.assertEqual(f.read(), "my notes\n")  # never overwritten
        p = self.run_tf("query", "import", "--db", self.db, "/nonexistent.jsonl", expect=2)
        self.assertIn("cannot read /nonexistent.jsonl", p.stderr)
        bad = os.path.join(self.tmp.name, "bad.jsonl")
        with open(bad, "w") as f:
            f.write(json.dumps(record(32, X86, 1, 1e-4)) + "\n{oops\n")
        p = self.run_tf("query", "import", "--db", self.db, bad, expect=1)
        self.assertIn("line 2: not valid JSON", p.stderr)
        self.assertEqual(self.q("stats")["records"], 7)  # the good line went in
        p = self.run_tf("query", "top", "--db", self.db, "-k", "0", expect=2)
        p = self.run_tf("query", "best", "--db", self.db, "-w", "matmul(M=1)", expect=2)
        self.assertIn("missing key N", p.stderr)
        p = self.run_tf("query", "history", "--db", self.db, "-t", "vulkan", expect=2)
        self.assertIn("unknown kind 'vulkan'", p.stderr)
        p = self.run_tf("query", "stats", "--db", os.path.join(self.tmp.name, "no/such/dir/t.db"), expect=2)
        p = self.run_tf("run", "-w", "matmul(M=2,N=2,K=2)", "--db", os.path.join(self.tmp.name, "no/dir/t.db"), expect=1)
        self.assertIn("does not exist", p.stderr)

    def test_failures_leave_no_temporaries(self):
        """A link that fails leaves no .tmp files next to the output; `run` sweeps the build
        folders of runs that died."""
        out = os.path.join(self.tmp.name, "k.so")
        env = dict(os.environ, TUNEFARM_LLD="/bin/false")
        p = subprocess.run([TUNEFARM, "compile", "-w", "matmul(M=8,N=8,K=8)", "--no-db", "-o", out],
                           capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("linking failed", p.stderr)
        self.assertEqual(sorted(os.listdir(self.tmp.name)), ["records.jsonl", "tuning.db"] +
                         [f for f in os.listdir(self.tmp.name) if f.startswith("tuning.db-")])
        stale = os.path.join(tempfile.gettempdir(), "tunefarm-run-999999999")
        os.makedirs(stale, exist_ok=True)
        self.run_tf("run", "-w", "matmul(M=4,N=4,K=4)", "--no-db", "--repeat", "1", "--min-repeat-ms", "0")
        self.assertFalse(os.path.exists(stale), "a dead run's folder was left")

    def test_run_times_a_baseline_alongside(self):
        """`run --baseline default` times the default schedule interleaved with the given
        config and reports the median of the sample pairs' ratios."""
        w = "matmul(M=24,N=20,K=12)"
        default = json.loads(self.run_tf("describe", w, "--json").stdout)["default_config"]
        p = self.run_tf("run", "-w", w, "--no-db", "--config", '{"tile_m":2,"tile_n":4}', "--baseline", "default",
                        "--repeat", "3", "--min-repeat-ms", "1", "--warmup-ms", "0", "--json")
        out = json.loads(p.stdout)
        self.assertEqual(out["check"], "ok")
        self.assertEqual(out["baseline"]["config"], default)
        self.assertEqual(out["baseline"]["config_source"], "default")
        self.assertEqual(len(out["baseline"]["samples_s"]), 3)
        ratios = sorted(b / k for b, k in zip(out["baseline"]["samples_s"], out["samples_s"]))
        self.assertAlmostEqual(out["speedup"], ratios[1], places=9)
        p = self.run_tf("run", "-w", w, "--no-db", "--baseline", '{"tile_m":1,"tile_n":1}', "--repeat", "1",
                        "--min-repeat-ms", "0", "--warmup-ms", "0")
        self.assertRegex(p.stdout, r"baseline  \{.*\} \(given\): [0-9.]+ ms")
        self.assertRegex(p.stdout, r"speedup   [0-9.]+x over the baseline")

    def test_cross_library_errors_name_the_right_package(self):
        if os.path.exists("/usr/arm-linux-gnueabihf/lib/libgomp.so.1"):
            self.skipTest("the armhf cross libgomp is installed here")
        out = os.path.join(self.tmp.name, "k.so")
        p = self.run_tf("compile", "-w", "matmul(M=64,N=64,K=64)", "--no-db", "-t",
                        "llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a72", "-o", out, expect=1)
        self.assertIn("/usr/lib/arm-linux-gnueabihf", p.stderr)
        self.assertIn("install libgomp1-armhf-cross", p.stderr)

    def test_compile_uses_tuned_config(self):
        so = os.path.join(self.tmp.name, "k.so")
        p = self.run_tf("compile", "-w", "matmul(M=64,N=64,K=64)", "-t", X86, "--db", self.db, "-o", so)
        self.assertNotIn("warning", p.stderr)
        meta = json.load(open(so + ".json"))
        self.assertEqual(meta["config_source"], "tuned (exact)")
        self.assertEqual(meta["config"]["tile_m"], 1)
        # --no-db asks for the default: no warning about tuned configs.
        p = self.run_tf("compile", "-w", "matmul(M=64,N=64,K=64)", "-t", X86, "--no-db", "-o", so)
        self.assertNotIn("warning", p.stderr)
        self.assertEqual(json.load(open(so + ".json"))["config_source"], "default")
        # A database without a record for the workload: the default, with one warning.
        p = self.run_tf("compile", "-w", "conv2d_nchw(N=1,C=3,H=8,W=8,K=4,R=3,S=3)", "-t", X86, "--db", self.db, "-o", so)
        self.assertIn("warning: no tuned config for conv2d_nchw(", p.stderr)
        # A --db that does not exist is a mistake, not a silent default.
        p = self.run_tf("compile", "-w", "matmul(M=64,N=64,K=64)", "--db", os.path.join(self.tmp.name, "typo.db"),
                        "-o", so, expect=2)
        self.assertIn("no tuning database at", p.stderr)

    def test_hostile_import_lines(self):
        """Each bad line is refused alone, naming the field; the good lines go in."""
        good = record(48, X86, 1, 1e-4)
        bad = {
            "measured_at": dict(record(48, X86, 2, 1e-4), measured_at=1e19),
            "settings.min_repeat_ms": dict(record(48, X86, 3, 1e-4),
                                           settings=dict(good["settings"], min_repeat_ms=-5.0)),
            "params.M": dict(record(48, X86, 4, 1e-4), params={"M": -3, "N": 64, "K": 64}),
            "compile_s": dict(record(48, X86, 5, 1e-4), compile_s=1e300),
            "sample": dict(record(48, X86, 6, 1e-4), samples_s=[1e-4, 1e12]),
            "wrong type": dict(record(48, X86, 7, 1e-4), error_msg=5),
            "'flops' is not an integer": dict(record(48, X86, 10, 1e-4), flops=5.2e116),  # found by fuzz_jsonl
            "'number' is not an integer": dict(record(48, X86, 11, 1e-4),
                                               settings=dict(good["settings"], number=2 ** 40)),
            "workload has": dict(record(48, X86, 8, 1e-4), workload="w" * 5000),
        }
        path = os.path.join(self.tmp.name, "hostile.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps(good) + "\n")
            f.write("[" * 300000 + "]" * 300000 + "\n")
            f.write('{"v": 1, "config": ' + "{\"a\":" * 100000 + "1" + "}" * 100000 + "}\n")
            f.write('{"v": 1, "flops": 2E2222}\n')  # found by fuzz_jsonl: valid JSON, no double holds it
            for r in bad.values():
                f.write(json.dumps(r) + "\n")
            f.write(json.dumps(record(48, X86, 9, 2e-4)) + "\n")
        p = self.run_tf("query", "import", "--db", self.db, path, "--json", expect=1)
        self.assertEqual(json.loads(p.stdout)["added"], 2)
        self.assertEqual(json.loads(p.stdout)["rejected"], 3 + len(bad))
        self.assertIn("line 2: JSON nested deeper than 64 levels", p.stderr)
        self.assertIn("line 3: JSON nested deeper than 64 levels", p.stderr)
        self.assertIn("line 4: JSON number out of range", p.stderr)
        for field in bad:
            self.assertIn(field, p.stderr)
        self.assertIn("measured_at 1e+19 is not in", p.stderr)
        # What was refused never reaches the readers.
        self.q("history")
        self.q("top")

    def test_readers_survive_odd_values_in_the_file(self):
        """A file edited by hand (or by an older writer) with a time no calendar shows."""
        con = sqlite3.connect(self.db)
        con.execute("UPDATE records SET measured_at = 1e19 WHERE id = 1")
        con.execute("UPDATE records SET measured_at = -5 WHERE id = 2")
        con.commit()
        con.close()
        for sub in ("history", "top"):
            p = self.run_tf("query", sub, "--db", self.db)
            self.assertIn("?", p.stdout)
        self.q("history")


if __name__ == "__main__":
    TUNEFARM = sys.argv.pop(1)
    unittest.main(verbosity=2)
