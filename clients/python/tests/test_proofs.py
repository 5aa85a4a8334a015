"""Grants' proofs checked offline: every case of testdata/proofs.json (the
table the Go and JavaScript guards are tested against too) is judged with
its reason by FenceGuard and SQLiteFence. Needs the optional cryptography
package; skipped without it."""

import json
import os
import sqlite3
import sys
import unittest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from fenced import Client, FenceGuard, KeySet, ProofRefused, Refused, verify_proof  # noqa: E402
from fenced.sqlite import SQLiteFence  # noqa: E402

from tests.harness import ROOT, Cluster, poll  # noqa: E402

try:
    import cryptography  # noqa: F401
    HAVE_CRYPTOGRAPHY = True
except ImportError:
    HAVE_CRYPTOGRAPHY = False


def vectors():
    with open(os.path.join(ROOT, "testdata", "proofs.json"), encoding="utf-8") as f:
        return json.load(f)


@unittest.skipUnless(HAVE_CRYPTOGRAPHY, "the cryptography package is not installed (pip install 'fenced-client[proofs]')")
class ProofVectorsTest(unittest.TestCase):
    def setUp(self):
        self.v = vectors()
        self.keys = KeySet(self.v["keys"])
        self.genuine = next(c for c in self.v["cases"] if c["reason"] == "")

    def test_every_case_has_its_reason(self):
        self.assertGreater(len(self.v["cases"]), 5)
        for c in self.v["cases"]:
            reason = ""
            try:
                verify_proof(c["proof"], self.keys, c["key"], c["token"], cluster=self.v["cluster"])
            except ProofRefused as e:
                reason = e.reason
            self.assertEqual(reason, c["reason"], c["name"])

    def test_guards_refuse_before_comparing(self):
        conn = sqlite3.connect(":memory:", isolation_level=None)
        for guard in (FenceGuard(self.keys, cluster=self.v["cluster"], require_proof=True),
                      SQLiteFence(conn, keys=self.keys, cluster=self.v["cluster"], require_proof=True)):
            g = self.genuine
            if isinstance(guard, FenceGuard):
                guard.admit(g["key"], g["token"], g["proof"])
                fence = guard.highest
            else:
                with guard.write(g["key"], g["token"], g["proof"]):
                    pass
                fence = guard.fence
            for c in self.v["cases"]:
                if c["reason"] == "":
                    continue
                with self.assertRaises(ProofRefused, msg=c["name"]) as cm:
                    if isinstance(guard, FenceGuard):
                        guard.admit(c["key"], c["token"], c["proof"])
                    else:
                        with guard.write(c["key"], c["token"], c["proof"]):
                            pass
                self.assertEqual(cm.exception.reason, c["reason"], c["name"])
            self.assertEqual(str(fence(g["key"])), g["token"])

    def test_positive_control_unchecked_guard_is_poisoned(self):
        guard = FenceGuard()
        guard.admit("orders", "9223372036854775807")
        with self.assertRaises(Refused):
            guard.admit("orders", self.genuine["token"])

    def test_malformed_key_sets(self):
        for doc in ('{"keys":[{"kty":"RSA","kid":"a"}]}', '{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"AAAA"}]}', "{}"):
            with self.assertRaises(ValueError):
                KeySet(doc)
        with self.assertRaises(ValueError):
            FenceGuard(require_proof=True)


@unittest.skipUnless(HAVE_CRYPTOGRAPHY, "the cryptography package is not installed (pip install 'fenced-client[proofs]')")
class ProofEndToEndTest(unittest.TestCase):
    def test_proof_from_a_real_cluster_checked_with_it_stopped(self):
        cluster = Cluster(3)
        try:
            g = Client(cluster.endpoints, timeout=60).acquire("py/orders", "py-alice", ttl=30)
            self.assertTrue(g.proof)
            keys = poll("three published keys",
                        lambda: (lambda ks: ks if len(ks) == 3 else None)(KeySet.fetch("http://" + cluster.nodes[0].http)), timeout=30)
            cluster.stop()
            guard = FenceGuard(keys, require_proof=True)
            self.assertEqual(guard.admit("py/orders", g.token, g.proof), g.token)
            with self.assertRaises(ProofRefused) as cm:
                guard.admit("py/orders", int(g.token) + (1 << 32), g.proof)
            self.assertEqual(cm.exception.reason, "proof_wrong_token")
            with self.assertRaises(ProofRefused) as cm:
                guard.admit("py/orders", "9223372036854775807")
            self.assertEqual(cm.exception.reason, "proof_missing")
            self.assertEqual(guard.highest("py/orders"), g.token)
        finally:
            cluster.stop()


if __name__ == "__main__":
    unittest.main()
