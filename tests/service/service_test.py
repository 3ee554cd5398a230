#!/usr/bin/env python3
"""The tuning service end to end, with real daemons on loopback: tunefarm-tuner with local
boards and with a tracker and boards, the CLI (submit, jobs, watch, cancel, query and compile
--server), and the load and fault scenarios of docs/service.md: kill -9 of the service and of
a board, cancel, two users sharing the farm, and every refusal.

usage: service_test.py TUNEFARM TUNEFARM_TUNER TUNEFARM_TRACKER TUNEFARM_RPC_SERVER

Figures (times, splits, duplicates) are printed as "figure: ..." lines for the notes.
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from daemon import Daemon, DaemonTest, make_pki, polls  # noqa: E402 (tests/daemon.py)

TUNEFARM = TUNER = TRACKER = RPC_SERVER = None
SMALL = ["matmul(M=16,N=16,K=16)", "matmul(M=8,N=32,K=16)", "matmul(M=24,N=8,K=8)"]
# Quick measurements: the tests check the service, not the kernels.
FAST = {"repeat": 3, "min_repeat_ms": 1, "retime_rounds": 1, "retime_top": 2}


def fill(path):
    """Writes `path` until its file system is full."""
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


class ServiceTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.env = dict(os.environ)
        self.env.pop("TUNEFARM_SERVER", None)
        self.env.pop("TUNEFARM_TOKEN_FILE", None)

    # --- helpers -------------------------------------------------------------------------

    def service(self, *extra, name="tuner", env=None):
        d = Daemon([TUNER, "--port", "0", "--db", self.db, "--workers", "1", *extra], os.path.join(self.dir, name + ".log"),
                   env=None if env is None else {**os.environ, **env})
        self.daemons.append(d)
        self.env["TUNEFARM_SERVER"] = f"127.0.0.1:{d.port}"
        return d

    def tf(self, *args, expect=0, token=None, timeout=300):
        env = dict(self.env)
        if token:
            env["TUNEFARM_TOKEN_FILE"] = token
        p = subprocess.run([TUNEFARM, *args], capture_output=True, text=True, timeout=timeout, env=env)
        self.assertGreaterEqual(p.returncode, 0, f"{args}: killed by a signal\n{p.stderr}")
        if expect is not None:
            self.assertEqual(p.returncode, expect, f"{args}:\n{p.stdout}\n{p.stderr}")
        return p

    def job_file(self, workloads, **fields):
        job = {"workloads": workloads, **FAST, **fields}
        return self.write(f"job{time.time_ns()}.json", json.dumps(job))

    def submit(self, workloads, token=None, **fields):
        p = self.tf("submit", self.job_file(workloads, **fields), "--json", token=token)
        return int(json.loads(p.stdout)["job_id"])  # proto3 JSON writes int64 as a string

    def jobs(self, token=None):
        return {int(j["id"]): j for j in json.loads(self.tf("jobs", "--json", token=token).stdout).get("jobs", [])}

    def wait(self, pred, timeout, what, token=None):
        for _ in polls(timeout):
            js = self.jobs(token)
            if pred(js):
                return js
        self.fail(f"timed out waiting for {what}: {json.dumps(self.jobs(token), indent=1)[:3000]}")

    def records(self):
        con = sqlite3.connect(self.db)
        try:
            return con.execute(
                "SELECT w.canonical, t.target, r.config_hash, COALESCE(u.uuid, ''), r.error_code "
                "FROM records r JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id "
                "LEFT JOIN runs u ON u.id = r.run_id").fetchall()
        finally:
            con.close()

    def duplicates(self):
        """Configs measured in more than one run: with retime_rounds 0, a measurement repeated."""
        runs = {}
        for w, t, h, run, _ in self.records():
            runs.setdefault((w, t, h), set()).add(run)
        return [k for k, v in runs.items() if len(v) > 1]

    def integrity(self):
        con = sqlite3.connect(self.db)
        try:
            return con.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            con.close()

    def farm(self, boards):
        token = self.write("farm.token", "farm-token-0123456789abcdef\n")
        tr = Daemon([TRACKER, "--port", "0", "--token-file", token, "--heartbeat-ms", "200", "--board-timeout-ms", "1500"],
                    os.path.join(self.dir, "tracker.log"))
        self.daemons.append(tr)
        bs = []
        for i in range(boards):
            b = Daemon([RPC_SERVER, "--tracker", f"127.0.0.1:{tr.port}", "--key", "cpu", "--port", "0",
                        "--token-file", token, "--board-id", f"b{i}", "--work-dir", self.dir],
                       os.path.join(self.dir, f"board{i}.log"), pattern=r"listening on [^:]+:(\d+)")
            self.daemons.append(b)
            bs.append(b)
        time.sleep(0.5)
        return tr, token, bs

    # --- the done-when ------------------------------------------------------------------

    def test_multi_workload_job_on_local_boards(self):
        self.service("--local-boards", "1")
        p = self.tf("submit", "-w", SMALL[0], "-w", SMALL[1], "--weight", "3", "--weight", "1", "--trials", "24",
                    "--batch", "4")
        job = int(p.stdout.strip())
        w = self.tf("watch", str(job), "--json")
        events = [json.loads(l) for l in w.stdout.splitlines()]
        self.assertEqual(events[0]["kind"], "snapshot")
        self.assertEqual(events[-1]["kind"], "end")
        self.assertTrue(any(e["kind"] == "progress" for e in events))
        final = events[-1]["job"]
        self.assertEqual(final["state"], "done", final)
        self.assertEqual(final["trials_done"], 24)
        self.assertEqual({t["workload"] for t in final["tasks"]},
                         {"matmul(M=16,N=16,K=16,epilogue=none)", "matmul(M=8,N=32,K=16,epilogue=none)"})
        for t in final["tasks"]:
            self.assertGreater(t["trials"], 0, t)
            self.assertGreater(t["best_s"], 0, t)
            self.assertTrue(t["done"])
            # Where its time went: every trial a measurement (re-timings too) but those built
            # to code measured before, each loaded and timed by a runner, within the task's
            # measuring (one board: one at a time).
            self.assertLess(t["same_code"], t["trials"], t)
            self.assertGreaterEqual(t.get("measurements", 0), t["trials"] - t["same_code"], t)
            self.assertGreater(t.get("build_s", 0), 0, t)
            self.assertGreater(t.get("load_s", 0), 0, t)
            self.assertGreater(t.get("timing_s", 0), 0, t)
            self.assertLessEqual(t["load_s"] + t["timing_s"], t["measure_s"], t)
        self.assertEqual(sum(t["trials"] for t in final["tasks"]), 24)
        weighted = sum(t["weight"] * t["best_s"] for t in final["tasks"])
        self.assertAlmostEqual(final["weighted_best_s"], weighted, delta=weighted * 1e-9)
        # Progress only grows.
        done = [e["job"]["trials_done"] for e in events]
        self.assertEqual(done, sorted(done))
        # The plain watch of a finished job: its final state, exit 0.
        plain = self.tf("watch", str(job))
        self.assertIn("done", plain.stdout)
        self.assertRegex(plain.stdout, r"time +building [0-9.]+ s, measuring [0-9.]+ s \([0-9]+ measurements; one: "
                                       r"upload 0\.0 ms, module load [0-9.]+ ms, timing [0-9]+ ms\)")
        # The database, through the service.
        best = json.loads(self.tf("query", "best", "--server", "--json").stdout)
        self.assertEqual(len(best), 2)
        top = json.loads(self.tf("query", "top", "--server", "-k", "3", "-w", SMALL[0], "--json").stdout)
        self.assertEqual(len(top), 3)
        hist = json.loads(self.tf("query", "history", "--server", "--json").stdout)
        self.assertEqual(len(hist), len(self.records()))
        stats = json.loads(self.tf("query", "stats", "--server", "--json").stdout)
        self.assertEqual(stats["records"], len(self.records()))
        out = os.path.join(self.dir, "export.jsonl")
        self.tf("query", "export", "--server", out)
        with open(out) as f:
            self.assertEqual(len(f.read().splitlines()), len(self.records()))
        so = os.path.join(self.dir, "k.so")
        c = json.loads(self.tf("compile", "--server", "-w", SMALL[0], "-o", so, "--json").stdout)
        self.assertEqual(c["config_source"], "tuned (exact)", c)
        # Writes need the file.
        p = self.tf("query", "distill", "--server", expect=None)
        self.assertEqual(p.returncode, 2)
        # Model results (tune --model --local records them; jobs do not): none here, said so.
        p = self.tf("query", "models", "--server")
        self.assertIn("(no models", p.stdout)

    def test_a_job_counts_the_trials_built_to_code_it_measured_before(self):
        """A job whose candidates often build to the same code (a 4 x 4 depthwise convolution:
        most knobs change nothing there) says how many of its trials were not measured, as tune
        does; its measurements are the rest and the re-timing's."""
        self.service("--local-boards", "1")
        w = "depthwise_conv2d_nchw(N=1,C=2,H=4,W=4,R=3,S=3)"
        job = self.submit([w], trials=12, batch=4, strategy="random", seed=1)
        js = self.wait(lambda js: js[job]["state"] in ("done", "failed"), 300, "the job's end")
        self.assertEqual(js[job]["state"], "done", js[job])
        t = js[job]["tasks"][0]
        self.assertEqual(t["trials"], 12, t)
        self.assertGreater(t["same_code"], 0, t)
        self.assertLess(t["same_code"], 12, t)
        self.assertGreaterEqual(t["measurements"], 12 - t["same_code"], t)
        self.assertEqual(len(self.records()), t["measurements"], "a record per measurement, none for the twins")
        plain = self.tf("watch", str(job))
        self.assertIn(f"{t['same_code']} trials built to the code of a config measured before, not measured again",
                      plain.stdout)

    def sibling_model(self, kernel=3):
        """A model of two convolutions of one shape, the first with its Relu: two tasks that
        differ only in the epilogue (siblings); 3x3 ones also have Winograd alternatives (four
        tasks), 1x1 ones do not (two, and cheaper builds: a Winograd candidate takes 3-4 s to
        build under ASan)."""
        import torch
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Conv2d(8, 8, kernel, padding=kernel // 2, bias=False), torch.nn.ReLU(),
                                    torch.nn.Conv2d(8, 8, kernel, padding=kernel // 2, bias=False)).eval()
        path = os.path.join(self.dir, f"siblings{kernel}.onnx")
        torch.onnx.export(model, (torch.randn(1, 8, 12, 12),), path, opset_version=13)
        return path

    def model_tasks(self, model, count=4):
        """The tasks `tune --model` finds in `model`: for sibling_model, its two convolutions and
        (3x3) their Winograd alternatives (1 trial leaves the others without a result: exit 1)."""
        p = self.tf("tune", "--model", model, "--local", "--trials", "1", "--json", "--no-db", expect=1)
        tasks = [t["workload"] for t in json.loads(p.stdout.splitlines()[0])["tasks"]]
        self.assertEqual(len(tasks), count, p.stdout)
        return tasks

    def test_a_model_job_tunes_its_tasks_as_tune_model_does(self):
        """The service and `tune --model` run one multi-task tuner: with the same seed (the
        default), trials and kind of board they pick the same tasks in the same order. The case that told them
        apart: a task with results of an earlier run comes after the tasks without any."""
        import shutil
        model = self.sibling_model()
        cli_db = os.path.join(self.dir, "cli.db")
        env = {**self.env, "TUNEFARM_DB": cli_db}
        env.pop("TUNEFARM_SERVER", None)
        def cli(*args, expect=0):
            p = subprocess.run([TUNEFARM, *args], capture_output=True, text=True, timeout=300, env=env)
            self.assertEqual(p.returncode, expect, f"{args}:\n{p.stdout}\n{p.stderr}")
            return p
        tasks = self.model_tasks(model)
        trials = str(len(tasks))  # a round each: the order is the scheduler's alone, not the timings'

        # The first task has results of an earlier run in both databases.
        cli("tune", "-w", tasks[0], "--local", "--trials", "2", "--db", cli_db)
        shutil.copy(cli_db, self.db)
        events = [json.loads(l) for l in cli("tune", "--model", model, "--local", "--trials", trials, "--json", "--db",
                                             cli_db).stdout.splitlines()]
        cli_order = [e["workload"] for e in events if e["event"] == "progress"]
        self.service("--local-boards", "1")
        job = int(self.tf("submit", "--model", model, "--trials", trials).stdout.strip())
        watched = [json.loads(l) for l in self.tf("watch", str(job), "--json").stdout.splitlines()]
        self.assertEqual(watched[-1]["job"]["state"], "done", watched[-1])
        # A batch's event is a progress event whose trials grew (the tasks' ends publish
        # progress events too).
        service_order, done = [], 0
        for e in watched:
            if e["kind"] == "progress" and e["job"].get("trials_done", 0) > done:
                service_order.append(e["workload"])
                done = e["job"]["trials_done"]
        print(f"figure: task order, tune --model {cli_order}, the service {service_order}")
        self.assertEqual(cli_order, tasks[1:] + tasks[:1])
        self.assertEqual(service_order, cli_order)

    def test_a_job_passes_a_new_best_on_to_its_siblings(self):
        """As `tune --model` (tests/tuner/tune_model_test.cc), a job's task tries the new best of
        its sibling (the same convolution with another epilogue) first: a `seed` event, and the
        sibling measures that config. The best is planted: a config only the Relu task measured
        is made the fastest in the database."""
        model = self.sibling_model(kernel=1)
        svc = self.service("--local-boards", "1")
        tasks = self.model_tasks(model, count=2)
        relu = next(t for t in tasks if t.startswith("conv2d_nchwc(") and t.endswith("epilogue=relu)"))
        none = relu.replace("epilogue=relu)", "epilogue=none)")
        self.assertIn(none, tasks)
        # The Relu task measured its default and a batch of 8 others, the other its default only.
        for w, trials in ((relu, "9"), (none, "1")):
            j = int(self.tf("submit", "-w", w, "--trials", trials).stdout.strip())
            self.assertEqual(json.loads(self.tf("watch", str(j), "--json").stdout.splitlines()[-1])["job"]["state"], "done")
        svc.stop()  # the database is changed by hand with nothing else holding it
        only_relu = sorted(set(self.configs_of(relu)) - set(self.configs_of(none)))
        self.assertTrue(only_relu, "every config of the Relu task was measured by the other too")
        x = only_relu[0]
        con = sqlite3.connect(self.db)
        try:
            con.execute("UPDATE records SET samples = '[1e-9]', median_s = 1e-9 WHERE config = ? AND workload_id = "
                        "(SELECT id FROM workloads WHERE canonical = ?)", (x, relu))
            con.commit()
        finally:
            con.close()
        self.service("--local-boards", "1", name="tuner2")
        # The first round: the Relu task's batch (its best now x), then the other's, which takes
        # x first; 8 + 8 fit.
        job = int(self.tf("submit", "--model", model, "--trials", "24").stdout.strip())
        second = [json.loads(l) for l in self.tf("watch", str(job), "--json").stdout.splitlines()]
        self.assertEqual(second[-1]["job"]["state"], "done", second[-1])
        seeds = [k for k, e in enumerate(second) if e["kind"] == "seed" and e["workload"] == none and relu in e["message"]]
        print(f"figure: seed events {[(e['workload'], e['message']) for e in second if e['kind'] == 'seed']}")
        self.assertTrue(seeds, json.dumps(second)[:3000])
        self.assertTrue(any(e["kind"] == "progress" and e["workload"] == none for e in second[seeds[0]:]),
                        "the task passed a seed never measured a batch after it")
        self.assertIn(json.loads(x), [json.loads(c) for c in self.configs_of(none)])

    def configs_of(self, workload):
        """The configs recorded for `workload`, as the database stores them."""
        con = sqlite3.connect(self.db)
        try:
            return [c for (c,) in con.execute("SELECT r.config FROM records r JOIN workloads w ON w.id = r.workload_id "
                                              "WHERE w.canonical = ?", (workload,))]
        finally:
            con.close()

    def test_job_on_a_farm_survives_a_board_killed_mid_job(self):
        tr, token, boards = self.farm(2)
        self.service("--tracker", f"127.0.0.1:{tr.port}", "--farm-token-file", token)
        job = self.submit(SMALL[:2], key="cpu", trials=32, batch=4, boards=2)
        self.wait(lambda js: js[job]["trials_done"] >= 8, 120, "the first batches")
        boards[0].stop(signal.SIGKILL)
        killed_at = time.time()
        js = self.wait(lambda js: js[job]["state"] not in ("queued", "running"), 300, "the job's end")
        self.assertEqual(js[job]["state"], "done", js[job])
        self.assertEqual(js[job]["trials_done"], 32)
        print(f"figure: farm job finished {time.time() - killed_at:.1f} s after board b0 was killed; "
              f"{len(self.records())} records", file=sys.stderr)
        self.assertEqual(self.integrity(), "ok")

    # --- faults -----------------------------------------------------------------------

    def test_kill9_of_the_service_then_restart_resumes_every_job(self):
        d = self.service("--local-boards", "1", "--max-running", "2")
        # Jobs share workloads: they take turns, and none measures what another did.
        ids = [self.submit([SMALL[i % 3], SMALL[(i + 1) % 3]], trials=20, batch=4, retime_rounds=0, seed=i + 1)
               for i in range(3)]
        self.wait(lambda js: sum(js[i]["trials_done"] for i in ids) >= 20, 180, "progress before the kill")
        d.stop(signal.SIGKILL)
        before = len(self.records())
        self.assertEqual(self.integrity(), "ok")
        restart = time.time()
        self.service("--local-boards", "1", "--max-running", "2", name="tuner2")
        js = self.jobs()
        self.assertTrue(all(js[i]["state"] in ("queued", "running", "done") for i in ids), js)
        resumed = self.wait(lambda js: sum(js[i]["trials_done"] for i in ids) > 0 and
                            any(js[i]["state"] == "running" for i in ids), 60, "resumption")
        first_progress = time.time() - restart
        js = self.wait(lambda js: all(js[i]["state"] == "done" for i in ids), 400, "every job's end")
        for i in ids:
            self.assertEqual(js[i]["trials_done"], 20, js[i])
        # The tasks' time counts both starts: a measurement per record (re-measurements too),
        # but for the batches of the two running jobs recorded just before the kill and not yet
        # in their progress (4 each); without the first start's, 20 or more would be missing.
        measurements = sum(t.get("measurements", 0) for i in ids for t in js[i]["tasks"])
        self.assertGreaterEqual(measurements, len(self.records()) - 8, [js[i]["tasks"] for i in ids])
        restarts = sum(js[i].get("restarts", 0) for i in ids)
        self.assertGreaterEqual(restarts, 1)
        self.assertEqual(self.integrity(), "ok")
        dup = self.duplicates()
        print(f"figure: kill -9 with {before} records; jobs {len(ids)}, resumed {restarts} times, running again "
              f"{first_progress:.1f} s after the restart; {len(self.records())} records at the end; "
              f"{len(dup)} configs measured twice", file=sys.stderr)
        self.assertEqual(dup, [])
        con = sqlite3.connect(self.db)
        statuses = dict(con.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall())
        con.close()
        self.assertNotIn("running", statuses)  # the killed start's runs were ended at the restart
        # ... as interrupted: nobody cancelled them.
        self.assertGreaterEqual(statuses.get("interrupted", 0), 1, statuses)
        self.assertNotIn("cancelled", statuses)
        del resumed

    def run_statuses(self):
        con = sqlite3.connect(self.db)
        try:
            rows = con.execute("SELECT workload, group_concat(status) FROM runs GROUP BY workload").fetchall()
            return {w.replace(",epilogue=none", ""): s for w, s in rows}  # as SMALL spells them
        finally:
            con.close()

    def test_a_crash_right_after_a_run_ends_re_times_nothing(self):
        """The service dies (TUNEFARM_FAULT, as a kill -9 there would) right after a task's
        re-timing and run have ended. The run's end and the task's "done" are one transaction:
        after the restart the task is not re-timed (it was: 9 extra measurements), its run
        stays done, and the run the crash interrupted is stored as interrupted (it was stored
        as cancelled, though nobody cancelled it). A job whose last task ended so is done."""
        # Two tasks: the crash comes after the first one's end; the second resumes.
        d = self.service("--local-boards", "1", env={"TUNEFARM_FAULT": "run-finished"})
        job = self.submit(SMALL[:2], trials=8, batch=4, retime_rounds=2, retime_top=2)
        deadline = time.time() + 300
        while d.proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual(d.proc.returncode, 137, d.text())
        self.assertIn("TUNEFARM_FAULT: dying at run-finished", d.text())
        def of_first():
            return len([r for r in self.records() if r[0].replace(",epilogue=none", "") == SMALL[0]])
        first = of_first()
        self.assertGreater(first, 0)
        self.assertEqual(self.run_statuses(), {SMALL[0]: "done", SMALL[1]: "running"})
        self.service("--local-boards", "1", name="tuner2")
        js = self.wait(lambda js: js[job]["state"] == "done", 300, "the resumed job's end")
        self.assertEqual(js[job]["trials_done"], 8, js[job])
        self.assertEqual(of_first(), first, "the ended task was re-timed")
        statuses = self.run_statuses()
        self.assertEqual(statuses[SMALL[0]], "done")
        self.assertEqual(sorted(statuses[SMALL[1]].split(",")), ["done", "interrupted"])
        self.assertEqual(self.integrity(), "ok")
        self.daemons.pop().stop(signal.SIGKILL)

        # One task: its run's end is the job's end, in the same transaction.
        self.db = os.path.join(self.dir, "one.db")
        d = self.service("--local-boards", "1", name="tuner3", env={"TUNEFARM_FAULT": "run-finished"})
        job = self.submit(SMALL[2:], trials=8, batch=4, retime_rounds=2, retime_top=2)
        deadline = time.time() + 300
        while d.proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual(d.proc.returncode, 137, d.text())
        count = len(self.records())
        self.service("--local-boards", "1", name="tuner4")
        js = self.jobs()
        self.assertEqual(js[job]["state"], "done", js[job])
        time.sleep(1.5)  # the dispatcher's tick: nothing starts again
        self.assertEqual(len(self.records()), count)
        self.assertEqual(self.run_statuses(), {SMALL[2]: "done"})

    def test_cancel_of_a_farm_job_still_waiting_for_a_board(self):
        # Regression: a farm job waiting for its first board ignored a cancel until it got one.
        tr, token, boards = self.farm(1)
        self.service("--tracker", f"127.0.0.1:{tr.port}", "--farm-token-file", token, "--max-running", "2")
        busy = self.submit(SMALL[:1], key="cpu", trials=5000, batch=4)
        self.wait(lambda js: js[busy]["trials_done"] >= 4, 120, "the first job's first batch")
        waiting = self.submit(SMALL[1:2], key="cpu", trials=8, batch=4)
        self.wait(lambda js: js[waiting]["state"] == "running", 60, "the second job's start")
        time.sleep(1)  # in the tracker's queue by now
        asked = time.time()
        self.tf("cancel", str(waiting))
        js = self.wait(lambda js: js[waiting]["state"] == "cancelled", 20, "the cancel of the waiting job")
        print(f"figure: a farm job waiting for a board was cancelled in {time.time() - asked:.1f} s", file=sys.stderr)
        self.assertEqual(js[waiting]["trials_done"], 0)
        self.assertEqual(js[busy]["state"], "running", js[busy])

    def test_cancel_of_a_running_job_stops_it_and_keeps_its_records(self):
        self.service("--local-boards", "1")
        job = self.submit(SMALL[:2], trials=5000, batch=4)
        self.wait(lambda js: js[job]["trials_done"] >= 4, 120, "the first batch")
        t0 = time.time()
        p = self.tf("cancel", str(job))
        self.assertIn("cancel", p.stdout)
        js = self.wait(lambda js: js[job]["state"] == "cancelled", 30, "the cancel")
        took = time.time() - t0
        print(f"figure: cancel took effect in {took:.1f} s", file=sys.stderr)
        self.assertLess(took, 30)
        self.assertIn("cancelled by local", js[job]["reason"])
        kept = len(self.records())
        # Every measured trial has its record; a trial built to the code of a config measured
        # before counts as a trial but is not measured again (TuneState::same_code), so has none.
        twins = sum(t["same_code"] for t in js[job]["tasks"])
        self.assertGreaterEqual(kept, js[job]["trials_done"] - twins, js[job])
        time.sleep(1.5)
        self.assertEqual(len(self.records()), kept, "measurements went on after the cancel")
        # Over: cancelling again is refused, watching answers the final state.
        p = self.tf("cancel", str(job), expect=1)
        self.assertIn("already cancelled", p.stderr)
        self.assertEqual(self.tf("watch", str(job), expect=1).returncode, 1)

    # --- sharing --------------------------------------------------------------------------

    def test_two_users_twenty_jobs_four_boards(self):
        tr, token, boards = self.farm(4)
        users = self.write("users", "alice-token-0123456789 alice\nbob-token-0123456789ab bob\n")
        alice = self.write("alice.token", "alice-token-0123456789\n")
        bob = self.write("bob.token", "bob-token-0123456789ab\n")
        self.service("--tracker", f"127.0.0.1:{tr.port}", "--farm-token-file", token, "--users-file", users,
                     "--max-running", "4", "--local-boards", "0")
        owner = {}
        t0 = time.time()
        # Ten jobs each; five under the sanitizer pass (tests/sanitized.h), still more than the
        # four that run at once, so bob's wait behind alice's queue is there to be judged.
        per_user = 5 if os.environ.get("TF_SANITIZED") == "1" else 10
        for who, tok in (("alice", alice), ("bob", bob)):  # alice's jobs first: a FIFO queue would starve bob
            for i in range(per_user):
                owner[self.submit([SMALL[i % 3]], token=tok, key="cpu", trials=6, batch=3, retime_rounds=0,
                                  seed=i + 1)] = who
        js = self.wait(lambda js: all(j["state"] in ("done", "failed", "cancelled") for j in js.values()), 900,
                       f"{2 * per_user} jobs", token=alice)
        self.assertTrue(all(j["state"] == "done" for j in js.values()), [j["reason"] for j in js.values()])
        # The rule: a freed slot goes to the user with fewer jobs running. Checked at every
        # start while the other user had a job waiting: the starter had no more running.
        jobs = [(owner[int(j["id"])], j) for j in js.values()]
        def running(user, t):
            return sum(1 for u, k in jobs if u == user and k["started_at"] < t < k["finished_at"])
        unfair, contested = [], 0
        for who, j in jobs:
            t = j["started_at"]
            other = "bob" if who == "alice" else "alice"
            # (50 ms: a submit stamps its job just before it enters the queue)
            if not any(u == other and k["submitted_at"] < t - 0.05 and t < k["started_at"] for u, k in jobs):
                continue
            contested += 1
            if running(who, t) > running(other, t):
                unfair.append((who, running(who, t), running(other, t)))
        bob_wait = (min(k["started_at"] for u, k in jobs if u == "bob")
                    - min(k["submitted_at"] for u, k in jobs if u == "bob"))
        # Board time: measured seconds of each user's runs.
        con = sqlite3.connect(self.db)
        split = dict(con.execute(
            "SELECT u.user, SUM(json_array_length(r.samples) * r.number * r.median_s) FROM records r "
            "JOIN runs u ON u.id = r.run_id GROUP BY u.user").fetchall())
        con.close()
        held = {}
        for j in js.values():  # each job holds one board from its start to its end
            held[owner[int(j["id"])]] = held.get(owner[int(j["id"])], 0) + j["finished_at"] - j["started_at"]
        print(f"figure: {2 * per_user} jobs ({per_user} alice then {per_user} bob) on 4 boards in {time.time() - t0:.0f} s; {contested} starts "
              f"while the other user waited, {len(unfair)} of them to the user with more running; bob waited "
              f"{bob_wait:.1f} s for his first start; timed board seconds "
              + ", ".join(f"{u} {s:.4f}" for u, s in sorted(split.items())) + "; board-holding seconds "
              + ", ".join(f"{u} {s:.1f}" for u, s in sorted(held.items())), file=sys.stderr)
        self.assertGreater(contested, 0)
        self.assertEqual(unfair, [])
        self.assertEqual(self.duplicates(), [])

    # --- refusals -------------------------------------------------------------------------

    def test_a_full_disk_fails_the_job_with_the_reason_and_the_service_serves_on(self):
        """The database on a small file system (a tmpfs where this test may mount one; else the
        fault hook TUNEFARM_FAULT_DB_MAX_PAGES, SQLite's own page limit) fills during a job: the
        job fails saying so, the service keeps serving what the database holds, and once
        there is space again the job's end is written and new jobs run."""
        mnt = os.path.join(self.dir, "small")
        os.makedirs(mnt)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt],
                                 capture_output=True).returncode == 0
        env = None
        if mounted:
            self.db = os.path.join(mnt, "tuning.db")
        else:
            env = {"TUNEFARM_FAULT_DB_MAX_PAGES": "40"}  # a new database has 20
        print(f"figure: full disk by {'a tmpfs of 8 MiB' if mounted else 'the fault hook'}")
        try:
            self.full_disk(mnt, mounted, env)
        finally:
            for d in self.daemons:
                d.stop(signal.SIGKILL)
            if mounted:
                subprocess.run(["umount", "-l", mnt])

    def full_disk(self, mnt, mounted, env):
        d = self.service("--local-boards", "1", env=env)
        jid = self.submit(["matmul(M=16,N=16,K=16)"], trials=400, strategy="random")
        self.wait(lambda js: js[jid]["trials_done"] >= 3, 120, "the job to measure")
        filler = os.path.join(mnt, "filler")
        if mounted:
            fill(filler)
        js = self.wait(lambda js: js[jid]["state"] in ("failed", "done", "cancelled"), 180, "the job to end")
        self.assertEqual(js[jid]["state"], "failed", js[jid])
        self.assertIn("the database could not be written", js[jid]["reason"])
        self.assertIn("full", js[jid]["reason"])
        self.assertIn("submit the job again", js[jid]["reason"])
        # The service serves on: the job list, the records, its queries.
        self.assertIsNone(d.proc.poll(), "the service died")
        self.assertIn("records", json.loads(self.tf("query", "stats", "--json", "--server", f"127.0.0.1:{d.port}").stdout))
        if not mounted:
            return
        # A new job while the disk is full: refused with the reason, not a crash.
        p = self.tf("submit", self.job_file(["matmul(M=8,N=8,K=8)"], trials=2), expect=None)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("full", p.stderr)
        self.assertIsNone(d.proc.poll(), "the service died")
        # Space again: the job's end is written (it is not resumed at the next start), and
        # new jobs run.
        os.remove(filler)
        time.sleep(2.5)
        d.stop()
        d = self.service("--local-boards", "1", name="tuner2")
        self.assertEqual(self.jobs()[jid]["state"], "failed")
        j2 = self.submit(["matmul(M=8,N=8,K=8)"], trials=3)
        self.wait(lambda js: js[j2]["state"] == "done", 120, "a job after the space came back")
        con = sqlite3.connect(self.db)
        self.assertEqual(con.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        con.close()
        # A start on a full disk says which file and what is wrong, and exits 2.
        d.stop()
        fill(filler)
        p = subprocess.run([TUNER, "--port", "0", "--db", self.db], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn(self.db, p.stderr)
        self.assertIn("KiB free", p.stderr)
        os.remove(filler)

    def test_refusals_name_the_problem_and_the_service_serves_on(self):
        users = self.write("users", "alice-token-0123456789 alice\nbob-token-0123456789ab bob\n"
                                    "root-token-0123456789a ops admin\n")
        alice = self.write("alice.token", "alice-token-0123456789\n")
        bob = self.write("bob.token", "bob-token-0123456789ab\n")
        ops = self.write("ops.token", "root-token-0123456789a\n")
        wrong = self.write("wrong.token", "not-a-token-0123456789\n")
        self.service("--users-file", users, "--local-boards", "1")
        p = self.tf("jobs", token=wrong, expect=2)
        self.assertIn("wrong token", p.stderr)
        p = self.tf("jobs", expect=2)
        self.assertIn("missing token", p.stderr)
        job = self.submit(SMALL[:1], token=alice, trials=5000, batch=2)
        # Refused by permission, not malformed: exit 1, as a cancel of a job already over
        # (README: 2 is a mistake in the request).
        p = self.tf("cancel", str(job), token=bob, expect=1)
        self.assertIn("belongs to alice", p.stderr)
        p = self.tf("cancel", "999", token=bob, expect=2)
        self.assertIn("no job 999", p.stderr)
        self.tf("cancel", str(job), token=ops)
        self.wait(lambda js: js[job]["state"] == "cancelled", 60, "the admin's cancel", token=alice)
        cases = [
            ("{not json", "not valid JSON"),
            ('{"workloads": ' + "[" * 100000 + "]" * 100000 + "}", "nested deeper than"),
            ('{"workloads": ["matmul(M=8,N=8,K=8)"], "trials": 1e999}', "refused"),
            ('{"workloads": ["matmul(M=8,N=8,K=8)"], "trials": -3}', '"trials" is -3'),
            ('{"workloads": ["nosuchop(M=8)"]}', "nosuchop"),
            ('{"workloads": ["matmul(M=8,N=8,K=8)"], "trails": 10}', 'unknown job field "trails"'),
            ('{"workloads": []}', '"workloads" must be a non-empty list'),
            ('{"workloads": ["matmul(M=8,N=8,K=8)", "matmul(M=8,K=8,N=8)"]}', "appears twice"),
            ('{"workloads": [{"workload": "matmul(M=8,N=8,K=8)", "weight": 0}]}', '"weight" is 0'),
            ('{"workloads": ["matmul(M=8,N=8,K=8)"], "strategy": "magic"}', "magic"),
            ('{"workloads": ["matmul(M=8,N=8,K=8)"], "key": "rpi4"}', "no tracker"),
            ('{"workloads": ["matmul(M=8,N=8,K=8)"], "target": "llvm -mtriple=aarch64-linux-gnu"}', "aarch64"),
        ]
        for text, needle in cases:
            p = self.tf("submit", self.write("bad.json", text), token=alice, expect=2)
            self.assertIn(needle, p.stderr, text)
        # The client's own checks.
        p = self.tf("submit", token=alice, expect=2)
        self.assertIn("-w WORKLOAD", p.stderr)
        p = self.tf("submit", "-w", SMALL[0], "--weight", "1", "--weight", "2", token=alice, expect=2)
        self.assertIn("--weight given 2 times for 1 workloads", p.stderr)
        p = self.tf("submit", "/nonexistent/job.json", token=alice, expect=2)
        self.assertIn("cannot read job file", p.stderr)
        p = self.tf("submit", self.job_file(SMALL[:1]), "-w", SMALL[1], token=alice, expect=2)
        self.assertIn("not both", p.stderr)
        p = self.tf("query", "best", "--server", "--db", self.db, token=alice, expect=2)
        self.assertIn("--db and --server exclude each other", p.stderr)
        p = self.tf("compile", "--server", "--no-db", "-w", SMALL[0], "-o", os.path.join(self.dir, "k.so"),
                    token=alice, expect=2)
        self.assertIn("excludes --db and --no-db", p.stderr)
        p = self.tf("query", "top", "--server", token=wrong, expect=2)
        self.assertIn("wrong token", p.stderr)
        p = self.tf("submit", "-w", SMALL[0], token=os.path.join(self.dir, "missing.token"), expect=2)
        self.assertIn("missing.token", p.stderr)
        server = self.env.pop("TUNEFARM_SERVER")
        p = self.tf("query", "stats", "--server", token=alice, expect=2)
        self.assertIn("$TUNEFARM_SERVER", p.stderr)
        self.env["TUNEFARM_SERVER"] = server
        # Still serving, and the jobs are as they were.
        self.assertEqual(len(self.jobs(alice)), 1)

    def test_mutual_tls_and_tokens_beyond_loopback(self):
        d = os.path.join(self.dir, "pki")
        pki = make_pki(d)
        users = self.write("users", "alice-token-0123456789 alice\n")
        alice = self.write("alice.token", "alice-token-0123456789\n")
        self.service("--host", "0.0.0.0", "--users-file", users, "--tls-cert", pki["server.pem"],
                     "--tls-key", pki["server.key"], "--tls-ca", pki["ca.pem"])
        tls = ["--tls-ca", pki["ca.pem"], "--tls-cert", pki["client.pem"], "--tls-key", pki["client.key"]]
        self.assertIn("(no jobs)", self.tf("jobs", *tls, token=alice).stdout)
        p = self.tf("jobs", token=alice, expect=None)  # plain text to a TLS port
        self.assertEqual(p.returncode, 1, p.stderr)
        p = self.tf("jobs", "--tls-ca", pki["ca.pem"], token=alice, expect=None)  # no client certificate
        self.assertEqual(p.returncode, 1, p.stderr)
        p = self.tf("jobs", *tls, expect=2)  # a certificate is not a token
        self.assertIn("missing token", p.stderr)

    def test_a_user_may_queue_only_so_many_jobs(self):
        self.service("--local-boards", "1", "--max-running", "1", "--max-jobs-per-user", "2")
        first = self.submit(SMALL[:1], trials=5000)
        self.submit(SMALL[1:2], trials=5000)
        p = self.tf("submit", "-w", SMALL[2], expect=1)
        self.assertIn("local has 2 jobs queued or running", p.stderr)
        self.tf("cancel", str(first))
        self.wait(lambda js: js[first]["state"] == "cancelled", 60, "the cancel")
        self.submit(SMALL[2:3], trials=5)  # room again

    def test_a_key_no_board_has_is_refused(self):
        tr, token, boards = self.farm(1)
        self.service("--tracker", f"127.0.0.1:{tr.port}", "--farm-token-file", token)
        p = self.tf("submit", "-w", SMALL[0], "--key", "rpi4", expect=2)
        self.assertIn("no board of key rpi4", p.stderr)
        self.assertIn("keys: cpu", p.stderr)
        p = self.tf("submit", "-w", SMALL[0], expect=2)  # no local boards by default with --tracker
        self.assertIn("no local boards", p.stderr)

    def test_the_daemon_refuses_bad_set_ups(self):
        def start(*args):
            db = [] if "--db" in args else ["--db", self.db]
            return subprocess.run([TUNER, "--port", "0", *db, *args], capture_output=True, text=True,
                                  timeout=30)
        p = start("--host", "0.0.0.0")
        self.assertEqual(p.returncode, 2)
        self.assertIn("requires --users-file", p.stderr + p.stdout)
        for text, needle in [("short alice\n", "shorter than 16"), ("0123456789abcdefgh\n", "needs a user name"),
                             ("0123456789abcdefgh alice root\n", 'unknown role "root"'),
                             ("0123456789abcdefgh alice\n0123456789abcdefgh bob\n", "given twice"),
                             ("# nobody\n", "names no user")]:
            p = start("--users-file", self.write("u", text))
            self.assertEqual(p.returncode, 2, text)
            self.assertIn(needle, p.stderr, text)
        p = start("--local-boards", "0")
        self.assertEqual(p.returncode, 2)
        self.assertIn("nowhere to measure", p.stderr)
        p = start("--users-file", self.write("open-users", "0123456789abcdefgh alice\n", mode=0o644),
                  "--local-boards", "0")
        self.assertEqual(p.returncode, 2)
        self.assertIn("users file", p.stderr)
        self.assertIn("is accessible by others (mode 0644): anyone who reads it can act as any user", p.stderr)
        p = start("--users-file", self.dir)
        self.assertEqual(p.returncode, 2)
        self.assertIn("is a directory", p.stderr)
        p = start("--db", "/nonexistent/dir/t.db")
        self.assertEqual(p.returncode, 2)
        self.assertIn("/nonexistent/dir", p.stderr)
        # No service there: a clear error, exit 1.
        self.env["TUNEFARM_SERVER"] = "127.0.0.1:1"
        p = self.tf("jobs", expect=1)
        self.assertIn("no tuning service answers there", p.stderr)


# CTest runs this file as two tests (tests/CMakeLists.txt), so that it is not the one long test
# the others wait for (8 minutes under ASan): `--part 1` runs the tests named here, `--part 2`
# every other one, so a new test runs in part 2 unless it is listed.
PART_1 = {
    "test_a_job_passes_a_new_best_on_to_its_siblings",
    "test_two_users_twenty_jobs_four_boards",
    "test_cancel_of_a_running_job_stops_it_and_keeps_its_records",
    "test_cancel_of_a_farm_job_still_waiting_for_a_board",
    "test_refusals_name_the_problem_and_the_service_serves_on",
}


def run_part(part):
    names = unittest.TestLoader().getTestCaseNames(ServiceTest)
    unknown = sorted(PART_1 - set(names))
    if unknown:
        sys.exit(f"service_test.py: PART_1 names tests that do not exist: {unknown}")
    suite = unittest.TestSuite(ServiceTest(n) for n in names if (n in PART_1) == (part == "1"))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    TUNEFARM, TUNER, TRACKER, RPC_SERVER = sys.argv[1:5]
    rest = sys.argv[5:]
    if rest[:1] == ["--part"]:
        if len(rest) < 2 or rest[1] not in ("1", "2"):
            sys.exit(f"service_test.py: --part takes 1 or 2, not {rest[1:2]}")
        run_part(rest[1])
    unittest.main(argv=sys.argv[:1] + rest, verbosity=2)
