"""The watch stream of the Python client against real fenced processes,
with a stand-in in front of a node to cut, corrupt or reset its stream."""

import http.client
import http.server
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from fenced import BadRequest, Client, Token  # noqa: E402

from tests.harness import Cluster, get, poll  # noqa: E402

CHANGES = {"granted", "renewed", "released", "force_released", "expired", "lock_delay_ended", "handed_off"}


def collect(watch, until, timeout=30.0):
    """Events of watch until until(events) holds; fails at the deadline with
    what came."""
    got = []
    deadline = time.monotonic() + timeout
    while not until(got):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("timed out waiting for watch events; got %r" % (got,))
        try:
            ev = watch.get(timeout=left)
        except TimeoutError:
            continue
        if ev is None:
            raise AssertionError("the watch ended after %r" % (got,))
        got.append(ev)
    return got


def changes(evs):
    return [e for e in evs if e.type in CHANGES]


def has_sync(evs):
    return any(e.type == "sync" for e in evs)


class SSEProxy:
    """A node stand-in that forwards watch streams (and any other GET or
    POST) to a real node and records each watch request's Last-Event-ID.

    cut_after: after that many events of a stream (counted over its life),
    close the connection once. reset_after: after that many events, send
    a reset event and close, once. corrupt: the next granted event's token
    is sent as "0034", once. rewind: on the next resumed watch, ask the node
    from one index earlier than the client did (the node sends an event the
    client already has), once. refuse: answer watches 503 while set.
    comments: put comment lines, a retry field and a data-less event
    before each event while set (heartbeats the client must ignore)."""

    def __init__(self, target):
        self.target = target
        self.lock = threading.Lock()
        self.watches = []  # Last-Event-ID of each watch request (None: fresh)
        self.cut_after = None
        self.reset_after = None
        self.corrupt = False
        self.rewind = False
        self.refuse = False
        self.comments = False
        self.events = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path.startswith("/v1/watch"):
                    return proxy._watch(self)
                return proxy._forward(self, "GET", None)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                return proxy._forward(self, "POST", body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.addr = "127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _forward(self, h, method, body):
        host, port = self.target.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            c.request(method, h.path, body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        h.send_response(r.status)
        h.send_header("Content-Type", r.getheader("Content-Type", "application/json"))
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _watch(self, h):
        if self.refuse:
            data = b'{"code":"unavailable","message":"proxy: refused"}'
            h.send_response(503)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        last = h.headers.get("Last-Event-ID")
        with self.lock:
            self.watches.append(last)
            rewind, self.rewind = self.rewind and last is not None, self.rewind and last is None
        headers = {"Accept": "text/event-stream"}
        if last is not None:
            headers["Last-Event-ID"] = str(int(last) - 1) if rewind else last
        host, port = self.target.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            c.request("GET", h.path, headers=headers)
            r = c.getresponse()
            if r.status != 200:
                data = r.read()
                h.send_response(r.status)
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", str(len(data)))
                h.end_headers()
                h.wfile.write(data)
                return
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Connection", "close")
            h.end_headers()
            event = []
            while True:
                line = r.fp.readline()
                if not line:
                    return
                event.append(line)
                if line not in (b"\n", b"\r\n"):
                    continue
                frame = b"".join(event)
                event = []
                with self.lock:
                    if self.corrupt and b"event: granted" in frame:
                        import re
                        frame = re.sub(rb'"token":"[0-9]+"', b'"token":"0034"', frame, count=1)
                        self.corrupt = False
                    self.events += 1
                    n = self.events
                    cut = self.cut_after is not None and n > self.cut_after
                    reset = self.reset_after is not None and n > self.reset_after
                    if cut:
                        self.cut_after = None
                    if reset:
                        self.reset_after = None
                if reset:
                    h.wfile.write(b'event: reset\ndata: {"type":"reset","reason":"lagged"}\n\n')
                    h.wfile.flush()
                    return
                if cut:
                    return
                if self.comments:
                    h.wfile.write(b": heartbeat\n\nretry: 5000\n\n:\nevent: granted\nid: 1\n\n")
                h.wfile.write(frame)
                h.wfile.flush()
        except OSError:
            return
        finally:
            c.close()
            h.close_connection = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class OneNodeWatchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster(1)
        cls.real = cls.cluster.endpoints[0]

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def proxy(self):
        p = SSEProxy(self.real)
        self.addCleanup(p.close)
        return p

    def test_fresh_watch_state_sync_then_changes_in_order(self):
        c = Client([self.real])
        ga = c.acquire("pyw/a/x", "h0", ttl=30)
        with c.watch(prefix="pyw/a/") as w:
            start = collect(w, has_sync)
            self.assertEqual([e.type for e in start], ["state", "sync"])
            self.assertEqual((start[0].key, start[0].holder, start[0].token), ("pyw/a/x", "h0", ga.token))
            self.assertIsInstance(start[0].token, Token)
            gb = c.acquire("pyw/a/y", "h1", ttl=30)
            c.release("pyw/a/y", "h1", gb.token)
            c.release("pyw/a/x", "h0", ga.token)
            c.acquire("pyw/other", "h2", ttl=30)  # not under the prefix
            evs = changes(collect(w, lambda evs: len(changes(evs)) >= 3))
            self.assertEqual([(e.type, e.key) for e in evs],
                             [("granted", "pyw/a/y"), ("released", "pyw/a/y"), ("released", "pyw/a/x")])
            self.assertEqual(evs[0].token, gb.token)
            self.assertEqual(evs[0].ttl, 30.0)
            idx = [e.index for e in evs]
            self.assertEqual(idx, sorted(set(idx)), "indexes strictly increase")
            self.assertEqual(w.last_index, idx[-1])

    def test_a_cut_stream_resumes_after_the_last_event_delivered(self):
        p = self.proxy()
        c = Client([self.real])
        with Client([p.addr]).watch(prefix="pyw/cut/") as w:
            start = collect(w, has_sync)
            p.cut_after = p.events + 2
            keys = ["pyw/cut/%d" % i for i in range(6)]
            for k in keys:
                c.acquire(k, "h", ttl=30)
            every = start + collect(w, lambda evs: len(changes(evs)) >= len(keys))
            evs = changes(every)
            self.assertEqual([e.key for e in evs], keys, "each change once, in order")
            poll("the resumed watch", lambda: len(p.watches) >= 2)
            # The resume asked for what followed an event taken (the sync of
            # the start, or a change) and before the last change.
            self.assertIsNone(p.watches[0])
            self.assertIsNotNone(p.watches[1])
            self.assertIn(int(p.watches[1]), [e.index for e in every if e.type != "state"])
            self.assertLess(int(p.watches[1]), evs[-1].index)

    def test_an_event_the_node_sends_again_is_not_delivered_twice(self):
        p = self.proxy()
        c = Client([self.real])
        with Client([p.addr]).watch(prefix="pyw/dup/") as w:
            collect(w, has_sync)
            c.acquire("pyw/dup/0", "h", ttl=30)
            collect(w, lambda evs: len(changes(evs)) >= 1)
            p.rewind = True
            p.cut_after = p.events  # cut now: the resume is sent one index early
            c.acquire("pyw/dup/1", "h", ttl=30)
            c.acquire("pyw/dup/2", "h", ttl=30)
            evs = changes(collect(w, lambda evs: len(changes(evs)) >= 2))
            self.assertEqual([e.key for e in evs], ["pyw/dup/1", "pyw/dup/2"])
            c.acquire("pyw/dup/3", "h", ttl=30)
            more = changes(collect(w, lambda evs: len(changes(evs)) >= 1))
            self.assertEqual([e.key for e in more], ["pyw/dup/3"])

    def test_a_reset_is_delivered_then_the_watch_starts_afresh(self):
        p = self.proxy()
        c = Client([self.real])
        g = c.acquire("pyw/reset/a", "h", ttl=30)
        with Client([p.addr]).watch(prefix="pyw/reset/") as w:
            collect(w, has_sync)
            p.reset_after = p.events
            c.acquire("pyw/reset/b", "h", ttl=30)
            evs = collect(w, lambda evs: any(e.type == "reset" for e in evs) and has_sync(evs[1:]))
            self.assertEqual(evs[0].type, "reset")
            self.assertEqual(evs[0].reason, "lagged")
            states = {e.key: e.token for e in evs if e.type == "state"}
            self.assertEqual(set(states), {"pyw/reset/a", "pyw/reset/b"})
            self.assertEqual(states["pyw/reset/a"], g.token)
            self.assertEqual(evs[-1].type, "sync")
            self.assertIsNone(p.watches[-1], "after a reset the watch starts afresh, not from an id")

    def test_comments_and_retry_fields_are_ignored(self):
        p = self.proxy()
        p.comments = True
        c = Client([self.real])
        with Client([p.addr]).watch(prefix="pyw/comments/") as w:
            start = collect(w, has_sync)
            self.assertEqual([e.type for e in start], ["sync"])
            g = c.acquire("pyw/comments/a", "h", ttl=30)
            c.release("pyw/comments/a", "h", g.token)
            evs = collect(w, lambda evs: len(changes(evs)) >= 2)
            self.assertEqual([(e.type, e.key) for e in evs], [("granted", "pyw/comments/a"), ("released", "pyw/comments/a")])
            self.assertEqual(len(p.watches), 1, "the stream was never given up")

    def test_a_malformed_token_is_never_delivered(self):
        p = self.proxy()
        c = Client([self.real])
        with Client([p.addr]).watch(prefix="pyw/bad/") as w:
            collect(w, has_sync)
            p.corrupt = True
            g = c.acquire("pyw/bad/a", "h", ttl=30)
            evs = changes(collect(w, lambda evs: len(changes(evs)) >= 1))
            self.assertEqual((evs[0].type, evs[0].token), ("granted", g.token))
            self.assertIsInstance(w.last_error, ValueError)
            self.assertGreaterEqual(len(p.watches), 2, "the bad stream was given up and resumed")

    def test_refused_for_good_ends_with_an_error_event(self):
        w = Client([self.real]).watch(key="k" * 257)
        evs = collect(w, lambda evs: len(evs) >= 1)
        self.assertEqual(evs[0].type, "error")
        self.assertIn("key", evs[0].reason)
        self.assertIsInstance(w.error, BadRequest)
        self.assertIsNone(w.get(timeout=10), "the watch ended")
        self.assertEqual(list(w), [])

    def test_bad_arguments_are_refused_before_anything_is_sent(self):
        c = Client([self.real])
        for kw in [dict(key="a", prefix="b"), dict(key=""), dict(start=-1), dict(start="1"), dict(progress=0)]:
            with self.subTest(**{k: repr(v) for k, v in kw.items()}):
                with self.assertRaises(ValueError):
                    c.watch(**kw)

    def test_close_ends_a_waiting_iteration(self):
        # A quiet stream with a long progress interval: only close() can
        # end the read the iteration waits on (the idle limit is minutes).
        w = Client([self.real]).watch(key="pyw/quiet", progress=60)
        collect(w, has_sync)
        got = []
        t = threading.Thread(target=lambda: got.extend(w), daemon=True)
        t.start()
        threading.Thread(target=w.close, daemon=True).start()
        t.join(30)
        self.assertFalse(t.is_alive(), "iteration did not end on close")
        self.assertEqual(got, [])
        self.assertIsNone(w.get())


class CompactedHistoryTest(unittest.TestCase):
    """A node that restored a snapshot no longer holds the history before it:
    a resume from there is 410 compacted, delivered as a reset."""

    def setUp(self):
        self.cluster = Cluster(1, args=lambda node: ["--snapshot-interval", "100ms", "--snapshot-threshold", "2"])
        self.addCleanup(self.cluster.stop)

    def test_a_resume_from_compacted_history_is_a_reset_then_the_state(self):
        c = Client(self.cluster.endpoints)
        tokens = {}
        for i in range(5):
            tokens["pyc/%d" % i] = c.acquire("pyc/%d" % i, "h", ttl=3600).token
        node = self.cluster.nodes[0]
        snaps = os.path.join(node.dir, "snapshots")
        poll("a snapshot", lambda: os.path.isdir(snaps) and os.listdir(snaps))
        node.kill()
        node.start()
        poll("the node back", lambda: get(node.http, "/readyz", 0.5)[0] == 200)
        with c.watch(prefix="pyc/", start=1) as w:
            evs = collect(w, has_sync)
            self.assertEqual((evs[0].type, evs[0].reason), ("reset", "compacted"))
            self.assertEqual({e.key: e.token for e in evs if e.type == "state"}, tokens)
            c.release("pyc/0", "h", tokens["pyc/0"])
            more = changes(collect(w, lambda evs: len(changes(evs)) >= 1))
            self.assertEqual((more[0].type, more[0].key), ("released", "pyc/0"))


class ThreeNodeWatchTest(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(3)
        self.addCleanup(self.cluster.stop)

    def test_a_frozen_node_is_left_and_the_watch_resumes_elsewhere(self):
        lead = poll("a leader", self.cluster.leader)
        fol = next(n for n in self.cluster.nodes if n is not lead)
        others = [n.http for n in self.cluster.nodes if n is not fol]
        c = Client(others, timeout=60)
        w = Client([fol.http] + others).watch(prefix="py3w/", progress=0.2)
        self.addCleanup(w.close)
        collect(w, has_sync)
        c.acquire("py3w/0", "h", ttl=30)
        collect(w, lambda evs: len(changes(evs)) >= 1)
        fol.pause()
        try:
            keys = ["py3w/%d" % i for i in range(1, 5)]
            for k in keys:
                c.acquire(k, "h", ttl=30)
            evs = changes(collect(w, lambda evs: len(changes(evs)) >= len(keys), timeout=60))
            self.assertEqual([e.key for e in evs], keys)
        finally:
            fol.resume()


if __name__ == "__main__":
    unittest.main()
