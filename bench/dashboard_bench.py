#!/usr/bin/env python3
"""The dashboard's two goals (docs/dashboard.md), measured with real daemons and headless
Debian Chromium on this machine:

1. First paint of the jobs page with 1,000 jobs and 2,000 boards in the service: a tracker
   holding --boards simulated boards (bench_fake_boards, registered and heartbeating over
   gRPC), a service whose database holds --jobs jobs (one real job, measured here, cloned into
   ended jobs of 20 users), each page loaded --rounds times. Prints Chromium's
   first-contentful-paint and the time until the page's table is drawn (the page's own
   `tf-rendered` mark), both from navigation start, median and max, against the 300 ms goal;
   and the server's time for the JSON behind each page.
2. The service's tuning throughput with five browsers open: the same job (one workload,
   --trials, fixed seed, fresh database each time) with no browser, with five headless
   Chromiums on its live page, and with five pollers sending the page's requests without a
   browser (this machine runs the browsers on the service's two cores; the pollers show the
   service's own share). Modes interleaved round by round; prints trials per second and each
   mode's ratio to the runs without.

usage: dashboard_bench.py [--build build] [--jobs 1000] [--boards 2000] [--rounds 10]
                          [--throughput-rounds 3] [--trials 64] [--skip-paint] [--skip-throughput]
"""
import argparse
import http.client
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from daemon import Daemon  # noqa: E402 (tests/daemon.py)

FAST = {"repeat": 3, "min_repeat_ms": 1, "retime_rounds": 1, "retime_top": 2}


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    o = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
              "--user-data-dir=" + tempfile.mkdtemp(prefix="tf-bench-chromium-")):
        o.add_argument(a)
    o.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)


class Bench:
    def __init__(self, a):
        self.a = a
        self.bin = os.path.join(a.build, "bin")
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.daemons = []

    def path(self, name):
        return os.path.join(self.dir, name)

    def tf(self, server, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFARM_")}
        env["TUNEFARM_SERVER"] = server
        p = subprocess.run([os.path.join(self.bin, "tunefarm"), *args], capture_output=True, text=True, env=env,
                           timeout=600)
        if p.returncode != 0:
            sys.exit(f"error: tunefarm {' '.join(args)}: {p.stderr}")
        return p.stdout

    def service(self, db, *extra, name="tuner"):
        d = Daemon([os.path.join(self.bin, "tunefarm-tuner"), "--port", "0", "--http-port", "0", "--db", db,
                    "--workers", "1", *extra], self.path(name + ".log"))
        self.daemons.append(d)
        d.http = int(re.search(r"dashboard at http://[^ ]*:(\d+)/", d.text()).group(1))
        d.server = f"127.0.0.1:{d.port}"
        return d

    def run_job(self, svc, workloads, trials, seed=7):
        job = self.path(f"job{time.time_ns()}.json")
        with open(job, "w") as f:
            json.dump({"workloads": workloads, "trials": trials, "seed": seed, **FAST}, f)
        return int(json.loads(self.tf(svc.server, "submit", job, "--json"))["job_id"])

    def wait_job(self, svc, jid):
        while True:
            js = {int(j["id"]): j for j in json.loads(self.tf(svc.server, "jobs", "--json"))["jobs"]}
            if js[jid]["state"] in ("done", "failed", "cancelled"):
                if js[jid]["state"] != "done":
                    sys.exit(f"error: job {jid} {js[jid]['state']}: {js[jid]['reason']}")
                return js[jid]
            time.sleep(0.2)

    def stop(self, d):
        d.stop(signal.SIGTERM)
        self.daemons.remove(d)

    # --- 1: first paint ------------------------------------------------------------------

    def fill_jobs(self, db):
        """One real job, then clones of its row until the database holds --jobs."""
        svc = self.service(db, "--local-boards", "1", name="seed")
        self.wait_job(svc, self.run_job(svc, ["matmul(M=16,N=16,K=16)", "matmul(M=8,N=32,K=16)"], 8))
        self.stop(svc)
        con = sqlite3.connect(db)
        row = con.execute("SELECT priority, spec, progress, submitted_at, started_at, finished_at FROM jobs").fetchone()
        states = ["done", "done", "done", "failed", "cancelled"]
        con.executemany(
            "INSERT INTO jobs (user, state, priority, spec, progress, reason, submitted_at, started_at, finished_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(f"user{i % 20}", states[i % 5], row[0], row[1], row[2], "" if i % 5 < 3 else "bench clone",
              row[3] - 60 * (self.a.jobs - i), row[4] - 60 * (self.a.jobs - i), row[5] - 60 * (self.a.jobs - i))
             for i in range(1, self.a.jobs)])
        con.commit()
        n = con.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
        con.close()
        return n

    def api_ms(self, port, path, reps=10):
        """Median time of GET path, each after the dashboard's 0.5-1 s cache expired."""
        times = []
        for _ in range(reps):
            time.sleep(1.1)
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            t = time.perf_counter()
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            times.append((time.perf_counter() - t) * 1e3)
            c.close()
        return statistics.median(times), len(body)

    def first_paint(self):
        token = self.path("farm.token")
        with open(token, "w") as f:
            f.write("farm-token-0123456789abcdef\n")
        os.chmod(token, 0o600)
        tr = Daemon([os.path.join(self.bin, "tunefarm-tracker"), "--port", "0", "--token-file", token,
                     "--heartbeat-ms", "20000", "--board-timeout-ms", "120000"], self.path("tracker.log"))
        self.daemons.append(tr)
        boards = Daemon([os.path.join(self.a.build, "bench", "bench_fake_boards"), "--tracker", f"127.0.0.1:{tr.port}",
                         "--token-file", token, "--boards", str(self.a.boards)], self.path("boards.log"),
                        pattern=r"registered (\d+) boards", timeout=300)
        self.daemons.append(boards)
        db = self.path("paint.db")
        jobs = self.fill_jobs(db)
        svc = self.service(db, "--tracker", f"127.0.0.1:{tr.port}", "--farm-token-file", token, "--local-boards", "1")
        listed = len(json.loads(self.tf(svc.server, "jobs", "--json"))["jobs"])
        print(f"service: {listed} jobs (database {jobs}), tracker: {boards.port} simulated boards")
        for path in ("/api/v1/jobs", "/api/v1/jobs?view=summary", "/api/v1/farm"):
            t, size = self.api_ms(svc.http, path)
            print(f"server: GET {path}: {t:.1f} ms median of 10, not cached ({size / 1024:.0f} KiB)")
        b = browser()
        try:
            for page in ("/jobs", "/farm"):
                fcp, drawn = [], []
                for r in range(self.a.rounds + 1):
                    b.get(f"http://127.0.0.1:{svc.http}{page}")
                    t = b.execute_async_script("""
                        const done = arguments[arguments.length - 1];
                        const check = () => {
                          const m = performance.getEntriesByName('tf-rendered');
                          const p = performance.getEntriesByName('first-contentful-paint');
                          const f = performance.getEntriesByName('tf-fetched');
                          if (m.length && p.length) done([p[0].startTime, m[0].startTime, f.length ? f[0].startTime : 0]);
                          else setTimeout(check, 20);
                        };
                        check();""")
                    rows = b.execute_script("return document.querySelectorAll('tbody tr').length")
                    if r == 0:
                        print(f"{page}: first (cold) load: first-contentful-paint {t[0]:.0f} ms, table of {rows} rows "
                              f"drawn at {t[1]:.0f} ms")
                        continue
                    print(f"  fetched {t[2]:.0f} drawn {t[1]:.0f}")
                    fcp.append(t[0])
                    drawn.append(t[1])
                print(f"{page}: {self.a.rounds} loads: first-contentful-paint median {statistics.median(fcp):.0f} ms "
                      f"(max {max(fcp):.0f}); table drawn median {statistics.median(drawn):.0f} ms "
                      f"(max {max(drawn):.0f}); goal 300 ms: ratio goal/drawn {300 / statistics.median(drawn):.2f}")
        finally:
            b.quit()
        self.stop(svc)
        for d in (boards, tr):
            self.stop(d)

    # --- 2: throughput with browsers open --------------------------------------------------

    def pollers(self, port, jid, n, stop):
        def poll():
            last = 0
            while not stop.is_set():
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                c.request("GET", f"/api/v1/jobs/{jid}")
                c.getresponse().read()
                c.request("GET", f"/api/v1/jobs/{jid}/records?after_id={last}")
                last = int(json.loads(c.getresponse().read())["last_id"])
                c.close()
                stop.wait(1.0)
        ts = [threading.Thread(target=poll) for _ in range(n)]
        for t in ts:
            t.start()
        return ts

    def throughput(self):
        w = ["matmul(M=96,N=96,K=96)"]
        results = {"none": [], "pollers": [], "browsers": []}
        order = ["none", "browsers", "pollers"]
        for r in range(self.a.throughput_rounds):
            for mode in (order if r % 2 == 0 else list(reversed(order))):
                db = self.path(f"tp-{r}-{mode}.db")
                svc = self.service(db, "--local-boards", "1", name=f"tp-{r}-{mode}")
                bs, ts, stop = [], [], threading.Event()
                if mode == "browsers":
                    bs = [browser() for _ in range(5)]
                    for b in bs:
                        b.get(f"http://127.0.0.1:{svc.http}/jobs")
                jid = self.run_job(svc, w, self.a.trials)
                if mode == "browsers":
                    for b in bs:
                        b.get(f"http://127.0.0.1:{svc.http}/jobs/{jid}")
                elif mode == "pollers":
                    ts = self.pollers(svc.http, jid, 5, stop)
                j = self.wait_job(svc, jid)
                stop.set()
                for t in ts:
                    t.join()
                for b in bs:
                    b.quit()
                rate = int(j["trials_done"]) / (j["finished_at"] - j["started_at"])
                results[mode].append(rate)
                print(f"round {r + 1} {mode:8s}: {j['trials_done']} trials in "
                      f"{j['finished_at'] - j['started_at']:.1f} s = {rate:.2f} trials/s")
                self.stop(svc)
        base = statistics.median(results["none"])
        for mode in ("pollers", "browsers"):
            m = statistics.median(results[mode])
            print(f"throughput with five {mode} / without: {m / base:.3f} (medians {m:.2f} / {base:.2f} trials/s; "
                  f"runs without spread {min(results['none']):.2f}-{max(results['none']):.2f})")

    def close(self):
        for d in reversed(self.daemons):
            d.stop(signal.SIGKILL)
        self.tmp.cleanup()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--boards", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--throughput-rounds", type=int, default=3)
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-paint", action="store_true")
    a = p.parse_args()
    for n, v in (("--jobs", a.jobs), ("--boards", a.boards), ("--rounds", a.rounds), ("--trials", a.trials)):
        if v < 1:
            p.error(f"{n} {v} must be at least 1")
    for tool in ("bin/tunefarm", "bin/tunefarm-tuner", "bin/tunefarm-tracker", "bench/bench_fake_boards"):
        if not os.access(os.path.join(a.build, tool), os.X_OK):
            sys.exit(f"error: {os.path.join(a.build, tool)} is missing: build first (scripts/build.sh)")
    b = Bench(a)
    try:
        if not a.skip_paint:
            b.first_paint()
        if not a.skip_throughput:
            b.throughput()
    finally:
        b.close()


if __name__ == "__main__":
    main()
