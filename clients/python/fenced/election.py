"""An election on a key, as the Go client's Election: the leader is the
holder of the key's grant, and the grant's token is its term of office."""

import threading
import time
from dataclasses import dataclass
from typing import Optional

from .errors import FencedError, LeaseLost, NoLeader, NotLeading, UnknownKey
from .ids import new_request_id
from .lease import Lease
from .token import Token

__all__ = ["Election", "Leader", "Observation"]

# How long one acquire of a campaign waits at the server: below the client's
# default timeout, so a wait never looks like a failure.
CAMPAIGN_WAIT = 15.0

# A campaign tries again after these: someone else leads, or the cluster
# could not answer. Anything else (bad input, credentials) is raised.
_WAIT_AGAIN = frozenset({"held", "lock_delay"})
_RETRY = frozenset({"not_leader", "not_ready", "not_member", "busy", "shutting_down", "unavailable", "outcome_unknown",
                    "lease_lost"})

# A proclaim refused with one of these found the leadership over.
_ENDED = frozenset({"grant_ended", "held", "not_holder", "stale_token", "expired"})


@dataclass(frozen=True)
class Leader:
    """An election's leader as observed: the holder of the key, the token of
    its grant (its term of office: a higher token is a later leader) and the
    value it published. ``holder`` is empty when nobody leads; ``token`` is
    then that of the last leadership, which ended. ``index`` is the log
    index the observation is from."""
    name: str
    holder: str
    token: Optional[Token]
    value: str = ""
    index: int = 0


def _tok(t):
    return int(t) if t is not None else 0


class _Observer:
    """Turns watch events and reads of an election's key into leader
    changes, never going back to an older leadership."""

    def __init__(self, name):
        self.name = name
        self.last = None

    def event(self, ev):
        if ev.type in ("sync", "reset", "error", "lock_delay_ended"):
            # The end of a lock-delay is news for candidates, not observers:
            # the expiry before it already said nobody leads.
            return None
        if ev.type == "state" and ev.state == "absent":
            # The key does not exist: news only when a leader was reported
            # (its leadership ended, and the key was forgotten since).
            last = self.last
            return self.offer(Leader(self.name, "", last.token, "", ev.index)) if last and last.holder else None
        held = ev.state == "held"
        return self.offer(Leader(self.name, ev.holder if held else "", ev.token, ev.value if held else "", ev.index))

    def offer(self, l):
        last = self.last
        if last is not None:
            if l.index and last.index and l.index < last.index:
                return None  # older than what was reported (a stale state after a re-read)
            if _tok(l.token) < _tok(last.token):
                return None
            if _tok(l.token) == _tok(last.token):
                if (l.holder, l.value) == (last.holder, last.value):
                    return None
                if last.holder == "" and l.holder != "":
                    return None  # a leadership that ended stays ended
        self.last = l
        return l


class Observation:
    """The leader of an election and every change of it (a new leader, a new
    value, nobody), from a watch of its key: iterate it or call
    ``get(timeout)``; ``close()`` stops it. It never reports a leader whose
    token is lower than one it reported. After a reset of the watch (lost
    history) it reads the key again, so a change in the gap (even a key
    forgotten since) is reported."""

    def __init__(self, election):
        self._e = election
        self._ob = _Observer(election.name)
        self._watch = election.client.watch(key=election.name)
        self.error = None

    def __iter__(self):
        return self

    def __next__(self):
        l = self.get()
        if l is None:
            raise StopIteration
        return l

    def get(self, timeout=None):
        """The next change; None once the observation ended (closed, or its
        watch refused for good: ``error`` says why). Raises TimeoutError
        when no change came within timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ev = self._watch.get(timeout=left)
            if ev is None:
                self.error = self._watch.error
                return None
            if ev.type == "reset":
                l = self._reread()
            else:
                l = self._ob.event(ev)
            if l is not None:
                return l

    def _reread(self):
        try:
            k = self._e.client.key(self._e.name)
        except UnknownKey:
            last = self._ob.last
            return self._ob.offer(Leader(self._e.name, "", last.token if last else None)) if last and last.holder else None
        except FencedError:
            return None  # the fresh stream's state follows
        held = k.state == "held"
        return self._ob.offer(Leader(self._e.name, k.holder if held else "", k.token, k.value if held else "", k.index))

    def close(self):
        self._watch.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Election:
    """One candidate (``holder``) in the election named by a key.

    ``campaign()`` blocks until this candidate leads; ``token`` is then the
    term of office, to send with every write to a fenced resource, and
    ``lost`` is set when the leadership is lost or could be (the lease's
    deadline, on this process's clock) or resigned. ``proclaim(value)``
    publishes a new value under the same token; ``leader()`` reads the
    current leader; ``observe()`` follows it.
    """

    def __init__(self, client, name, holder=None, ttl=10.0, margin=None, value=""):
        if not isinstance(name, str) or not name:
            raise ValueError("an election is named by a non-empty key, not %r" % (name,))
        if margin is not None and (margin < 0 or margin >= ttl):
            raise ValueError("margin %r must be in [0, ttl)" % (margin,))
        self.client = client
        self.name = name
        self.holder = holder or "py-" + new_request_id()
        self.ttl = ttl
        self.margin = margin
        self._value = value or ""
        self._lock = threading.Lock()
        self._lease = None

    @property
    def lease(self):
        """The leadership's Lease, or None."""
        with self._lock:
            return self._lease

    @property
    def value(self):
        with self._lock:
            return self._value

    def leading(self):
        """Whether this candidate leads now, by the lease's clock."""
        lease = self.lease
        return lease is not None and lease.valid()

    @property
    def token(self):
        """The term of office, or None when this candidate never led."""
        lease = self.lease
        return lease.token if lease is not None else None

    @property
    def lost(self):
        """A threading.Event set when the leadership is lost or resigned; set
        already when this candidate does not lead."""
        lease = self.lease
        if lease is None:
            ev = threading.Event()
            ev.set()
            return ev
        return lease.lost

    @property
    def error(self):
        """Why the leadership was lost, or NotLeading."""
        lease = self.lease
        if lease is None:
            return NotLeading("not leading")
        return lease.error

    def check(self):
        """Raise NotLeading unless leading()."""
        if not self.leading():
            raise NotLeading("%s does not lead %r: %s" % (self.holder, self.name, self.error or "deadline passed"))

    def campaign(self, timeout=None):
        """Block until this candidate leads (waiting in the key's queue while
        someone else does, and through a lock-delay), or raise TimeoutError
        after timeout seconds."""
        if self.leading():
            return self
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = 0.05
        while True:
            wait = CAMPAIGN_WAIT
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait < 0.05:
                    raise TimeoutError("%s did not win %r within %ss" % (self.holder, self.name, timeout))
            lease = Lease(self.client, self.name, ttl=self.ttl, holder=self.holder, wait=wait, margin=self.margin,
                          value=self.value or None)
            try:
                lease.acquire()
            except FencedError as e:
                if e.code in _WAIT_AGAIN:
                    backoff = 0.05  # someone leads: wait in the queue again at once
                elif e.code not in _RETRY:
                    raise
            else:
                with self._lock:
                    self._lease = lease
                return self
            pause = backoff if deadline is None else min(backoff, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            backoff = min(2 * backoff, 2.0)

    def resign(self):
        """End the leadership, so that another candidate is elected at once.
        Nothing happens when this candidate does not lead."""
        with self._lock:
            lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()

    def proclaim(self, value):
        """Publish value for the leadership, keeping its token. Raises
        NotLeading, and publishes nothing, when the leadership ended.

        The update is an acquire with the request id that made the grant:
        fenced answers it with the grant while it lives and refuses it once
        the grant ended, so a proclaim never makes a new grant, even when the
        key is free."""
        lease = self.lease
        if lease is None or not lease.valid():
            raise NotLeading("%s does not lead %r: nothing proclaimed" % (self.holder, self.name))
        try:
            g = self.client.acquire(self.name, self.holder, ttl=lease.grant.ttl, request_id=lease.request_id,
                                    value=value or None, timeout=max(0.05, lease.deadline - time.monotonic()))
        except FencedError as e:
            if e.code in _ENDED:
                lease._lose(LeaseLost("the grant ended: %s" % e))
                raise NotLeading("the leadership of token %s ended: %s" % (lease.token, e)) from e
            raise
        if g.token != lease.token:
            # Only a server without request ids would do this: the grant is
            # not this leadership's, so it is given back, not kept.
            try:
                self.client.release(self.name, self.holder, g.token)
            except FencedError:
                pass
            lease._lose(LeaseLost("the grant ended"))
            raise NotLeading("the leadership of token %s ended" % lease.token)
        with self._lock:
            self._value = value or ""

    def leader(self):
        """The current leader, read linearizably; raises NoLeader when
        nobody holds the key."""
        try:
            k = self.client.key(self.name)
        except UnknownKey:
            raise NoLeader("nobody leads %r" % self.name) from None
        if k.state != "held":
            raise NoLeader("nobody leads %r (the last grant %s)" % (self.name, k.state))
        return Leader(self.name, k.holder, k.token, k.value, k.index)

    def observe(self):
        """An Observation of the leader and its changes."""
        return Observation(self)
