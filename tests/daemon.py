"""Starting the project's daemons from Python tests (tests/service/service_test.py,
tests/farm/emulated_pi_test.py): a process with its output in a log, ready once the log
shows a pattern."""
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest


class DaemonTest(unittest.TestCase):
    """A test with a temporary folder (`dir`, and `db` in it) and daemons (`daemons`) that are
    killed when it ends."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.db = os.path.join(self.dir, "tuning.db")
        self.daemons = []

    def tearDown(self):
        for d in reversed(self.daemons):
            d.stop(signal.SIGKILL)
        self.tmp.cleanup()

    def write(self, name, text, mode=0o600):
        """A file of the test's folder with `text`, readable by its owner only by default."""
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path


def polls(timeout):
    """Yields until `timeout` seconds have passed, pausing between yields: 0.2 s at first,
    growing to 1 s. For loops that poll the CLI, which takes 0.3-0.4 s of a core to start
    under AddressSanitizer: a long wait polls once a second, a short one still ends promptly."""
    deadline, pause = time.time() + timeout, 0.2
    while time.time() < deadline:
        yield
        time.sleep(pause)
        pause = min(pause * 1.5, 1.0)


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate (CN alice) in folder
    `d` (created), made with openssl; returns {file name: path} of ca.pem, server.pem,
    server.key, client.pem, client.key."""
    os.makedirs(d)
    script = (
        "set -e; openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca; "
        "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext; "
        "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=tuner; "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 "
        "-extfile san.ext; "
        "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=alice; "
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2")
    subprocess.run(["bash", "-c", script], cwd=d, check=True, capture_output=True)
    return {k: os.path.join(d, k) for k in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


class Daemon:
    """A daemon started with its output in a log; `port` is the one it printed (the
    pattern's first group), 0 for a pattern without one."""

    def __init__(self, args, log, pattern=r"listening on [^:]+:(\d+)", timeout=30, env=None):
        self.log = log
        self.args = args
        with open(log, "w") as f:
            self.proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(pattern, self.text())
            if m:
                self.port = int(m.group(1)) if m.groups() else 0
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{args[0]} exited {self.proc.returncode}: {self.text()}")
            time.sleep(0.05)
        raise RuntimeError(f"{args[0]} did not start in {timeout} s: {self.text()}")

    def text(self):
        with open(self.log) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
