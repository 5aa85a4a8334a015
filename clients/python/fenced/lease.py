"""A lease kept alive in the background."""

import threading
import time

from .errors import Expired, FencedError, LeaseLost, StaleToken
from .ids import new_request_id

__all__ = ["Lease"]

_SAFE = frozenset({"not_leader", "not_ready", "not_member", "busy", "shutting_down", "unavailable", "outcome_unknown"})


class Lease:
    """A grant kept alive by a background thread.

    ``lost`` (a threading.Event) is set before the server could grant the
    key to anyone else: at the deadline, which is the moment the last
    successful renewal (or the acquire) was SENT, on this process's monotonic
    clock, plus the TTL the SERVER answered, minus ``margin`` (a tenth of that
    TTL by default). Measuring from the send keeps the deadline at or before
    the server's; using the server's TTL matters because an acquire of the
    key by the same holder elsewhere replaces it. A definite refusal of a
    renewal (superseded, expired, released) sets it at once.

    ``lost`` can only be set by a running process: a process frozen past its
    deadline (GC pause, SIGSTOP, a slow disk) wakes up believing it holds the
    key. So a holder checks ``valid()`` right before acting, and the resource
    checks ``token`` (see fenced.sqlite): the resource is what refuses the
    frozen holder.

    Use it with ``with``: acquire on entry, release on exit.
    """

    def __init__(self, client, key, ttl=10.0, holder=None, wait=None, margin=None, value=None):
        if margin is not None and (margin < 0 or margin >= ttl):
            raise ValueError("margin %r must be in [0, ttl)" % (margin,))
        self._client = client
        self.key = key
        self.holder = holder or "py-" + new_request_id()
        self._ttl_asked = ttl
        self._wait = wait
        self._value = value
        # The acquire's request id stays with the grant: an acquire with it
        # again (Election.proclaim) updates this grant while it lives and is
        # refused once it ended, never answered with a new grant.
        self.request_id = new_request_id()
        self._margin = margin
        self.lost = threading.Event()
        self.error = None
        self.token = None
        self.grant = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._deadline = 0.0
        self._server_ttl = 0.0
        self._thread = None

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.release()
        except FencedError:
            if exc_type is None:
                raise
            # The body's own exception is the one to see; the grant ends by
            # its TTL anyway.
        return False

    def acquire(self):
        """Take the key and start the keepalive."""
        sent = time.monotonic()
        g = self._client.acquire(self.key, self.holder, ttl=self._ttl_asked, wait=self._wait, request_id=self.request_id,
                                 value=self._value)
        if time.monotonic() - sent > g.ttl / 3:
            # A waited acquire may return long after it was sent; the lease
            # is only known to run from the send, so renew to count from now.
            sent = time.monotonic()
            try:
                g = self._client.renew(self.key, self.holder, g.token)
            except FencedError as e:
                self._release_quietly(g.token)
                raise LeaseLost("could not renew a grant that took long to come: %s" % e) from e
        self.grant, self.token = g, g.token
        self._renewed(sent, g.ttl)
        self._thread = threading.Thread(target=self._keepalive, name="fenced-lease-" + self.key, daemon=True)
        self._thread.start()
        return self

    def release(self):
        """Stop the keepalive and end the grant. A grant that had ended
        already counts as released."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.token is None:
            return
        self._lose(LeaseLost("released"))
        self._release_quietly(self.token)

    def _release_quietly(self, token):
        try:
            self._client.release(self.key, self.holder, token)
        except (Expired, StaleToken):
            pass

    # -- state -------------------------------------------------------------

    @property
    def deadline(self):
        """The monotonic time until which the lease is known to be held."""
        with self._lock:
            return self._deadline

    def valid(self):
        """True while the lease is held: not lost and before the deadline,
        checked on the clock now (not by the background thread)."""
        return not self.lost.is_set() and time.monotonic() < self.deadline

    def check(self):
        """Raise LeaseLost unless valid()."""
        if not self.valid():
            raise LeaseLost("lease on %r lost: %s" % (self.key, self.error or "deadline passed"))

    def _renewed(self, sent, ttl):
        margin = self._margin if self._margin is not None else ttl / 10
        with self._lock:
            self._server_ttl = ttl
            self._deadline = sent + ttl - margin

    def _lose(self, err):
        with self._lock:
            if self.lost.is_set():
                return
            self.error = err
            self.lost.set()

    # -- keepalive ---------------------------------------------------------

    def _keepalive(self):
        """Renew every third of the server's TTL; give up at the deadline.
        A definite refusal ends the lease at once; a 503 or an unknown
        outcome is retried quickly until the deadline."""
        every = self._server_ttl / 3
        next_renew = time.monotonic() + every
        while not self._stop.is_set():
            now = time.monotonic()
            dl = self.deadline
            if now >= dl:
                self._lose(LeaseLost("could not renew before the deadline"))
                return
            if self._stop.wait(max(0.0, min(next_renew, dl) - now)):
                return
            if time.monotonic() >= self.deadline:
                self._lose(LeaseLost("could not renew before the deadline"))
                return
            if time.monotonic() < next_renew:
                continue
            sent = time.monotonic()
            try:
                g = self._client.renew(self.key, self.holder, self.token, timeout=max(0.05, self.deadline - sent))
            except FencedError as e:
                if e.code in _SAFE:
                    next_renew = time.monotonic() + min(every, 0.1)
                    continue
                self._lose(LeaseLost("renewal refused: %s" % e))
                return
            self._renewed(sent, g.ttl)
            every = g.ttl / 3
            next_renew = time.monotonic() + every
