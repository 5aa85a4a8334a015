"""The Python client against real fenced processes."""

import http.client
import http.server
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from fenced import (Client, FencedError, Held, LeaseLost, LimitMismatch, MalformedToken, NotHolder, Refused, StaleToken,  # noqa: E402
                    Token, UnknownOutcome)
from fenced.sqlite import SQLiteFence  # noqa: E402

from tests.harness import ROOT, Cluster, get, poll  # noqa: E402

# CI runs `python3 -m unittest tests.test_client`: the other modules' cases
# run from here.
from tests.test_election import ElectionTest, ObserveAfterResetTest, ObserverRulesTest  # noqa: E402,F401
from tests.test_package import PackageTest, ReadmeTest  # noqa: E402,F401
from tests.test_security import EndpointRulesTest, TLSClusterTest  # noqa: E402,F401
from tests.test_tokens import SharedTokenCasesTest  # noqa: E402,F401
from tests.test_watch import CompactedHistoryTest, OneNodeWatchTest, ThreeNodeWatchTest  # noqa: E402,F401


class TokenTest(unittest.TestCase):
    def test_strict_parse(self):
        self.assertEqual(Token.parse("4294967297"), 4294967297)
        self.assertEqual(Token.parse("4294967297").epoch, 1)
        self.assertEqual(Token.parse("4294967297").seq, 1)
        self.assertEqual(str(Token.parse("9223372036854775807")), "9223372036854775807")
        for bad in ["", " 1", "1 ", "+1", "-1", "01", "1e3", "0x10", "1.0", "١", "12345678901234567890", None, 7]:
            with self.subTest(bad=bad):
                with self.assertRaises(MalformedToken):
                    Token.parse(bad)

    def test_compares_as_an_integer(self):
        self.assertLess(Token.parse("9"), Token.parse("10"))  # as text, "9" > "10"
        self.assertEqual(Token(5), Token.parse("5"))


class _Proxy:
    """A node stand-in in front of a real one. mode decides each request:
    "pass" forwards it, "commit-then-504" forwards it and answers 504
    outcome_unknown (the write was committed), "drop" forwards it and closes
    the connection without an answer, "504" answers outcome_unknown without
    forwarding, "cut" answers 503 unavailable."""

    def __init__(self, target):
        self.target = target
        self.mode = "pass"
        self.seen = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.seen.append((self.path, json.loads(body or b"{}")))
                mode = proxy.mode
                if mode in ("504", "cut"):
                    code, status = ("outcome_unknown", 504) if mode == "504" else ("unavailable", 503)
                    return self._answer(status, {"code": code, "message": "proxy: " + mode})
                host, port = proxy.target.rsplit(":", 1)
                c = http.client.HTTPConnection(host, int(port), timeout=30)
                c.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                c.close()
                if mode == "commit-then-504":
                    return self._answer(504, {"code": "outcome_unknown", "message": "proxy: answer lost"})
                if mode == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return None
                self.send_response(r.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return None

            def _answer(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = "127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class OneNodeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster(1)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def client(self, **kw):
        return Client(self.cluster.endpoints, **kw)

    def test_semaphore_and_shared(self):
        c = self.client()
        a = c.acquire("py/sem", "a", ttl=10, limit=2)
        b = c.acquire("py/sem", "b", ttl=10, limit=2)
        self.assertEqual((a.limit, b.limit), (2, 2))
        self.assertGreater(b.token, a.token)
        with self.assertRaises(Held):
            c.acquire("py/sem", "c", ttl=10, limit=2)
        with self.assertRaises(LimitMismatch):
            c.acquire("py/sem", "c", ttl=10, limit=3)
        self.assertTrue(c.verify("py/sem", a.token).allow)
        self.assertTrue(c.verify("py/sem", b.token).allow)
        r1 = c.acquire("py/rw", "r1", ttl=10, mode="shared")
        r2 = c.acquire("py/rw", "r2", ttl=10, mode="shared")
        self.assertEqual(r2.mode, "shared")
        with self.assertRaises(Held):
            c.acquire("py/rw", "w", ttl=10)
        c.release("py/rw", "r1", r1.token)
        c.release("py/rw", "r2", r2.token)
        w = c.acquire("py/rw", "w", ttl=10)
        self.assertGreater(w.token, r2.token)
        self.assertFalse(c.verify("py/rw", r2.token).allow)
        gs = c.acquire_multi(["py/m1", "py/m2"], "m", ttl=10)
        self.assertEqual([g.key for g in gs], ["py/m1", "py/m2"])
        with self.assertRaises(Held):
            c.acquire_multi(["py/m3", "py/m2"], "o", ttl=10)

    def test_a_permits_lock_delay_keeps_its_slot(self):
        c = self.client()
        c.acquire("py/sd", "a", ttl=0.2, limit=2, lock_delay=60)
        c.acquire("py/sd", "b", ttl=30, limit=2)

        def refused_for_the_delay():
            try:
                g = c.acquire("py/sd", "c", ttl=30, limit=2)
            except Held:
                return False  # a's lease has not run out yet
            except FencedError as e:
                return e.code == "lock_delay" and e.body.get("retry_after")
            self.fail("c took a's delayed slot: %r" % (g,))

        poll("a's permit to expire", refused_for_the_delay)
        r = c.acquire("py/sdr", "r1", ttl=0.2, mode="shared", lock_delay=60)
        self.assertEqual(r.mode, "shared")

        def writer_kept_out():
            try:
                c.acquire("py/sdr", "w", ttl=30)
            except Held:
                return False
            except FencedError as e:
                return e.code == "lock_delay"
            self.fail("a writer beside an expired reader's lock-delay")

        poll("r1's grant to expire", writer_kept_out)
        self.assertEqual(c.acquire("py/sdr", "r2", ttl=30, mode="shared").mode, "shared")

    def test_a_set_renewed_and_released_all_or_none(self):
        c = self.client()
        gs = c.acquire_multi(["py/s1", "py/s2"], "m", ttl=10)
        self.assertEqual([g.token for g in c.renew_multi(gs, "m")], [g.token for g in gs])
        stale = [gs[0], ("py/s2", int(gs[1].token) + 1)]
        with self.assertRaises(StaleToken) as refused:
            c.release_multi(stale, "m")
        self.assertIn("py/s2", str(refused.exception))
        with self.assertRaises(NotHolder):
            c.renew_multi(gs, "o")
        self.assertEqual(c.key("py/s1").state, "held")  # nothing changed
        out = c.release_multi(gs, "m", request_id="py-set-1")
        self.assertEqual([r["state"] for r in out], ["released", "released"])
        g = c.acquire("py/s2", "o", ttl=10)
        again = c.release_multi(gs, "m", request_id="py-set-1")  # a repeat
        self.assertEqual(again[1]["token"], str(gs[1].token))
        self.assertEqual(c.key("py/s2").token, g.token)

    def test_acquire_renew_verify_release(self):
        c = self.client()
        g = c.acquire("py/basic", "alice", ttl=10)
        self.assertIsInstance(g.token, Token)
        self.assertEqual(g.ttl, 10.0)
        with self.assertRaises(Held) as held:
            c.acquire("py/basic", "bob", ttl=10)
        self.assertEqual(held.exception.held_by, "alice")
        self.assertEqual(c.renew("py/basic", "alice", g.token).token, g.token)
        with self.assertRaises(NotHolder):
            c.renew("py/basic", "bob", g.token)
        self.assertTrue(c.verify("py/basic", g.token, "alice").allow)
        self.assertEqual(c.verify("py/basic", "01").reason, "malformed")
        c.release("py/basic", "alice", g.token)
        c.release("py/basic", "alice", g.token)  # a release is safe to repeat
        v = c.verify("py/basic", g.token)
        self.assertFalse(v.allow)
        self.assertEqual(v.reason, "released")
        g2 = c.acquire("py/basic", "bob", ttl=10)
        self.assertGreater(g2.token, g.token)
        c.release("py/basic", "bob", g2.token)

    def test_a_release_repeated_with_its_request_id_is_answered_as_first(self):
        # A repeat after the key went to another holder gets the first
        # release's answer, not stale_token, and leaves the new grant alone.
        c = self.client()
        g = c.acquire("py/once", "alice", ttl=10)
        first = c.release("py/once", "alice", g.token, request_id="py-rel-1")
        g2 = c.acquire("py/once", "bob", ttl=10)
        again = c.release("py/once", "alice", g.token, request_id="py-rel-1")
        self.assertEqual((again["token"], again["state"]), (str(g.token), "released"))
        self.assertEqual(first["token"], str(g.token))
        self.assertTrue(c.verify("py/once", g2.token, "bob").allow)
        c.release("py/once", "bob", g2.token)

    def test_unknown_outcome_is_retried_with_the_same_request(self):
        # The first node commits the acquire but its answer is lost (504,
        # then a dropped connection); the client retries the same request id
        # and holder on the next node and gets the SAME grant back, not
        # "held" and not an error.
        real = self.cluster.endpoints[0]
        for mode in ("commit-then-504", "drop"):
            with self.subTest(mode=mode):
                p = _Proxy(real)
                try:
                    p.mode = mode
                    c = Client([p.addr, real])
                    g = c.acquire("py/unknown-" + mode, "carol", ttl=10)
                    self.assertEqual(len(p.seen), 1)
                    sent = p.seen[0][1]
                    v = Client([real]).verify("py/unknown-" + mode, g.token, "carol")
                    self.assertTrue(v.allow, v)
                    # The retry kept the request id: acquiring again with it
                    # returns the grant it made.
                    again = Client([real]).acquire("py/unknown-" + mode, "carol", ttl=10, request_id=sent["request_id"])
                    self.assertEqual(again.token, g.token)
                    c.release("py/unknown-" + mode, "carol", g.token)
                finally:
                    p.close()

    def test_unknown_outcome_is_never_reported_as_failure(self):
        p = _Proxy(self.cluster.endpoints[0])
        try:
            p.mode = "504"
            with self.assertRaises(UnknownOutcome):
                Client([p.addr], timeout=0.5).acquire("py/never", "dave", ttl=10)
            self.assertGreater(len(p.seen), 1, "an unknown outcome must be retried")
            ids = {body["request_id"] for _, body in p.seen}
            self.assertEqual(len(ids), 1, "every retry carries the same request id")
        finally:
            p.close()

    def test_lease_keeps_alive_and_releases(self):
        c = self.client()
        with c.lease("py/lease", ttl=3, holder="erin") as lease:
            first_deadline = lease.deadline
            poll("a renewal", lambda: lease.deadline > first_deadline + 0.5)
            self.assertTrue(lease.valid())
            self.assertFalse(lease.lost.is_set())
            self.assertTrue(c.verify("py/lease", lease.token, "erin").allow)
        self.assertTrue(lease.lost.is_set())  # released: no longer ours
        self.assertEqual(c.verify("py/lease", lease.token).reason, "released")

    def test_lease_lost_before_anyone_else_gets_the_key(self):
        # The holder's client is cut off from the cluster (every request
        # answered 503): it cannot renew. When B obtains the key, A's lease
        # must already be over by A's own clock, and lost set.
        real = self.cluster.endpoints[0]
        p = _Proxy(real)
        try:
            a = Client([p.addr])
            lease = a.lease("py/lost", ttl=2, holder="frank", margin=0.5)
            lease.acquire()
            p.mode = "cut"
            g = Client([real]).acquire("py/lost", "grace", ttl=10, wait=30)
            self.assertFalse(lease.valid(), "B got the key while A's lease was still valid by A's clock")
            self.assertTrue(lease.lost.wait(10), "lost was never set")
            self.assertGreater(g.token, lease.token)
            self.assertIsInstance(lease.error, LeaseLost)
            Client([real]).release("py/lost", "grace", g.token)
            p.mode = "pass"
            lease.release()
        finally:
            p.close()

    def test_lease_lost_on_refusal(self):
        c = self.client()
        lease = c.lease("py/refused", ttl=6, holder="heidi")
        lease.acquire()
        c.release("py/refused", "heidi", lease.token)  # someone ends the grant
        self.assertTrue(lease.lost.wait(10))
        self.assertIn("refused", str(lease.error))
        lease.release()

    def test_sqlite_fence(self):
        conn = sqlite3.connect(":memory:", isolation_level=None)
        f = SQLiteFence(conn)
        conn.execute("CREATE TABLE t (v TEXT)")
        with f.write("k", Token(10)) as db:
            db.execute("INSERT INTO t VALUES ('a')")
        with f.write("k", Token(10)) as db:  # the same grant writes again
            db.execute("INSERT INTO t VALUES ('b')")
        with self.assertRaises(Refused):
            with f.write("k", Token(9)) as db:
                db.execute("INSERT INTO t VALUES ('stale')")
        with f.write("k", Token(11)) as db:
            db.execute("INSERT INTO t VALUES ('c')")
        self.assertEqual([r[0] for r in conn.execute("SELECT v FROM t")], ["a", "b", "c"])
        self.assertEqual(f.fence("k"), 11)


class ThreeNodeTest(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(3)

    def tearDown(self):
        if any(sys.exc_info()):
            print(self.cluster.logs())
        self.cluster.stop()

    def test_node_down_and_frozen_leader(self):
        c = Client(self.cluster.endpoints)
        # A node down: the client goes on through the others.
        self.cluster.nodes[0].kill()
        g = c.acquire("py/3/a", "ivan", ttl=10)
        self.assertTrue(c.verify("py/3/a", g.token).allow)
        self.cluster.nodes[0].start()
        poll("the node back", lambda: get(self.cluster.nodes[0].http, "/readyz", 0.5)[0] == 200)
        # A frozen leader (SIGSTOP): the others elect a new one and the
        # client reaches it; the new grant's token is higher.
        lead = poll("a leader", self.cluster.leader)
        lead.pause()
        try:
            g2 = Client(self.cluster.endpoints, timeout=60).acquire("py/3/b", "judy", ttl=10)
            self.assertGreater(g2.token, g.token)
        finally:
            lead.resume()

    def test_stock_example(self):
        """Kleppmann's scenario with examples/python/stock.py: A checks its
        lease, freezes past its TTL, B sells, A wakes and is refused by the
        database."""
        code, out, who = kleppmann(self.cluster, [])
        self.assertEqual(code, 3, out)
        self.assertIn("refused", out)
        self.assertEqual(who, ["B"])

    def test_stock_example_without_fence_oversells(self):
        """The positive control: without the fence, A's stale write goes
        through and the last item is sold twice."""
        code, out, who = kleppmann(self.cluster, ["--no-fence"])
        self.assertEqual(code, 0, out)
        self.assertEqual(who, ["B", "A"])


def stopped(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def kleppmann(cluster, extra):
    import signal
    import tempfile
    script = os.path.join(ROOT, "examples", "python", "stock.py")
    db = os.path.join(tempfile.mkdtemp(prefix="stock-"), "stock.db")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "clients", "python"))
    eps = "--endpoints=" + ",".join(cluster.endpoints)
    subprocess.run([sys.executable, script, "--db", db, "--init", "1"], check=True, env=env)
    a = subprocess.Popen([sys.executable, script, eps, "--db", db, "--holder", "A", "--ttl", "1", "--wait-for-go"] + extra,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    try:
        for line in a.stdout:
            if line.strip() == "lease checked":
                break
        a.send_signal(signal.SIGSTOP)
        poll("A stopped", lambda: stopped(a.pid), 5)
        a.stdin.write("go\n")
        a.stdin.flush()
        b = subprocess.run([sys.executable, script, eps, "--db", db, "--holder", "B", "--ttl", "10", "--wait", "30"] + extra,
                           capture_output=True, text=True, env=env)
        if "reserved widget for B" not in b.stdout:
            raise AssertionError("B: %d %s %s" % (b.returncode, b.stdout, b.stderr))
        a.send_signal(signal.SIGCONT)
        rest = a.stdout.read()
        code = a.wait(60)
    finally:
        a.stdin.close()
        a.stdout.close()
        if a.poll() is None:
            a.send_signal(signal.SIGCONT)
            a.kill()
    conn = sqlite3.connect(db)
    who = [r[0] for r in conn.execute("SELECT holder FROM reservations ORDER BY rowid")]
    conn.close()
    return code, rest, who


if __name__ == "__main__":
    unittest.main()
