#!/usr/bin/env python3
"""The dashboard's HTTP side with a real tunefarm-tuner on loopback: who may see what (no
users file, bearer tokens, the login cookie), the JSON endpoints against the CLI's answers,
TLS and mutual TLS, and hostile requests (oversized, malformed, slow, too many, wrong paths and
values), each answered with a clear status and a message while the service serves on.

usage: http_test.py TUNEFARM TUNEFARM_TUNER
"""
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from daemon import Daemon, DaemonTest, make_pki, polls  # noqa: E402 (tests/daemon.py)

TUNEFARM = TUNER = None
ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
FAST = {"repeat": 3, "min_repeat_ms": 1, "retime_rounds": 1, "retime_top": 2}


class Service:
    """tunefarm-tuner with its dashboard; `port` is the gRPC port, `http` the dashboard's."""

    def __init__(self, test, *extra, name="tuner"):
        self.d = Daemon([TUNER, "--port", "0", "--http-port", "0", "--db", test.db, "--workers", "1", *extra],
                        os.path.join(test.dir, name + ".log"))
        test.daemons.append(self.d)
        m = re.search(r"dashboard at (https?)://[^ ]*:(\d+)/", self.d.text())
        test.assertIsNotNone(m, self.d.text())
        self.scheme, self.http = m.group(1), int(m.group(2))
        self.port = self.d.port


class DashboardHttpTest(DaemonTest):
    def users(self):
        return self.write("users", f"{ALICE} alice\n{BOB} bob admin\n")

    def tf(self, s, *args, token=None, expect=0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFARM_")}
        env["TUNEFARM_SERVER"] = f"127.0.0.1:{s.port}"
        if token:
            env["TUNEFARM_TOKEN_FILE"] = self.write("cli.token", token + "\n")
        p = subprocess.run([TUNEFARM, *args], capture_output=True, text=True, timeout=300, env=env)
        if expect is not None:
            self.assertEqual(p.returncode, expect, f"{args}:\n{p.stdout}\n{p.stderr}")
        return p

    def request(self, s, method, path, headers=None, body=None, context=None):
        """(status, headers as a dict of lists, body as text)."""
        if s.scheme == "https":
            c = http.client.HTTPSConnection("127.0.0.1", s.http, timeout=30, context=context)
        else:
            c = http.client.HTTPConnection("127.0.0.1", s.http, timeout=30)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            hs = {}
            for k, v in r.getheaders():
                hs.setdefault(k.lower(), []).append(v)
            return r.status, hs, r.read().decode()
        finally:
            c.close()

    def get_json(self, s, path, token=None, expect=200, **kw):
        status, hs, body = self.request(s, "GET", path, {"Authorization": f"Bearer {token}"} if token else {}, **kw)
        self.assertEqual(status, expect, f"GET {path}: {body[:500]}")
        self.assertTrue(hs["content-type"][0].startswith("application/json"), hs)
        return json.loads(body)

    def submit_and_finish(self, s, workloads, token=None, trials=6):
        job = self.write("job.json", json.dumps({"workloads": workloads, "trials": trials, **FAST}))
        jid = int(json.loads(self.tf(s, "submit", job, "--json", token=token).stdout)["job_id"])
        for _ in polls(240):
            jobs = json.loads(self.tf(s, "jobs", "--json", token=token).stdout)["jobs"]
            state = [j for j in jobs if int(j["id"]) == jid][0]["state"]
            if state in ("done", "failed", "cancelled"):
                self.assertEqual(state, "done", jobs)
                return jid
        self.fail("the job did not finish")

    # --- who may see what ---------------------------------------------------------------

    def test_without_a_users_file_everyone_is_local_and_the_endpoints_match_the_cli(self):
        s = Service(self, "--local-boards", "1")
        self.assertEqual(self.get_json(s, "/api/v1/whoami"), {"user": "local", "admin": False, "login": False})
        jid = self.submit_and_finish(s, ["matmul(M=16,N=16,K=16)", "matmul(M=8,N=32,K=16)"])
        # The job list is `tunefarm jobs --json`, field for field (it is the same message).
        self.assertEqual(self.get_json(s, "/api/v1/jobs"), json.loads(self.tf(s, "jobs", "--json").stdout))
        job = self.get_json(s, f"/api/v1/jobs/{jid}")
        self.assertEqual(int(job["id"]), jid)
        self.assertEqual(len(job["tasks"]), 2)
        for t in job["tasks"]:
            self.assertEqual(len(t["runs"]), 1, t)  # one run per task of a job that ran once
        # The job's records: those of its runs, in id order, equal to `query history`'s.
        recs = self.get_json(s, f"/api/v1/jobs/{jid}/records")
        self.assertFalse(recs["more"])
        ids = [r["id"] for r in recs["records"]]
        self.assertEqual(ids, sorted(ids))
        runs = {u for t in job["tasks"] for u in t["runs"]}
        cli = json.loads(self.tf(s, "query", "history", "--server", f"127.0.0.1:{s.port}", "--json").stdout)
        self.assertEqual(sorted(r["id"] for r in cli if r["run"] in runs), ids)
        self.assertGreater(len(ids), 6)
        # Catching up: after_id returns only newer records; limit pages them.
        half = ids[len(ids) // 2]
        later = self.get_json(s, f"/api/v1/jobs/{jid}/records?after_id={half}")
        self.assertEqual([r["id"] for r in later["records"]], [i for i in ids if i > half])
        page = self.get_json(s, f"/api/v1/jobs/{jid}/records?limit=3")
        self.assertTrue(page["more"])
        self.assertEqual([r["id"] for r in page["records"]], ids[:3])
        self.assertEqual(int(page["last_id"]), ids[2])
        # Results: best per pair and one lookup equal the CLI's.
        pairs = [json.loads(l) for l in self.get_json(s, "/api/v1/best-per-pair")["records_json"]]
        self.assertEqual(len(pairs), 2)
        for p in pairs:
            best = json.loads(self.tf(s, "query", "best", "-w", p["workload"], "-t", p["target"], "--server",
                                      f"127.0.0.1:{s.port}", "--json").stdout)
            self.assertEqual(best["record"]["id"], p["id"])
            q = urllib.parse.urlencode({"workload": p["workload"], "target": p["target"]})
            b = self.get_json(s, f"/api/v1/best?{q}")
            self.assertEqual(json.loads(b["record_json"])["id"], p["id"])
            self.assertEqual(b["tier"], "exact")
        stats = self.get_json(s, "/api/v1/stats")
        self.assertEqual(int(stats["records"]), len(cli))
        runs_reply = self.get_json(s, "/api/v1/runs")
        self.assertEqual({r["uuid"] for r in runs_reply["runs"]}, runs)
        top = self.get_json(s, "/api/v1/top-k?k=2&" + urllib.parse.urlencode({"workload": pairs[0]["workload"]}))
        # The two fastest error-free records, or all there are: a job shares its trials between
        # its workloads by measured time, so on a loaded machine one may get a single config.
        ok = {r["id"] for r in cli if r["workload"] == pairs[0]["workload"] and r["error_code"] == "ok"}
        got = [json.loads(t)["id"] for t in top["records_json"]]
        self.assertEqual(len(got), min(2, len(ok)))
        self.assertTrue(set(got) <= ok and ok, (got, ok))
        self.assertEqual(self.get_json(s, "/api/v1/models"), {"models": []})
        farm = self.get_json(s, "/api/v1/farm")
        self.assertEqual((farm["tracker"], farm["local_boards"]), ("", 1))
        # The download: JSON lines, one record each, as `query history --json` lists them.
        status, hs, body = self.request(s, "GET", "/api/v1/history")
        self.assertEqual(status, 200)
        self.assertEqual(hs["content-type"], ["application/x-ndjson"])
        self.assertIn("attachment", hs["content-disposition"][0])
        lines = [json.loads(l) for l in body.splitlines()]
        self.assertEqual(sorted(r["id"] for r in lines), sorted(r["id"] for r in cli))
        status, _, body = self.request(s, "GET", "/api/v1/history?run=" + sorted(runs)[0])
        self.assertEqual(status, 200)
        self.assertTrue(all(json.loads(l)["run"] == sorted(runs)[0] for l in body.splitlines()))
        # Pages render for everyone here, with the security headers.
        for path in ("/jobs", "/farm", "/results", f"/jobs/{jid}"):
            status, hs, body = self.request(s, "GET", path)
            self.assertEqual(status, 200, path)
            self.assertIn('<script src="/static/app.js">', body)
            self.assertIn("default-src 'self'", hs["content-security-policy"][0])
            self.assertEqual(hs["x-frame-options"], ["DENY"])
        status, hs, _ = self.request(s, "GET", "/")
        self.assertEqual((status, hs["location"]), (303, ["/jobs"]))

    def test_tokens_cookies_and_the_login_page(self):
        s = Service(self, "--users-file", self.users(), "--local-boards", "1")
        # Nothing without a token: the API says 401, a page is the login form with no data.
        status, hs, body = self.request(s, "GET", "/api/v1/jobs")
        self.assertEqual(status, 401)
        self.assertIn("needs a token", json.loads(body)["error"])
        self.assertEqual(hs["www-authenticate"], ["Bearer"])
        for path in ("/api/v1/farm", "/api/v1/history", "/api/v1/jobs/1/records"):
            status, _, body = self.request(s, "GET", path)
            self.assertEqual(status, 401, path)
            self.assertNotIn("matmul", body)
        for path in ("/jobs", "/farm", "/results", "/jobs/1"):
            status, hs, body = self.request(s, "GET", path)
            self.assertEqual((status, hs["location"]), (303, ["/login?next=" + path]), path)
            self.assertNotIn("app.js", body)
        status, _, body = self.request(s, "GET", "/login?next=/farm")
        self.assertEqual(status, 200)
        self.assertIn('action="/login"', body)
        self.assertIn('name="next" value="/farm"', body)
        # A wrong bearer token, or one of the right length but wrong: 401 saying so.
        for bad in ("nope", ALICE[:-1] + "x", ""):
            status, _, body = self.request(s, "GET", "/api/v1/jobs", {"Authorization": f"Bearer {bad}"})
            self.assertEqual(status, 401, bad)
        self.assertEqual(self.get_json(s, "/api/v1/whoami", token=ALICE), {"user": "alice", "admin": False, "login": True})
        self.assertTrue(self.get_json(s, "/api/v1/whoami", token=BOB)["admin"])
        # The login form: a wrong token is 401 with the form again and no cookie.
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        status, hs, body = self.request(s, "POST", "/login", form, "token=wrong-token-0000000000")
        self.assertEqual(status, 401)
        self.assertIn("wrong token", body)
        self.assertNotIn("set-cookie", hs)
        # The right one sets an HttpOnly, SameSite=Strict cookie (not Secure over plain HTTP).
        status, hs, _ = self.request(s, "POST", "/login", form, "token=" + urllib.parse.quote(ALICE))
        self.assertEqual((status, hs["location"]), (303, ["/jobs"]))
        cookie = hs["set-cookie"][0]
        # Where a login goes on to: a path of the dashboard, never another site.
        for nxt, to in (("/farm", "/farm"), ("//evil.example/x", "/jobs"), ("http://evil.example", "/jobs"),
                        ("/\\evil.example", "/jobs"), ("/a\r\nSet-Cookie: x=1", "/jobs")):
            status, hs2, _ = self.request(s, "POST", "/login", form,
                                          urllib.parse.urlencode({"token": ALICE, "next": nxt}))
            self.assertEqual((status, hs2["location"]), (303, [to]), nxt)
        for flag in ("HttpOnly", "SameSite=Strict", "Path=/"):
            self.assertIn(flag, cookie)
        self.assertNotIn("Secure", cookie)
        session = cookie.split(";")[0]
        status, _, body = self.request(s, "GET", "/api/v1/whoami", {"Cookie": "other=1; " + session})
        self.assertEqual((status, json.loads(body)["user"]), (200, "alice"))
        status, _, body = self.request(s, "GET", "/jobs", {"Cookie": session})
        self.assertEqual(status, 200)
        self.assertIn("alice", body)
        # A forged session id is not a session.
        status, _, _ = self.request(s, "GET", "/api/v1/jobs", {"Cookie": "tf_session=" + "0" * 64})
        self.assertEqual(status, 401)
        # A form posted from another site is refused.
        status, _, body = self.request(s, "POST", "/login", {**form, "Origin": "http://evil.example"},
                                       "token=" + ALICE)
        self.assertEqual(status, 403)
        self.assertIn("evil.example", body)
        # Log out: the session ends for good.
        status, hs, _ = self.request(s, "POST", "/logout", {"Cookie": session})
        self.assertEqual((status, hs["location"]), (303, ["/login"]))
        self.assertIn("Max-Age=0", hs["set-cookie"][0])
        status, _, _ = self.request(s, "GET", "/api/v1/whoami", {"Cookie": session})
        self.assertEqual(status, 401)
        # Nothing on the dashboard changes the service: no method but GET on its data.
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, hs, body = self.request(s, method, "/api/v1/jobs/1", {"Authorization": f"Bearer {BOB}"})
            self.assertEqual(status, 405, method)
            self.assertEqual(hs["allow"], ["GET"])
        status, hs, _ = self.request(s, "GET", "/logout", {"Authorization": f"Bearer {ALICE}"})
        self.assertEqual((status, hs["allow"]), (405, ["POST"]))
        status, hs, _ = self.request(s, "PUT", "/login")
        self.assertEqual((status, hs["allow"]), (405, ["GET, POST"]))

    def test_bad_requests_get_a_status_and_a_message_naming_the_value(self):
        s = Service(self, "--local-boards", "1")
        for path, status, needle in [
            ("/api/v1/jobs/0", 404, '"0"'),
            ("/api/v1/jobs/abc", 404, '"abc"'),
            ("/api/v1/jobs/99999999999999999999999", 404, "99999999999999999999999"),
            ("/api/v1/jobs/7", 404, "no job 7"),
            ("/jobs/7", 404, "no job 7"),
            ("/api/v1/jobs/7/nothing", 404, "no endpoint /api/v1/jobs/7/nothing"),
            ("/api/v1/nothing", 404, "/api/v1/nothing"),
            ("/nothing/../etc/passwd", 404, "no page"),
            ("/static/../../etc/passwd", 404, "no asset"),
            ("/static/page.html", 404, "no asset page.html"),
            ("/api/v1/top-k?k=abc", 400, '"abc"'),
            ("/api/v1/top-k?k=0", 400, '"0"'),
            ("/api/v1/history?limit=-1", 400, '"-1"'),
            ("/api/v1/history?after_id=1e9", 400, '"1e9"'),
            ("/api/v1/best", 400, "workload"),
            ("/api/v1/best?workload=conv9d(Q=1)", 400, "conv9d"),
            ("/api/v1/best?workload=matmul(M=1,N=1,K=1)&target=sparc", 400, "sparc"),
            ("/api/v1/history?workload=" + "x" * 5000, 400, "5000 characters"),
        ]:
            got, _, body = self.request(s, "GET", path)
            self.assertEqual(got, status, f"{path}: {body[:300]}")
            self.assertIn(needle, json.loads(body)["error"], path)
        # Oversized and malformed requests: 431, 413, 400, and the service serves on.
        got, _, body = self.request(s, "GET", "/jobs", {"X-Big": "y" * 20000})
        self.assertEqual(got, 431, body)
        got, _, body = self.request(s, "POST", "/login", {"Content-Type": "application/x-www-form-urlencoded"},
                                    "token=" + "z" * 40000)
        self.assertEqual(got, 413, body)
        with socket.create_connection(("127.0.0.1", s.http), timeout=10) as c:
            c.sendall(b"THIS IS NOT HTTP\r\n\r\n")
            self.assertIn(b" 400 ", c.recv(4096))
        with socket.create_connection(("127.0.0.1", s.http), timeout=10) as c:
            c.sendall(b"GET /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
            self.assertIn(b" 400 ", c.recv(4096))
        # A connection that sends half a request is closed after the request timeout (10 s)
        # without a reply; the others are served meanwhile.
        slow = socket.create_connection(("127.0.0.1", s.http), timeout=30)
        slow.sendall(b"GET /jobs HTTP/1.1\r\nHost: x\r\n")
        t0 = time.time()
        self.assertEqual(self.request(s, "GET", "/api/v1/whoami")[0], 200)
        self.assertEqual(slow.recv(4096), b"")
        waited = time.time() - t0
        self.assertGreater(waited, 8)
        self.assertLess(waited, 20)
        slow.close()
        # Many silent connections at once: a new one closes the idlest silent one instead of
        # being refused, so the held ones go (oldest first) and a real request is served.
        held = [socket.create_connection(("127.0.0.1", s.http), timeout=10) for _ in range(300)]
        try:
            time.sleep(0.5)
            self.assertEqual(self.request(s, "GET", "/api/v1/whoami")[0], 200)
            held[0].settimeout(5)
            self.assertEqual(held[0].recv(4096), b"", "the oldest silent connection is closed")
        finally:
            for c in held:
                c.close()
        time.sleep(0.5)
        self.assertEqual(self.request(s, "GET", "/api/v1/whoami")[0], 200)
        # A kept-alive connection serves request after request.
        c = http.client.HTTPConnection("127.0.0.1", s.http, timeout=10)
        for _ in range(3):
            c.request("GET", "/api/v1/whoami")
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            r.read()
        c.close()
        self.assertIsNone(s.d.proc.poll(), "the service died")

    def test_random_requests_never_stop_the_service(self):
        """Requests made of random pieces (methods, paths with stray escapes and bytes, query
        strings, headers, cookies, bodies): each gets a status of the documented set or a
        closed connection, and the service serves on."""
        import random
        rnd = random.Random(1234)
        s = Service(self, "--users-file", self.users(), "--local-boards", "1")
        pieces = ["/", "/api/v1/", "jobs", "farm", "results", "login", "logout", "static", "app.js", "history",
                  "records", "best", "top-k", "%", "%2", "%00", "%2e%2e", "..", "//", "?", "&", "=", "+", "#",
                  "\xff", "\x01", "after_id=", "limit=", "k=", "-1", "99999999999999999999", "1", "abc", ";"]
        methods = [b"GET", b"POST", b"HEAD", b"PUT", b"OPTIONS", b"G\x00T", b"", b"GET GET"]
        seen = set()
        for i in range(2000):
            path = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 8)))
            head = [rnd.choice(methods) + b" " + path.encode("latin-1", "replace") + b" HTTP/1." +
                    rnd.choice([b"1", b"0", b"9"])]
            head.append(b"Host: 127.0.0.1")
            if rnd.random() < 0.5:
                head.append(b"Cookie: tf_session=" + bytes(rnd.randrange(32, 127) for _ in range(rnd.randint(0, 80))))
            if rnd.random() < 0.3:
                head.append(b"Authorization: Bearer " + (ALICE.encode() if rnd.random() < 0.5 else b"x" * 30))
            body = bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 200)))
            if rnd.random() < 0.5:
                head.append(b"Content-Length: %d" % len(body))
            if rnd.random() < 0.2:
                head.append(b"Transfer-Encoding: chunked")
            if rnd.random() < 0.1:
                head.append(bytes(rnd.randrange(256) for _ in range(40)))
            with socket.create_connection(("127.0.0.1", s.http), timeout=15) as c:
                try:
                    c.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
                    c.shutdown(socket.SHUT_WR)
                    reply = c.recv(64)
                except (ConnectionResetError, BrokenPipeError):
                    reply = b""
            if reply:
                m = re.match(rb"HTTP/1\.[01] (\d{3}) ", reply)
                self.assertIsNotNone(m, (head, reply))
                status = int(m.group(1))
                self.assertIn(status, {200, 303, 400, 401, 403, 404, 405, 413, 431, 501}, head)
                seen.add(status)
        self.assertIsNone(s.d.proc.poll(), "the service died")
        self.assertEqual(self.get_json(s, "/api/v1/whoami", token=ALICE)["user"], "alice")
        self.assertGreaterEqual(len(seen), 4, seen)

    # --- hostile framing, sizes and slow clients ------------------------------------------

    def raw(self, s, data, timeout=20):
        """Sends `data` on a fresh connection and half-closes it: (status or None, the reply)."""
        with socket.create_connection(("127.0.0.1", s.http), timeout=timeout) as c:
            try:
                c.sendall(data)
                c.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass
            reply = b""
            try:
                while chunk := c.recv(65536):
                    reply += chunk
            except ConnectionResetError:
                pass
        m = re.match(rb"HTTP/1\.[01] (\d{3}) ", reply)
        return (int(m.group(1)) if m else None), reply

    def proc_status(self, s, field):
        """A field of /proc/PID/status of the service, in KiB."""
        with open(f"/proc/{s.d.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        self.fail(field)

    def test_framing_two_readers_could_read_differently_and_oversized_parts_are_refused(self):
        s = Service(self, "--users-file", self.users(), "--local-boards", "1")
        form = b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        te = form + b"Transfer-Encoding: chunked\r\n\r\n"
        chunked = te + b"5\r\ntoken\r\n0\r\n"
        cases = [
            # Trailers count with the header (a 64 KiB one aborted the service; 20 KB passed).
            ("a 64 KiB trailer field", chunked + b"X-T: " + b"a" * 65536 + b"\r\n\r\n", 431, b"16384 bytes"),
            ("a 63 KB trailer field", chunked + b"X-T: " + b"a" * 63000 + b"\r\n\r\n", 431, b"trailer"),
            ("20 KB of trailer fields", chunked + b"".join(b"X-%d: %s\r\n" % (i, b"b" * 1000) for i in range(20)) + b"\r\n",
             431, b"trailer"),
            ("a 500 KB chunk extension", te + b"5;" + b"e" * 500000 + b"\r\ntoken\r\n0\r\n\r\n", 431, b"chunk extensions"),
            ("24 KB of small chunk extensions", te + b"".join(b"1;e=%s\r\nt\r\n" % (b"x" * 3000) for _ in range(8)) + b"0\r\n\r\n",
             431, b"chunk extensions"),
            ("a 20 KB request line", b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431, b"16384 bytes"),
            ("a 17 KB chunked body", te + b"".join(b"fa0\r\n" + b"t" * 4000 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n",
             413, b"body is larger"),
            ("a chunk size past 64 bits", te + b"1" * 40 + b"\r\n", 400, b"parse"),
            # Framing a proxy in front could read otherwise (request smuggling).
            ("Transfer-Encoding: xchunked", form + b"Transfer-Encoding: xchunked\r\n\r\n", 501, b"xchunked"),
            ("Transfer-Encoding: chunked, identity", form + b"Transfer-Encoding: chunked, identity\r\n\r\n5\r\ntoken\r\n0\r\n\r\n",
             400, b"not the last"),
            ("Transfer-Encoding: gzip, chunked", form + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501, b"gzip"),
            ("two Transfer-Encoding fields", form + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
             400, b"Transfer-Encoding"),
            ("Transfer-Encoding with Content-Length", form + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ntoken\r\n0\r\n\r\n",
             400, b""),
            ("two Content-Lengths", form + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\ntoken", 400, b""),
            ("a Content-Length list", form + b"Content-Length: 5, 5\r\n\r\ntoken", 400, b""),
            ("Transfer-Encoding in HTTP/1.0", b"POST /login HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, b"HTTP/1.0"),
            ("a folded header line", b"GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n", 400, b"folded"),
            ("a space before the colon", b"GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n", 400, b""),
            ("no Host", b"GET /api/v1/whoami HTTP/1.1\r\n\r\n", 400, b"Host"),
            ("two Hosts", b"GET /api/v1/whoami HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, b"2 Host fields"),
            ("an absolute target", b"GET http://x/api/v1/whoami HTTP/1.1\r\nHost: x\r\n\r\n", 400, b"not a path"),
        ]
        for name, data, status, needle in cases:
            got, reply = self.raw(s, data)
            self.assertEqual(got, status, f"{name}: {reply[:300]!r}")
            self.assertIn(needle, reply, name)
            self.assertIsNone(s.d.proc.poll(), f"the service died of {name}")
        # A trailer is read and dropped: a token in it does not log anyone in.
        got, reply = self.raw(s, b"GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 b"0\r\nAuthorization: Bearer " + ALICE.encode() + b"\r\n\r\n")
        self.assertEqual(got, 401, reply[:300])
        # A well-formed chunked request with a small trailer is served.
        got, reply = self.raw(s, chunked + b"X-Small: 1\r\n\r\n")
        self.assertEqual(got, 401, reply[:300])
        self.assertIn(b"wrong token", reply)
        # 200 MB of one chunk extension: refused after the first kilobytes, and the service's
        # memory does not grow by it (it grew by 200 MB).
        before = self.proc_status(s, "VmHWM")
        with socket.create_connection(("127.0.0.1", s.http), timeout=20) as c:
            sent = 0
            try:
                c.sendall(te + b"5;")
                piece = b"e" * (1 << 20)
                while sent < 200 << 20:
                    c.sendall(piece)
                    sent += len(piece)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                pass
        self.assertLess(sent, 200 << 20, "the server read all of it")
        grown = self.proc_status(s, "VmHWM") - before
        print(f"figure: a 200 MB chunk extension: {sent >> 20} MiB sent before the close, peak RSS +{grown} KiB")
        self.assertLess(grown, 32 << 10)
        self.assertEqual(self.get_json(s, "/api/v1/whoami", token=ALICE)["user"], "alice")
        # The listening socket and the connections are closed on exec: a build worker or a
        # board runner the service starts does not inherit them.
        c = http.client.HTTPConnection("127.0.0.1", s.http, timeout=10)
        c.request("GET", "/api/v1/whoami", headers={"Authorization": f"Bearer {ALICE}"})
        c.getresponse().read()
        inodes = set()
        with open("/proc/net/tcp") as f:
            tcp = f.read().splitlines()[1:]
        for line in tcp:
            f = line.split()
            if int(f[1].split(":")[1], 16) == s.http and f[3] in ("0A", "01"):
                inodes.add(f[9])
        self.assertGreaterEqual(len(inodes), 2)  # listening, and the kept-alive connection
        seen = 0
        fd_dir = f"/proc/{s.d.proc.pid}/fd"
        for fd in os.listdir(fd_dir):
            try:
                link = os.readlink(os.path.join(fd_dir, fd))
            except FileNotFoundError:
                continue
            m = re.match(r"socket:\[(\d+)\]", link)
            if m and m.group(1) in inodes:
                with open(f"/proc/{s.d.proc.pid}/fdinfo/{fd}") as f:
                    flags = int(re.search(r"flags:\s+(\d+)", f.read()).group(1), 8)
                self.assertTrue(flags & 0o2000000, f"fd {fd} ({link}) is not close-on-exec")
                seen += 1
        self.assertGreaterEqual(seen, 2)
        c.close()

    def test_slow_and_silent_clients_do_not_lock_out_the_users(self):
        s = Service(self, "--users-file", self.users(), "--local-boards", "1")
        auth = {"Authorization": f"Bearer {ALICE}"}
        kept = http.client.HTTPConnection("127.0.0.1", s.http, timeout=10)
        kept.request("GET", "/api/v1/whoami", headers=auth)
        self.assertEqual(kept.getresponse().read() and 200, 200)
        # 300 connections that never finish a request (more than the 256 connections allowed):
        # every real request is still served, and a user's kept-alive connection stays open.
        slow = []
        try:
            for _ in range(300):
                c = socket.create_connection(("127.0.0.1", s.http), timeout=30)
                c.sendall(b"GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\n")
                slow.append(c)
            statuses = [self.request(s, "GET", "/api/v1/whoami", auth)[0] for _ in range(30)]
            self.assertEqual(statuses, [200] * 30)
            kept.request("GET", "/api/v1/whoami", headers=auth)
            r = kept.getresponse()
            self.assertEqual(r.status, 200)
            r.read()
        finally:
            for c in slow:
                c.close()
            kept.close()
        # A request on a kept-alive connection has 10 s from its first byte, as the first has.
        with socket.create_connection(("127.0.0.1", s.http), timeout=40) as c:
            c.sendall(b"GET /api/v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ALICE.encode() + b"\r\n\r\n")
            self.assertIn(b" 200 ", c.recv(65536))
            c.sendall(b"GET /api/v1/whoami HTTP/1.1\r\n")
            t0 = time.time()
            while c.recv(4096):
                pass
            self.assertLess(time.time() - t0, 20)
            self.assertGreater(time.time() - t0, 8)
        # One user logging in again and again ends only their own oldest sessions.
        def login(token):
            status, hs, body = self.request(s, "POST", "/login", {"Content-Type": "application/x-www-form-urlencoded"},
                                            "token=" + token)
            self.assertEqual(status, 303, body)
            return hs["set-cookie"][0].split(";")[0]
        bob = login(BOB)
        alice = [login(ALICE) for _ in range(70)]
        whoami = lambda cookie: self.request(s, "GET", "/api/v1/whoami", {"Cookie": cookie})[0]
        self.assertEqual(whoami(bob), 200)
        self.assertEqual(whoami(alice[-1]), 200)
        self.assertEqual(whoami(alice[0]), 401)  # at most 64 of alice's at once

    def test_large_answers_are_streamed_a_page_at_a_time(self):
        # 60,000 records (47 MB of JSON lines), imported.
        rec = {"v": 1, "op": "matmul", "params": {"M": 8, "N": 8, "K": 8}, "workload": "matmul(M=8,N=8,K=8,epilogue=none)",
               "template": "dense.cpu.v1", "target": "llvm -mtriple=x86_64-pc-linux-gnu", "arch": "x86_64",
               "device_key": "local", "device_model": "test", "toolchain": "test", "run": "r-1", "flops": 1024,
               "compile_s": 0.01, "error_code": "ok", "error_msg": "", "correctness": "ok",
               "settings": {"cooldown_ms": 0.0, "flush": False, "min_repeat_ms": 10.0, "number": 1, "repeat": 1},
               "config": {"order": "nm", "pack_b": False, "parallel": True, "tile_m": 8, "tile_n": 8, "unroll": True,
                          "unroll_k": 4, "vectorize": True, "pad": "x" * 300}}
        # Under the sanitizers (scripts/sanitize.sh) 20,000 (16 MB: still two pages, and 40 readers
        # of it would hold 630 MB if answers were not streamed): the import and the answers'
        # JSON cost 48 s there at 60,000.
        n = 20000 if os.environ.get("TF_SANITIZED") == "1" else 60000
        path = os.path.join(self.dir, "records.jsonl")
        with open(path, "w") as f:
            for i in range(n):
                rec["measured_at"] = 1795000000.0 + i
                rec["samples_s"] = [1e-6 * (1 + i % 97)]
                f.write(json.dumps(rec) + "\n")
        p = subprocess.run([TUNEFARM, "query", "import", path, "--db", self.db], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"{n} added", p.stdout)
        s = Service(self, "--local-boards", "1")
        # A default page of 10,000 lines, sent chunked; the next page from the last line's id.
        status, hs, body = self.request(s, "GET", "/api/v1/history")
        self.assertEqual(status, 200)
        self.assertEqual(hs["transfer-encoding"], ["chunked"])
        lines = [json.loads(x) for x in body.splitlines()]
        self.assertEqual(len(lines), 10000)
        status, _, body = self.request(s, "GET", f"/api/v1/history?limit=5&after_id={lines[-1]['id']}")
        self.assertEqual([json.loads(x)["id"] for x in body.splitlines()], [lines[-1]["id"] + k for k in range(1, 6)])
        status, _, body = self.request(s, "GET", f"/api/v1/history?limit={n}")
        ids = [json.loads(x)["id"] for x in body.splitlines()]
        self.assertEqual(len(ids), n)
        self.assertEqual(ids, sorted(set(ids)))
        for path, needle in [(f"/api/v1/history?limit=1000001", '"1000001"'), ("/api/v1/history?limit=0", '"0"'),
                             ("/api/v1/top-k?k=1001&workload=matmul(M=8,N=8,K=8)", '"1001"')]:
            got, _, body = self.request(s, "GET", path)
            self.assertEqual(got, 400, path)
            self.assertIn(needle, json.loads(body)["error"])
        # 40 readers that ask for everything and read nothing: the service holds a piece for
        # each, not 47 MB, and answers the others meanwhile.
        before = self.proc_status(s, "VmRSS")
        readers = []
        try:
            for _ in range(40):
                c = socket.create_connection(("127.0.0.1", s.http), timeout=30)
                c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                c.sendall(f"GET /api/v1/history?limit={n} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                readers.append(c)
            time.sleep(3)
            waits = []
            for _ in range(5):  # answered meanwhile (the client's timeout is 30 s)
                t0 = time.time()
                self.assertEqual(self.get_json(s, "/api/v1/whoami")["user"], "local")
                waits.append(time.time() - t0)
            print(f"figure: whoami beside them: {max(waits) * 1000:.0f} ms at most")
            grown = self.proc_status(s, "VmRSS") - before
            print(f"figure: 40 readers of {n} records reading nothing: RSS +{grown} KiB")
            self.assertLess(grown, 100 << 10, f"the service grew by {grown} KiB for 40 slow readers")
        finally:
            for c in readers:
                c.close()
        self.assertIsNone(s.d.proc.poll())

    def test_a_tracker_that_does_not_answer_is_said_on_the_farm_page(self):
        with socket.socket() as s0:
            s0.bind(("127.0.0.1", 0))
            dead = s0.getsockname()[1]  # closed once the with ends: nothing listens there
        s = Service(self, "--tracker", f"127.0.0.1:{dead}", "--local-boards", "1")
        t0 = time.time()
        farm = self.get_json(s, "/api/v1/farm")
        self.assertLess(time.time() - t0, 10)
        self.assertEqual(farm["tracker"], f"127.0.0.1:{dead}")
        self.assertIn(f"127.0.0.1:{dead}", farm["error"])
        self.assertEqual(farm["summary"], {})
        self.assertEqual(self.get_json(s, "/api/v1/jobs"), {"jobs": []})

    def test_tls_mutual_tls_and_the_host_rules(self):
        d = os.path.join(self.dir, "pki")
        pki = make_pki(d)
        users = self.users()
        # TLS: HTTPS verified against the CA; the cookie is Secure; plain HTTP gets nothing.
        s = Service(self, "--users-file", users, "--tls-cert", pki["server.pem"], "--tls-key", pki["server.key"])
        self.assertEqual(s.scheme, "https")
        ctx = ssl.create_default_context(cafile=pki["ca.pem"])
        self.assertEqual(self.get_json(s, "/api/v1/whoami", token=ALICE, context=ctx)["user"], "alice")
        status, hs, _ = self.request(s, "POST", "/login", {"Content-Type": "application/x-www-form-urlencoded"},
                                     "token=" + ALICE, context=ctx)
        self.assertEqual(status, 303)
        self.assertIn("Secure", hs["set-cookie"][0])
        with socket.create_connection(("127.0.0.1", s.http), timeout=15) as c:
            c.sendall(b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ALICE.encode() + b"\r\n\r\n")
            self.assertNotIn(b"jobs", c.recv(4096))
        s.d.stop()
        # Mutual TLS: without a client certificate the handshake fails; with one it serves.
        s = Service(self, "--host", "0.0.0.0", "--users-file", users, "--tls-cert", pki["server.pem"],
                    "--tls-key", pki["server.key"], "--tls-ca", pki["ca.pem"], name="mtls")
        with self.assertRaises((ssl.SSLError, ConnectionResetError, http.client.RemoteDisconnected, BrokenPipeError)):
            self.request(s, "GET", "/api/v1/whoami", {"Authorization": f"Bearer {ALICE}"}, context=ctx)
        ctx2 = ssl.create_default_context(cafile=pki["ca.pem"])
        ctx2.load_cert_chain(pki["client.pem"], pki["client.key"])
        self.assertEqual(self.get_json(s, "/api/v1/whoami", token=ALICE, context=ctx2)["user"], "alice")
        # A certificate is not a token: without one, still 401.
        self.assertEqual(self.request(s, "GET", "/api/v1/jobs", context=ctx2)[0], 401)
        s.d.stop()
        # Beyond loopback without a users file: refused, as the gRPC port is.
        p = subprocess.run([TUNER, "--host", "0.0.0.0", "--port", "0", "--http-port", "0", "--db", self.db],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--users-file", p.stderr)
        # Bad ports and a port already taken: exit 2 with the value named.
        p = subprocess.run([TUNER, "--port", "0", "--http-port", "70000", "--db", self.db],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("70000", p.stderr)
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            p = subprocess.run([TUNER, "--port", "0", "--http-port", str(port), "--db", self.db],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(f"cannot listen on 127.0.0.1:{port}", p.stderr)
        # Unusable TLS files: exit 2 naming them.
        p = subprocess.run([TUNER, "--port", "0", "--http-port", "0", "--db", self.db, "--tls-cert", os.path.join(d, "ca.key"),
                            "--tls-key", pki["server.key"]], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("ca.key", p.stderr)


if __name__ == "__main__":
    TUNEFARM, TUNER = sys.argv[1:3]
    del sys.argv[1:3]
    unittest.main(verbosity=2)
