"""FenceGuard: the resource side of fencing, in memory.

It keeps, per key, the highest token a write came with, and refuses any
lower one. With the cluster's public keys pinned it also checks each
token's proof first, so a client that sends a made-up higher token (a bug,
or a hostile client) cannot raise the fence above every real grant.
"""

import threading

from .errors import Refused
from .proof import verify_proof
from .token import Token

__all__ = ["FenceGuard"]


class FenceGuard:
    """``guard.admit(key, token, proof)`` raises the key's fence to token,
    or raises Refused for a token lower than the fence. With ``keys`` (a
    fenced.proof.KeySet) a proof that comes with a token is checked before
    any token is compared, and with ``require_proof`` a token without one is
    refused (ProofRefused, with its reason). ``cluster`` defaults to the key
    set's. Thread-safe; for a write that must happen under the fence, use
    ``with guard.write(key, token, proof): ...``."""

    def __init__(self, keys=None, cluster=None, require_proof=False):
        if require_proof and keys is None:
            raise ValueError("require_proof needs keys")
        self.keys = keys
        self.cluster = cluster if cluster is not None else getattr(keys, "cluster", "")
        self.require_proof = require_proof
        self._lock = threading.Lock()
        self._highest = {}

    def check_proof(self, key, token, proof=None):
        """Checks proof for key's grant token as admit does, without
        touching the fence."""
        if self.keys is not None and (self.require_proof or proof):
            verify_proof(proof, self.keys, key, token, cluster=self.cluster)

    def admit(self, key, token, proof=None):
        tok = token if isinstance(token, Token) else Token.parse(str(token)) if not isinstance(token, int) else Token(token)
        self.check_proof(key, tok, proof)
        with self._lock:
            cur = self._highest.get(key)
            if cur is not None and tok < cur:
                raise Refused("token %s for %r is lower than the fence %s: refused" % (tok, key, cur))
            self._highest[key] = tok
        return tok

    def highest(self, key):
        """The highest token admitted for key, or None."""
        with self._lock:
            return self._highest.get(key)

    def write(self, key, token, proof=None):
        """A context manager that admits token and holds the guard's lock
        while the body writes, so no other write interleaves."""
        return _Write(self, key, token, proof)


class _Write:
    def __init__(self, guard, key, token, proof):
        self.g, self.key, self.token, self.proof = guard, key, token, proof

    def __enter__(self):
        tok = self.g.admit(self.key, self.token, self.proof)
        self.g._lock.acquire()
        if self.g._highest.get(self.key) != tok:
            self.g._lock.release()
            raise Refused("a newer token for %r was admitted meanwhile: refused" % self.key)
        return tok

    def __exit__(self, exc_type, exc, tb):
        self.g._lock.release()
        return False
