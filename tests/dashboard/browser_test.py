#!/usr/bin/env python3
"""The dashboard in a real browser (headless Debian Chromium through chromium-driver and
Selenium) against a real tuning service: a tracker with a board, the service's own local board,
two jobs running. The pages render, a job's tuning curves grow while it runs without the page
reloading, the numbers on the pages equal what `tunefarm jobs --json`, `query --json` and
`farm status --json` say, no page logs a console error, and a wrong token sees the login page
and no data. Screenshots land in SCREENSHOT_DIR for a person to look at.

usage: browser_test.py TUNEFARM TUNEFARM_TUNER TUNEFARM_TRACKER TUNEFARM_RPC_SERVER SCREENSHOT_DIR
"""
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from selenium import webdriver
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from daemon import Daemon  # noqa: E402 (tests/daemon.py)

TUNEFARM = TUNER = TRACKER = RPC_SERVER = SHOTS = None
ALICE = "alice-token-0123456789"
FAST = {"repeat": 3, "min_repeat_ms": 1, "retime_rounds": 1, "retime_top": 2}
LOCAL_JOB = ["matmul(M=32,N=32,K=32)", "matmul(M=16,N=64,K=32)"]
FARM_JOB = ["matmul(M=24,N=24,K=24)"]


def ms(sec):
    """The pages' format of a time per call (app.js ms())."""
    if not sec > 0:
        return "—"
    us = sec * 1e6
    # JavaScript's toPrecision / toFixed and Python's format round the same binary value the
    # same way (half up on its exact decimal expansion).
    if us < 100:
        return f"{us:#.3g} µs"
    if us < 1000:
        return f"{us:.0f} µs"
    m = sec * 1e3
    return (f"{m:.3f}" if m < 100 else f"{m:.1f}") + " ms"


def median(xs):
    v = sorted(xs)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def browser():
    o = webdriver.ChromeOptions()
    profile = tempfile.mkdtemp(prefix="tf-chromium-")
    atexit.register(shutil.rmtree, profile, True)  # after the browser quit (tearDown)
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1100", "--user-data-dir=" + profile):
        o.add_argument(a)
    o.binary_location = "/usr/bin/chromium"
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=DriverService("/usr/bin/chromedriver"), options=o)


class DashboardBrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.dir = cls.tmp.name
        cls.daemons = []
        token = cls.write("farm.token", "farm-token-0123456789abcdef\n")
        users = cls.write("users", f"{ALICE} alice\n")
        cls.alice = cls.write("alice.token", ALICE + "\n")
        tr = Daemon([TRACKER, "--port", "0", "--token-file", token, "--heartbeat-ms", "200"], os.path.join(d, "tracker.log"))
        cls.daemons.append(tr)
        cls.tracker = f"127.0.0.1:{tr.port}"
        cls.daemons.append(Daemon([RPC_SERVER, "--tracker", cls.tracker, "--key", "cpu", "--port", "0", "--token-file",
                                   token, "--board-id", "board-0", "--work-dir", d], os.path.join(d, "board.log")))
        cls.farm_token = token
        cls.svc = Daemon([TUNER, "--port", "0", "--http-port", "0", "--db", os.path.join(d, "tuning.db"), "--workers", "1",
                          "--users-file", users, "--tracker", cls.tracker, "--farm-token-file", token,
                          "--local-boards", "1", "--max-running", "2"], os.path.join(d, "tuner.log"))
        cls.daemons.append(cls.svc)
        cls.url = "http://127.0.0.1:" + re.search(r"dashboard at http://[^ ]*:(\d+)/", cls.svc.text()).group(1)
        cls.env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFARM_")}
        cls.env.update(TUNEFARM_SERVER=f"127.0.0.1:{cls.svc.port}", TUNEFARM_TOKEN_FILE=cls.alice)
        time.sleep(0.5)  # the board registers
        cls.local_job = cls.submit(LOCAL_JOB, trials=120)  # runs long enough to watch it grow
        cls.farm_job = cls.submit(FARM_JOB, trials=24, key="cpu")
        os.makedirs(SHOTS, exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        for d in reversed(cls.daemons):
            d.stop(signal.SIGKILL)
        cls.tmp.cleanup()

    @classmethod
    def write(cls, name, text):
        path = os.path.join(cls.dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
        return path

    @classmethod
    def tf(cls, *args):
        p = subprocess.run([TUNEFARM, *args], capture_output=True, text=True, timeout=300, env=cls.env)
        if p.returncode != 0:
            raise AssertionError(f"tunefarm {args}: {p.stderr}")
        return p.stdout

    @classmethod
    def submit(cls, workloads, **fields):
        job = cls.write(f"job{time.time_ns()}.json", json.dumps({"workloads": workloads, **FAST, **fields}))
        return int(json.loads(cls.tf("submit", job, "--json"))["job_id"])

    def cli_jobs(self):
        return {int(j["id"]): j for j in json.loads(self.tf("jobs", "--json"))["jobs"]}

    def wait_jobs_over(self):
        deadline = time.time() + 400
        while time.time() < deadline:
            jobs = self.cli_jobs()
            if all(j["state"] in ("done", "failed", "cancelled") for j in jobs.values()):
                for j in jobs.values():
                    self.assertEqual(j["state"], "done", j)
                return jobs
            time.sleep(0.5)
        self.fail("the jobs did not end")

    def setUp(self):
        self.b = browser()
        self.shown = []

    def tearDown(self):
        self.b.quit()

    def shot(self, name):
        path = os.path.join(SHOTS, name + ".png")
        self.b.save_screenshot(path)
        print(f"screenshot: {path}")

    def no_console_errors(self):
        errors = [e for e in self.b.get_log("browser") if e["level"] == "SEVERE"]
        self.assertEqual(errors, [], f"console errors on {self.b.current_url}")

    def until(self, what, pred, timeout=60):
        # A page that is being replaced (after a form is sent) has stale or missing elements:
        # asked again until the new one answers.
        return WebDriverWait(self.b, timeout, poll_frequency=0.2,
                             ignored_exceptions=(StaleElementReferenceException, NoSuchElementException)).until(
                                 lambda d: pred(), what)

    def log_in(self):
        self.b.get(self.url + "/jobs")
        self.assertIn("Log in", self.b.title)
        self.b.find_element(By.ID, "token").send_keys(ALICE)
        self.b.find_element(By.CSS_SELECTOR, "#login button").click()
        self.until("the jobs page", lambda: self.b.current_url.endswith("/jobs") and
                   self.b.find_elements(By.CSS_SELECTOR, "table.jobs tbody tr"))

    def rows(self, css):
        return self.b.find_elements(By.CSS_SELECTOR, css)

    # --- the tests (in name order: while the jobs run, then after) -----------------------

    def test_1_pages_render_and_a_running_jobs_curves_grow_without_a_reload(self):
        self.log_in()
        self.assertEqual(self.b.find_element(By.ID, "user").text, "alice")
        ids = [int(r.get_attribute("data-job-id")) for r in self.rows("table.jobs tbody tr")]
        self.assertEqual(sorted(ids), sorted([self.local_job, self.farm_job]))
        self.until("a running job", lambda: any(c.text == "running" for c in self.rows("table.jobs td.state")))
        self.no_console_errors()
        self.shot("jobs-running")

        self.b.get(f"{self.url}/jobs/{self.local_job}")
        self.b.execute_script("window.tfMarker = 'same page';")
        points = lambda: sum(int(s.get_attribute("data-points")) for s in self.rows(".curve svg"))
        self.until("the curves", lambda: len(self.rows(".curve svg")) == 2)
        first = points()
        self.until("the curves to grow", lambda: points() >= first + 3, timeout=180)
        self.assertEqual(self.b.execute_script("return window.tfMarker"), "same page", "the page reloaded")
        self.assertEqual(len(self.b.execute_script("return performance.getEntriesByType('navigation')")), 1)
        self.no_console_errors()
        self.shot("job-running")

        self.b.get(self.url + "/farm")
        self.until("the boards", lambda: self.rows("table.boards tbody tr"))
        status = json.loads(self.tf("farm", "status", "--tracker", self.tracker, "--token-file", self.farm_token,
                                    "--json"))
        for b in status["boards"]:
            row = self.b.find_element(By.CSS_SELECTOR, f'table.boards tr[data-board="{b["board_id"]}"]')
            cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
            self.assertEqual(cells[1], b["key"])
            self.assertEqual(cells[4], b["target"])
            self.assertIn(cells[2], ("free", "leased"))
        for k in status["keys"]:
            row = self.b.find_element(By.CSS_SELECTOR, f'table.keys tr[data-key="{k["key"]}"]')
            self.assertEqual(row.find_elements(By.TAG_NAME, "td")[1].text, str(k["total"]))
        self.assertTrue(self.rows('table.keys tr[data-key="local"]'))
        self.no_console_errors()
        self.shot("farm")

    def test_2_the_numbers_on_the_pages_equal_the_clis(self):
        jobs = self.wait_jobs_over()
        self.log_in()
        self.until("final states", lambda: all(c.text == "done" for c in self.rows("table.jobs td.state")))
        for row in self.rows("table.jobs tbody tr"):
            j = jobs[int(row.get_attribute("data-job-id"))]
            self.assertEqual(row.find_element(By.CSS_SELECTOR, ".trials").text,
                             f"{j['trials_done']}/{j['trials_total']}")
            best = row.find_element(By.CSS_SELECTOR, ".best").text
            self.assertEqual(best.replace(" (weighted)", ""), ms(j["weighted_best_s"]))
        self.no_console_errors()
        self.shot("jobs-done")

        history = json.loads(self.tf("query", "history", "--server", self.env["TUNEFARM_SERVER"], "--json"))
        for jid in (self.local_job, self.farm_job):
            j = jobs[jid]
            self.b.get(f"{self.url}/jobs/{jid}")
            self.until("the job", lambda: len(self.rows(".curve svg")) == len(j["tasks"]))
            self.assertEqual(self.b.find_element(By.CSS_SELECTOR, ".job-trials").text.split("\n")[-1],
                             f"{j['trials_done']} / {j['trials_total']}")
            for t in j["tasks"]:
                row = self.b.find_element(By.CSS_SELECTOR, f'table.tasks tr[data-workload="{t["workload"]}"]')
                self.assertEqual(row.find_element(By.CSS_SELECTOR, ".trials").text, str(t["trials"]))
                self.assertEqual(row.find_element(By.CSS_SELECTOR, ".best").text, ms(t["best_s"]))
                svg = self.b.find_element(By.CSS_SELECTOR, f'.curve svg[data-workload="{t["workload"]}"]')
                mine = [r for r in history if r["run"] in t["runs"] and r["workload"] == t["workload"]]
                self.assertEqual(int(svg.get_attribute("data-points")), len(mine), t["workload"])
                self.assertGreater(len(mine), 0)
            self.no_console_errors()
            self.shot(f"job-{jid}-done")

        self.b.get(self.url + "/results")
        self.until("the results", lambda: self.rows("table.best tbody tr"))
        rows = self.rows("table.best tbody tr")
        self.assertEqual(len(rows), len(LOCAL_JOB) + len(FARM_JOB))
        for row in rows:
            w, t = row.get_attribute("data-workload"), row.get_attribute("data-target")
            best = json.loads(self.tf("query", "best", "-w", w, "-t", t, "--server", self.env["TUNEFARM_SERVER"],
                                      "--json"))
            self.assertEqual(row.find_element(By.CSS_SELECTOR, ".best").text, ms(median(best["record"]["samples_s"])))
        self.no_console_errors()
        self.shot("results")

    def test_3_a_wrong_token_sees_the_login_page_and_no_data(self):
        self.b.get(self.url + "/jobs")
        self.assertIn("Log in", self.b.title)
        self.b.find_element(By.ID, "token").send_keys("wrong-token-00000000000")
        self.b.find_element(By.CSS_SELECTOR, "#login button").click()
        self.until("the refusal", lambda: "wrong token" in self.b.find_element(By.ID, "login-error").text)
        page = self.b.page_source
        for w in LOCAL_JOB + FARM_JOB + ["board-0", "alice"]:
            self.assertNotIn(w, page)
        self.assertFalse(self.rows("table"))
        status = self.b.execute_script(
            "const r = await fetch('/api/v1/jobs'); return [r.status, await r.text()];")
        self.assertEqual(status[0], 401)
        self.assertNotIn("matmul", status[1])
        for path in ("/farm", "/results", f"/jobs/{self.local_job}"):
            self.b.get(self.url + path)
            self.assertIn("Log in", self.b.title, path)
            self.assertNotIn("matmul", self.b.page_source)
        self.shot("login-wrong-token")


if __name__ == "__main__":
    TUNEFARM, TUNER, TRACKER, RPC_SERVER, SHOTS = sys.argv[1:6]
    del sys.argv[1:6]
    for tool in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
        if not shutil.which(tool):
            sys.exit(f"error: {tool} is missing: run scripts/install-deps.sh (packages chromium, chromium-driver)")
    unittest.main(verbosity=2)
