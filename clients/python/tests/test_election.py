"""Elections of the Python client against real fenced processes."""

import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from fenced import Client, NoLeader, NotLeading, Token, UnknownKey, WatchEvent  # noqa: E402
from fenced.election import _Observer  # noqa: E402

from tests.harness import Cluster, poll  # noqa: E402
from tests.test_watch import SSEProxy  # noqa: E402


def next_leader(obs, timeout=30.0):
    try:
        l = obs.get(timeout=timeout)
    except TimeoutError:
        raise AssertionError("the observer reported no change") from None
    if l is None:
        raise AssertionError("the observation ended: %s" % obs.error)
    return l


class ObserverRulesTest(unittest.TestCase):
    def test_the_observer_never_reports_an_older_leader(self):
        # The steps of the Go client's observer test, and an older index.
        a, b, c = Token.parse("4294967297"), Token.parse("8589934593"), Token.parse("8589934594")

        def ev(type_, holder, token, state, value="", index=0):
            return WatchEvent(type=type_, holder=holder, token=token, state=state, value=value, index=index)

        steps = [
            (ev("state", "a", a, "held"), True),
            (ev("renewed", "a", a, "held"), False),
            (ev("released", "a", a, "released"), True),
            (ev("state", "a", a, "held"), False),
            (ev("granted", "b", b, "held"), True),
            (ev("reset", "", None, ""), False),
            (ev("state", "a", a, "held"), False),
            (ev("renewed", "b", b, "held", value="v"), True),
            (ev("lock_delay_ended", "b", b, "expired"), False),
            (ev("expired", "b", b, "expired"), True),
            (ev("lock_delay_ended", "b", b, "expired"), False),
            (ev("granted", "c", c, "held", index=10), True),
            # An older index is an older view, whatever it says (a state
            # read before the change just reported).
            (ev("state", "c", c, "held", value="older", index=5), False),
        ]
        o = _Observer("e")
        for i, (e, want) in enumerate(steps):
            with self.subTest(step=i, type=e.type, holder=e.holder):
                self.assertEqual(o.event(e) is not None, want)


class ElectionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster(1)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def client(self):
        return Client(self.cluster.endpoints)

    def test_campaign_observe_proclaim_resign(self):
        c = self.client()
        name = "pye/leader"
        obs = Client(self.cluster.endpoints).election(name, holder="observer").observe()
        self.addCleanup(obs.close)
        e1 = c.election(name, holder="n1", ttl=5, value="http://n1")
        e2 = c.election(name, holder="n2", ttl=5, value="http://n2")
        with self.assertRaises(NoLeader):
            e1.leader()
        self.assertIsNone(e1.token)
        self.assertTrue(e1.lost.is_set(), "a candidate that never led is not leading")
        e1.campaign(timeout=30)
        self.assertTrue(e1.leading())
        won2 = []
        t = threading.Thread(target=lambda: won2.append(e2.campaign(timeout=60)), daemon=True)
        t.start()
        l = next_leader(obs)
        self.assertEqual((l.holder, l.token, l.value), ("n1", e1.token, "http://n1"))
        # n2 waits in the queue while n1 leads.
        self.assertEqual(e1.leader().holder, "n1")
        self.assertFalse(e2.leading())

        e1.proclaim("http://n1:2")
        l = next_leader(obs)
        self.assertEqual((l.holder, l.token, l.value), ("n1", e1.token, "http://n1:2"))
        self.assertEqual(e2.leader().value, "http://n1:2")

        t1 = e1.token
        e1.resign()
        t.join(60)
        self.assertEqual(len(won2), 1, "n2 was not elected")
        self.assertGreater(e2.token, t1)
        while True:
            l = next_leader(obs)
            self.assertGreaterEqual(l.token, t1, "the observer went back to an older leader")
            if l.holder == "n2":
                self.assertEqual((l.token, l.value), (e2.token, "http://n2"))
                break
        self.assertEqual(e1.leader().holder, "n2")
        self.assertFalse(e2.lost.is_set())

        # Not leading: a proclaim changes nothing.
        with self.assertRaises(NotLeading):
            e1.proclaim("x")
        after = c.key(name)
        self.assertEqual((after.holder, after.token, after.value), ("n2", e2.token, "http://n2"))
        e2.resign()

    def test_proclaim_after_the_grant_ended_makes_no_new_grant(self):
        # The grant ends on the server (released by its holder's name
        # elsewhere) while this process still believes it leads: the key is
        # free, and a proclaim must not take it afresh.
        c = self.client()
        name = "pye/ended"
        e = c.election(name, holder="n1", ttl=30, value="a")
        e.campaign(timeout=30)
        tok = e.token
        c.release(name, "n1", tok)
        self.assertTrue(e.leading(), "the keepalive found out already; the test needs it not to")
        with self.assertRaises(NotLeading):
            e.proclaim("b")
        k = c.key(name)
        self.assertEqual((k.state, k.token, k.holder), ("released", tok, "n1"), "the proclaim acquired the key")
        with self.assertRaises(NoLeader):
            e.leader()
        self.assertFalse(e.leading())

    def test_proclaim_when_another_leads_changes_nothing(self):
        c = self.client()
        name = "pye/taken"
        e = c.election(name, holder="n1", ttl=30, value="a")
        e.campaign(timeout=30)
        c.release(name, "n1", e.token)
        g = c.acquire(name, "n3", ttl=30, value="mine")
        with self.assertRaises(NotLeading):
            e.proclaim("b")
        k = c.key(name)
        self.assertEqual((k.holder, k.token, k.value), ("n3", g.token, "mine"))
        c.release(name, "n3", g.token)

    def test_proclaim_without_leading_sends_nothing(self):
        c = self.client()
        e = c.election("pye/never", holder="n1")
        with self.assertRaises(NotLeading):
            e.proclaim("x")
        with self.assertRaises(UnknownKey):
            c.key("pye/never")

    def test_campaign_timeout(self):
        c = self.client()
        name = "pye/busy"
        e1 = c.election(name, holder="n1", ttl=30)
        e1.campaign(timeout=30)
        with self.assertRaises(TimeoutError):
            c.election(name, holder="n2", ttl=30).campaign(timeout=0.5)
        self.assertEqual(e1.leader().holder, "n1")
        e1.resign()

    def test_bad_arguments(self):
        c = self.client()
        for kw in [dict(name=""), dict(name="x", ttl=1, margin=2)]:
            with self.subTest(**kw):
                with self.assertRaises(ValueError):
                    c.election(**kw)


class ObserveAfterResetTest(unittest.TestCase):
    """After a reset the observer reads the key again: a leadership that
    ended in the gap, and whose key was forgotten since, is reported as
    nobody leading, though the new stream has no event of the key."""

    def setUp(self):
        self.cluster = Cluster(1, args=lambda node: ["--key-retention", "1s"])
        self.addCleanup(self.cluster.stop)

    def test_a_reset_is_followed_by_a_read(self):
        real = self.cluster.endpoints[0]
        p = SSEProxy(real)
        self.addCleanup(p.close)
        c = Client([real])
        name = "pye/reset"
        obs = Client([p.addr]).election(name).observe()
        self.addCleanup(obs.close)
        e = c.election(name, holder="n1", ttl=30)
        e.campaign(timeout=30)
        l = next_leader(obs)
        self.assertEqual((l.holder, l.token), ("n1", e.token))
        tok = e.token
        # The release is replaced by a reset, and the watch cannot start
        # again until the key is forgotten: its new stream has no state of
        # the key to report.
        p.reset_after = p.events
        p.refuse = True
        e.resign()
        poll("the key forgotten", lambda: self._forgotten(c, name))
        p.refuse = False
        l = next_leader(obs)
        self.assertEqual((l.holder, l.token), ("", tok), "nobody leads after the leadership of %s" % tok)

    @staticmethod
    def _forgotten(c, name):
        try:
            c.key(name)
        except UnknownKey:
            return True
        return False


if __name__ == "__main__":
    unittest.main()
