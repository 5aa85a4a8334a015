"""The watch stream (GET /v1/watch, server-sent events), resumed across
nodes the way the Go client's Client.Watch does it."""

import http.client
import json
import queue
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Optional

from .durations import _duration, parse_duration
from .errors import FencedError, error_of
from .token import Token

__all__ = ["Watch", "WatchEvent"]

# Event types beyond the changes of keys (granted, renewed, released,
# force_released, expired, lock_delay_ended, handed_off).
STATE, SYNC, RESET, ERROR = "state", "sync", "reset", "error"
#: What a node that cannot serve a stream now sends before it ends it; the
#: watch reconnects, and never delivers it.
UNAVAILABLE = "unavailable"

# A watch refused with one of these would be refused again however often it
# is asked: bad parameters, credentials, no such route.
_REFUSED_FOR_GOOD = frozenset({400, 401, 403, 404})

# The server's default progress interval (api.DefaultProgress).
_DEFAULT_PROGRESS = 10.0

_MAX_LINE = 1 << 20


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch. ``type`` is the event's name: a change of a key
    (``granted``, ``renewed``, ``released``, ``force_released``,
    ``expired``, ``lock_delay_ended``, ``handed_off``), ``state`` (a key's
    state when a stream starts afresh), ``sync`` (every change up to
    ``index`` was delivered), ``reset`` (history was lost: whoever builds a
    view from the events starts over; ``reason`` says why) or ``error`` (the
    watch was refused for good and ends; ``reason`` says why). ``index`` is
    the log index of the change; TTLs are in seconds."""
    type: str
    index: int = 0
    key: str = ""
    holder: str = ""
    token: Optional[Token] = None
    state: str = ""
    ttl: Optional[float] = None
    lock_delay: Optional[float] = None
    prev_holder: str = ""
    prev_token: Optional[Token] = None
    ended: str = ""
    reason: str = ""
    value: str = ""


def _event(name, data):
    """The WatchEvent of one server-sent event; ValueError for data that is
    not an event (a malformed token included: the stream is then read from
    another node)."""
    d = json.loads(data)
    if not isinstance(d, dict):
        raise ValueError("watch: event %r is not a JSON object" % name)

    def text(field):
        v = d.get(field, "")
        if not isinstance(v, str):
            raise ValueError("watch: field %r of event %r is not text" % (field, name))
        return v

    def token(field):
        v = text(field)
        return Token.parse(v) if v else None

    def duration(field):
        v = text(field)
        return parse_duration(v) if v else None

    index = d.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError("watch: event %r has index %r" % (name, index))
    return WatchEvent(type=name or text("type"), index=index, key=text("key"), holder=text("holder"), token=token("token"),
                      state=text("state"), ttl=duration("ttl"), lock_delay=duration("lock_delay"),
                      prev_holder=text("prev_holder"), prev_token=token("prev_token"), ended=text("ended"),
                      reason=text("reason"), value=text("value"))


def _parse_id(text):
    if not (0 < len(text) <= 20 and text.isascii() and text.isdigit()):
        raise ValueError("watch: bad event id %r" % text)
    return int(text)


def _sse(fp):
    """(id, name, data) of each complete event of a stream, as the Go
    client's reader takes them: comments and retry ignored, an event without
    data dropped. The end of the stream is an error: a watch never ends by
    itself."""
    eid, name, data = None, "", []
    while True:
        line = fp.readline(_MAX_LINE + 1)
        if not line:
            raise ConnectionError("watch: the stream ended")
        if len(line) > _MAX_LINE:
            raise ValueError("watch: event line too long")
        line = line.decode("utf-8")
        if line.endswith("\n"):
            line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
        if not line:
            if data:
                yield eid, name, "\n".join(data)
            eid, name, data = None, "", []
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "id":
            eid = value
        elif field == "event":
            name = value
        elif field == "data":
            data.append(value)


class _Resync(Exception):
    """The stream ended and cannot be resumed: start over from the current
    state."""


class _Refused(Exception):
    def __init__(self, err):
        super().__init__(str(err))
        self.err = err


_END = object()


class Watch:
    """Changes of a key (``key=``) or of every key with a prefix
    (``prefix=``; ``""`` is every key), from the current state or, with
    ``start``, after that log index.

    Iterate it (``for ev in watch``) or call ``get(timeout)``; ``close()``
    (or leaving a ``with`` block) stops it. A background thread reads the
    stream and reconnects by itself, to any endpoint, resuming after the
    last event it delivered (``Last-Event-ID``): an event is delivered once,
    in log order, and none is skipped silently. When the history is lost
    (the node answers ``410 compacted``, or sends ``reset``) it delivers a
    ``reset`` event, then the current state again as ``state`` events and a
    ``sync``: whoever builds a view from the events starts over at a reset.
    A watch the cluster refuses for good (bad parameters, credentials) ends
    with one ``error`` event; ``error`` then holds the FencedError.

    A stream that sends nothing for three progress intervals (a node that
    froze or was cut off) is abandoned and resumed elsewhere.
    """

    def __init__(self, client, key=None, prefix=None, start=None, progress=None, buffer=64):
        if key is not None and prefix is not None:
            raise ValueError("watch a key or a prefix, not both")
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError("key must be a non-empty string, not %r" % (key,))
        if prefix is not None and not isinstance(prefix, str):
            raise ValueError("prefix must be a string, not %r" % (prefix,))
        if start is not None and (isinstance(start, bool) or not isinstance(start, int) or start < 0):
            raise ValueError("start must be a log index (an int >= 0), not %r" % (start,))
        if progress is not None and (isinstance(progress, bool) or not isinstance(progress, (int, float)) or progress <= 0):
            raise ValueError("progress must be a positive number of seconds, not %r" % (progress,))
        self._client = client
        self._key, self._prefix, self._progress = key, prefix, progress
        self._q = queue.Queue(maxsize=max(1, buffer))
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conn = None
        self._ended = False
        self._last = start or 0
        self._fresh = start is None
        self.error = None
        self.last_error = None
        self._thread = threading.Thread(target=self._run, name="fenced-watch", daemon=True)
        self._thread.start()

    # -- the caller's side -------------------------------------------------

    def __iter__(self):
        return self

    def __next__(self):
        ev = self.get()
        if ev is None:
            raise StopIteration
        return ev

    def get(self, timeout=None):
        """The next event; None once the watch ended (closed, or refused for
        good after its ``error`` event). Raises TimeoutError when none came
        within timeout seconds."""
        if self._ended or self._stop.is_set():
            return None
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no watch event within %ss" % timeout) from None
        if item is _END or self._stop.is_set():
            self._ended = True
            return None
        return item

    @property
    def last_index(self):
        """The index of the last event with an id that the watch took: pass
        it as ``start`` to a later watch to resume after it."""
        with self._lock:
            return self._last

    def close(self):
        """Stop the watch: the stream is closed and iteration ends."""
        self._stop.set()
        with self._lock:
            conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- the reader thread -------------------------------------------------

    def _put(self, ev):
        while not self._stop.is_set():
            try:
                self._q.put(ev, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _run(self):
        try:
            self._loop()
        except Exception as e:  # noqa: BLE001 - a bug must end the watch visibly, not hang it
            self.error = e
            self._put(WatchEvent(type=ERROR, reason="watch failed: %r" % (e,)))
        finally:
            while True:
                try:
                    self._q.put(_END, timeout=0.2)
                    break
                except queue.Full:
                    if self._stop.is_set():
                        break

    def _loop(self):
        eps = self._client._endpoints
        backoff = 0.05
        attempt = self._client._start()
        while not self._stop.is_set():
            ep = eps[attempt % len(eps)]
            before = (self._last, self._fresh)
            try:
                self._stream(ep)
            except _Resync:
                with self._lock:
                    self._last, self._fresh = 0, True
                continue
            except _Refused as e:
                self.error = e.err
                self._put(WatchEvent(type=ERROR, reason=str(e.err)))
                return
            except (OSError, http.client.HTTPException, ValueError, FencedError) as e:
                self.last_error = e
            finally:
                with self._lock:
                    self._conn = None
            if (self._last, self._fresh) != before:
                backoff = 0.05  # the endpoint served: try it again first
            else:
                attempt += 1
            if self._stop.wait(backoff):
                return
            backoff = min(2 * backoff, 2.0)

    def _stream(self, endpoint):
        q = {}
        if self._key is not None:
            q["key"] = self._key
        elif self._prefix:
            q["prefix"] = self._prefix
        if self._progress is not None:
            q["progress"] = _duration(self._progress)
        headers = {"Accept": "text/event-stream"}
        if not self._fresh:
            headers["Last-Event-ID"] = str(self._last)
        # A node that froze or was cut off sends nothing, not even the sync
        # it owes every progress interval: a read that waits longer than
        # three of them gives the stream up.
        idle = 3 * (self._progress or _DEFAULT_PROGRESS) + 1.0
        conn, base = self._client._connection(endpoint, min(idle, 2.0))
        with self._lock:
            if self._stop.is_set():
                return
            self._conn = conn
        try:
            try:
                conn.connect()
            except OSError as e:
                raise OSError("%s: %s" % (endpoint, e)) from e
            conn.sock.settimeout(idle)
            self._client._authorize(headers)
            conn.request("GET", base + "/v1/watch" + ("?" + urllib.parse.urlencode(q) if q else ""), headers=headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raw = resp.read(64 << 10)
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                body = body if isinstance(body, dict) else {}
                err = error_of(resp.status, body, body.get("message", raw[:200].decode("utf-8", "replace")))
                if err.code == "compacted":
                    self._put(WatchEvent(type=RESET, reason="compacted"))
                    raise _Resync()
                if resp.status in _REFUSED_FOR_GOOD:
                    raise _Refused(err)
                raise err
            self._client._answered(endpoint)
            self._read(resp)
        except socket.timeout as e:
            raise OSError("%s: the watch stream was quiet too long" % endpoint) from e
        finally:
            conn.close()

    def _read(self, resp):
        # State events are held back until the sync that follows them: a
        # stream cut between the two is started afresh, and its states sent
        # once, not twice.
        states = []
        for eid, name, data in _sse(resp):
            ev = _event(name, data)
            if ev.type == RESET:
                self._put(ev)
                raise _Resync()
            if ev.type == UNAVAILABLE:
                # The node cannot serve the stream now (no leader yet, not
                # ready, a limit): a refusal that may pass, here or on
                # another node.
                raise OSError("the watch is unavailable (%s)" % (ev.reason or "unavailable"))
            if eid is None and ev.type == STATE:
                states.append(ev)
                continue
            n = _parse_id(eid) if eid is not None else None
            if n is not None and ev.type != SYNC and not self._fresh and n <= self._last:
                continue  # delivered already, before a reconnection
            for s in states:
                if not self._put(s):
                    return
            states = []
            if not self._put(ev):
                return
            if n is not None:
                with self._lock:
                    self._last, self._fresh = max(self._last, n), False
