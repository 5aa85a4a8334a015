"""The fenced client: endpoints tried in turn, retries only where safe."""

import http.client
import ipaddress
import json
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Optional

from .durations import _duration, parse_duration
from .election import Election
from .errors import BadRequest, FencedError, Unavailable, UnknownOutcome, error_of
from .ids import new_request_id
from .lease import Lease
from .token import Token
from .watch import Watch

__all__ = ["Client", "Grant", "Verdict", "KeyInfo", "new_request_id"]

LEADER_HEADER = "X-Fenced-Leader"

# Codes that say the request was not served: another node may serve it.
_SAFE_TO_RETRY = frozenset({"not_leader", "not_ready", "not_member", "busy", "shutting_down", "unavailable"})


@dataclass(frozen=True)
class Grant:
    """A grant: the key, its holder, its fencing token and the TTL the server
    answered (in seconds: time the lease by it, not by the TTL asked for)."""
    key: str
    holder: str
    token: Token
    ttl: float
    renewed: bool = False
    value: str = ""
    #: The grant's proof (a JWS a FenceGuard with keys checks offline; "" when the leader's key was not yet published).
    proof: str = ""
    # limit is the key's limit when the grant is a semaphore permit; mode is
    # "shared" for a shared grant.
    limit: int = 0
    mode: str = ""

    @classmethod
    def of(cls, d):
        return cls(key=d["key"], holder=d["holder"], token=Token.parse(d["token"]), ttl=parse_duration(d["ttl"]),
                   renewed=bool(d.get("renewed", False)), value=d.get("value", ""), limit=int(d.get("limit", 0)),
                   mode=d.get("mode", ""), proof=d.get("proof", ""))


@dataclass(frozen=True)
class Verdict:
    """The answer of verify. ``allow`` is true only when the cluster proved the
    token is the key's current live grant."""
    allow: bool
    reason: str
    current_token: Optional[Token] = None
    holder: str = ""


@dataclass(frozen=True)
class KeyInfo:
    """One key's state. ``index`` is the log index of its last change;
    ``value`` what its holder published."""
    key: str
    holder: str
    token: Token
    state: str
    ttl: float
    index: int = 0
    value: str = ""


# A bare endpoint: a host name, an IPv4 address or a bracketed IPv6 one,
# and an optional port. Anything else without "://" is more likely a
# mistyped URL ("htps:/host") than a host.
_HOST_PORT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::[0-9]{1,5})?")


def _endpoint(e, tls):
    """The URL of an endpoint as given; ValueError when it is not one the
    client can reach. A scheme other than http or https is an error, never a
    guess: "htps://host" read as plain http would send in clear what was
    meant for TLS."""
    if "://" in e:
        scheme, rest = e.split("://", 1)
        if scheme.lower() not in ("http", "https"):
            raise ValueError("endpoint %r: unknown scheme %r (use http:// or https://)" % (e, scheme))
        e = scheme.lower() + "://" + rest
    elif _HOST_PORT.fullmatch(e):
        e = "http://" + e
    else:
        raise ValueError("endpoint %r is neither host:port nor an http(s):// URL" % (e,))
    u = urllib.parse.urlsplit(e)
    try:
        port = u.port
    except ValueError:
        port = None
        u = None
    if u is None or not u.hostname or (port is None and u.netloc.rsplit("]", 1)[-1].count(":")) or u.query or u.fragment:
        raise ValueError("endpoint %r is not a URL the client can reach (host, optional port and path)" % (e,))
    if tls and u.scheme == "http":
        e = "https://" + e[len("http://"):]
    return e.rstrip("/")


class _NotSent(Exception):
    """The request never reached a server (no connection)."""


def _loopback(endpoint):
    """Whether an http(s) endpoint names this machine: localhost or a
    loopback address, where a token in clear leaves no host."""
    host = urllib.parse.urlsplit(endpoint).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False



def _grant_refs(grants):
    """The ``keys`` of a set's release or renewal: Grants (of
    acquire_multi) or (key, token) pairs."""
    out = []
    for g in grants:
        key, token = (g.key, g.token) if isinstance(g, Grant) else g
        out.append({"key": key, "token": str(Token(token))})
    return out

class Client:
    """A client of a fenced cluster through any of its nodes.

    It retries only what is safe: requests that were not served (a node
    down, no leader: 503 codes), and writes whose outcome is unknown (504
    ``outcome_unknown``, or a connection lost after the request was sent),
    which are idempotent by construction (an acquire keeps its request id and
    holder; a release of a released grant succeeds). An unknown outcome is
    never reported as a failure: it is retried until a definite answer or
    the deadline, and then raised as UnknownOutcome.
    """

    def __init__(self, endpoints, token=None, timeout=30.0, ssl_context=None, attempt_timeout=5.0, insecure=False):
        """endpoints: "host:port" or http(s) URLs, a list or one
        comma-separated string. With ssl_context every endpoint is reached
        with https (as the Go client's WithTLS). A bearer token is sent only
        over https or to a loopback address (a development node), unless
        insecure=True says plain http to other hosts is meant (a trusted
        network): anyone on the path of a plain request can read the token and
        act as its owner."""
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        self._endpoints = []
        for e in endpoints:
            e = e.strip()
            if e:
                self._endpoints.append(_endpoint(e, tls=ssl_context is not None))
        if not self._endpoints:
            raise ValueError("no endpoints")
        if token and not insecure:
            plain = [e for e in self._endpoints if e.startswith("http://") and not _loopback(e)]
            if plain:
                raise ValueError("refusing to send a bearer token over plain http to %s: use https:// endpoints (or an "
                                 "ssl_context), or pass insecure=True to send it in clear" % ", ".join(plain))
        self._token = token
        self._timeout = timeout
        # A node that accepts connections but never answers (frozen by
        # SIGSTOP, a long GC pause) would hold a request until the deadline:
        # each attempt gets at most this long (plus an acquire's wait), and
        # then the next node is tried.
        self._attempt_timeout = attempt_timeout
        self._ssl = ssl_context
        self._lock = threading.Lock()
        self._preferred = 0

    @property
    def endpoints(self):
        return list(self._endpoints)

    # -- operations -------------------------------------------------------

    def acquire(self, key, holder, ttl=None, wait=None, request_id=None, lock_delay=None, timeout=None, value=None,
                limit=None, mode=None):
        """Take key for holder and return the Grant. Raises Held (``held_by``)
        when someone else has it. A retry after an unknown outcome keeps the
        request id, so one call never makes two grants. ``value`` (at most
        1 KiB of text) is published with the grant; an acquire by the
        holder of the grant replaces it and keeps the token.

        ``limit`` (1 to 1024) takes one of the key's permits, the key being a
        semaphore of that many: each permit has its own token; another
        limit while any permit is live raises LimitMismatch. ``mode="shared"``
        takes a shared grant (readers): shared grants coexist, an exclusive
        one (the default) excludes them all."""
        body = {"key": key, "holder": holder, "request_id": request_id or new_request_id()}
        if value:
            body["value"] = value
        if limit is not None:
            body["limit"] = int(limit)
        if mode:
            body["mode"] = mode
        if ttl is not None:
            body["ttl"] = _duration(ttl)
        if wait:
            body["wait"] = _duration(wait)
        if lock_delay:
            body["lock_delay"] = _duration(lock_delay)
        if timeout is None and wait:
            timeout = self._timeout + parse_duration(body["wait"])
        extra = parse_duration(body["wait"]) if wait else 0.0
        return Grant.of(self._do("POST", "/v1/acquire", body, write=True, timeout=timeout, attempt_extra=extra))

    def acquire_multi(self, keys, holder, ttl=None, wait=None, request_id=None, timeout=None):
        """Take every key of ``keys`` (1 to 64, distinct) for holder in one
        step, or none, and return a Grant per key in order (each key its own
        lock, with its own token). Raises Held naming the first key held by
        someone else; with ``wait``, waits holding none of them."""
        body = {"keys": list(keys), "holder": holder, "request_id": request_id or new_request_id()}
        if ttl is not None:
            body["ttl"] = _duration(ttl)
        if wait:
            body["wait"] = _duration(wait)
        if timeout is None and wait:
            timeout = self._timeout + parse_duration(body["wait"])
        extra = parse_duration(body["wait"]) if wait else 0.0
        out = self._do("POST", "/v1/acquire/multi", body, write=True, timeout=timeout, attempt_extra=extra)
        return [Grant.of(g) for g in out.get("grants", [])]

    def renew_multi(self, grants, holder, timeout=None):
        """Extend the lease of each of a set of holder's grants by its TTL,
        all or none: ``grants`` is the list acquire_multi returned, or
        ``(key, token)`` pairs (1 to 64, distinct keys). A set naming a
        grant that is not live raises what renew of it alone would, the key
        named in the message, and renews none. Returns a Grant per key."""
        body = {"keys": _grant_refs(grants), "holder": holder, "request_id": new_request_id()}
        out = self._do("POST", "/v1/renew/multi", body, write=True, timeout=timeout)
        return [Grant.of(r) for r in out.get("renewed", [])]

    def release_multi(self, grants, holder, timeout=None, request_id=None):
        """End a set of holder's grants in one step, all or none: ``grants``
        is the list acquire_multi returned, or ``(key, token)`` pairs (1 to
        64, distinct keys). A set naming a grant that is not the holder's
        live one raises what release of it alone would, the key named in
        the message, and ends none. Safe to retry as release is: the
        request id is the same on every attempt. Returns the released
        grants (dicts), in order."""
        body = {"keys": _grant_refs(grants), "holder": holder, "request_id": request_id or new_request_id()}
        out = self._do("POST", "/v1/release/multi", body, write=True, timeout=timeout)
        return out.get("released", [])

    def renew(self, key, holder, token, timeout=None):
        """Extend one grant's lease by its TTL; returns the Grant with the
        server's TTL. Every write carries a request id, the same on every
        attempt."""
        body = {"key": key, "holder": holder, "token": str(Token(token)), "request_id": new_request_id()}
        return Grant.of(self._do("POST", "/v1/renew", body, write=True, timeout=timeout))

    def keepalive(self, holder):
        """Extend the leases of every key of holder; returns their grants."""
        out = self._do("POST", "/v1/keepalive", {"holder": holder, "request_id": new_request_id()}, write=True)
        return [Grant.of(r) for r in out.get("renewed", [])]

    def release(self, key, holder, token, timeout=None, request_id=None):
        """End a grant. Safe to retry: the request id (made when not given)
        is the same on every attempt, and the cluster applies it once, so a
        retry after a lost answer is answered with the grant the first
        attempt ended, never an effect on a later grant."""
        body = {"key": key, "holder": holder, "token": str(Token(token)), "request_id": request_id or new_request_id()}
        return self._do("POST", "/v1/release", body, write=True, timeout=timeout)

    def verify(self, key, token, holder="", timeout=None):
        """Is token the key's current live grant? Fails closed: a malformed
        token is the verdict ``malformed``, a cluster that cannot answer
        before the deadline ``unavailable``; neither raises."""
        try:
            text = str(Token(token))
        except ValueError:
            return Verdict(False, "malformed")
        deadline = time.monotonic() + (timeout or self._timeout)
        backoff = 0.02
        body = {"key": key, "token": text}
        if holder:
            body["holder"] = holder
        while True:
            try:
                out = self._do("POST", "/v1/verify", body, write=False, deadline=deadline)
            except BadRequest:
                return Verdict(False, "malformed")
            except FencedError:
                return Verdict(False, "unavailable")
            if out.get("reason") != "unavailable":
                cur = out.get("current_token")
                return Verdict(bool(out.get("allow")) is True and out.get("reason") == "ok", out.get("reason", ""),
                               Token.parse(cur) if cur else None, out.get("holder", ""))
            if time.monotonic() + backoff > deadline:
                return Verdict(False, "unavailable")
            time.sleep(backoff)
            backoff = min(2 * backoff, 0.5)
            self._prefer((self._start() + 1) % len(self._endpoints))

    def key(self, key):
        """One key's state, read linearizably; raises UnknownKey."""
        d = self._do("GET", "/v1/keys/" + urllib.parse.quote(key, safe=""), None, write=False)
        return KeyInfo(d["key"], d["holder"], Token.parse(d["token"]), d["state"], parse_duration(d["ttl"]),
                       int(d.get("index", 0)), d.get("value", ""))

    def status(self):
        """The status of the first node that answers (a dict)."""
        return self._do("GET", "/v1/cluster", None, write=False)

    def lease(self, key, ttl=10.0, holder=None, wait=None, margin=None, value=None):
        """A Lease on key, to use with ``with``: acquired on entry, kept alive
        in the background, released on exit. See Lease."""
        return Lease(self, key, ttl=ttl, holder=holder, wait=wait, margin=margin, value=value)

    def election(self, name, holder=None, ttl=10.0, margin=None, value=""):
        """The candidate holder in the election named by key name. See
        Election."""
        return Election(self, name, holder=holder, ttl=ttl, margin=margin, value=value)

    def watch(self, key=None, prefix=None, start=None, progress=None):
        """Follow the changes of key, or of every key with prefix (neither:
        every key), from the current state or after log index start. A
        Watch: iterate it, close it. See Watch."""
        return Watch(self, key=key, prefix=prefix, start=start, progress=progress)

    # -- transport --------------------------------------------------------

    def _start(self):
        with self._lock:
            return self._preferred

    def _prefer(self, i):
        with self._lock:
            self._preferred = i

    def _learn_leader(self, addr, answered):
        """Prefer the leader's endpoint when it is one of ours, else the
        endpoint that answered."""
        for i, ep in enumerate(self._endpoints):
            if addr and ep.endswith("://" + addr):
                self._prefer(i)
                return
        for i, ep in enumerate(self._endpoints):
            if ep == answered:
                self._prefer(i)
                return

    def _do(self, method, path, body, write, timeout=None, deadline=None, attempt_extra=0.0):
        """Send to the endpoints in turn until one serves the request or the
        deadline passes. See the class docstring for what is retried."""
        data = json.dumps(body).encode() if body is not None else None
        if deadline is None:
            deadline = time.monotonic() + (timeout or self._timeout)
        unknown = False
        backoff = 0.02
        start = self._start()
        attempt = 0
        last = None
        while True:
            ep = self._endpoints[(start + attempt) % len(self._endpoints)]
            try:
                return self._once(ep, method, path, data, min(deadline, time.monotonic() + self._attempt_timeout + attempt_extra))
            except _NotSent as e:
                last = e
            except FencedError as e:
                last = e
                if e.code == "outcome_unknown":
                    unknown = True
                elif e.code not in _SAFE_TO_RETRY:
                    if unknown and write:
                        # An earlier attempt may have been committed, and be
                        # why this one was refused: not a definite no.
                        raise UnknownOutcome("%s (an earlier attempt may have been committed)" % e, status=e.status,
                                             body=e.body) from e
                    raise
            except (OSError, http.client.HTTPException) as e:
                last = e
                if write:
                    unknown = True
            if time.monotonic() >= deadline:
                if unknown:
                    raise UnknownOutcome("outcome unknown: %s" % last) from None
                raise Unavailable("cluster unavailable: %s" % last) from None
            attempt += 1
            if attempt % len(self._endpoints) == 0:
                time.sleep(max(0.0, min(backoff, deadline - time.monotonic())))
                backoff = min(2 * backoff, 0.5)

    def _connection(self, endpoint, connect_timeout):
        """An unconnected connection to endpoint, and the endpoint's path
        (the prefix of every request path)."""
        u = urllib.parse.urlsplit(endpoint)
        if u.scheme == "https":
            return http.client.HTTPSConnection(u.hostname, u.port, timeout=connect_timeout, context=self._ssl), u.path
        return http.client.HTTPConnection(u.hostname, u.port, timeout=connect_timeout), u.path

    def _authorize(self, headers):
        if self._token:
            headers["Authorization"] = "Bearer " + self._token

    def _answered(self, endpoint):
        """Prefer endpoint next time: it served."""
        self._learn_leader("", endpoint)

    def _once(self, endpoint, method, path, data, deadline):
        """One request. Raises _NotSent when no connection was made, so the
        request cannot have been served."""
        remaining = max(0.05, deadline - time.monotonic())
        conn, base = self._connection(endpoint, min(remaining, 2.0))
        try:
            try:
                conn.connect()
            except OSError as e:
                raise _NotSent("%s: %s" % (endpoint, e)) from e
            conn.sock.settimeout(remaining)
            headers = {"Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = "application/json"
            self._authorize(headers)
            conn.request(method, base + path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            self._learn_leader(resp.getheader(LEADER_HEADER, ""), endpoint)
            try:
                out = json.loads(raw) if raw else {}
            except ValueError:
                out = None
            if resp.status // 100 != 2:
                raise error_of(resp.status, out if isinstance(out, dict) else {},
                               (out or {}).get("message", raw[:200].decode("utf-8", "replace")) if isinstance(out, dict)
                               else raw[:200].decode("utf-8", "replace"))
            if not isinstance(out, dict):
                raise http.client.HTTPException("%s: answer is not a JSON object" % endpoint)
            return out
        except socket.timeout as e:
            raise OSError("%s: timed out" % endpoint) from e
        finally:
            conn.close()
