"""Errors of the fenced client. Every answer of the server that is not a
success becomes a FencedError whose ``code`` is the wire code."""

__all__ = [
    "FencedError", "Held", "NotHolder", "StaleToken", "Expired", "UnknownKey",
    "BadRequest", "Unavailable", "UnknownOutcome", "LeaseLost", "Refused", "NotLeading", "NoLeader",
]


class FencedError(Exception):
    """A refusal of the server or a failure to reach it."""

    code = ""
    status = 0

    def __init__(self, message, code="", status=0, body=None):
        super().__init__(message)
        if code:
            self.code = code
        self.status = status
        self.body = body or {}

    @property
    def held_by(self):
        return self.body.get("held_by", "")


class Held(FencedError):
    """Someone else holds the key (``held_by`` says who). Nothing was done."""
    code = "held"


class LimitMismatch(FencedError):
    """The key's live grants are of another shape: a semaphore of another
    limit, shared grants, or a lock. Nothing was done."""
    code = "limit_mismatch"


class NotHolder(FencedError):
    """The holder named does not hold the key. Nothing was done."""
    code = "not_holder"


class StaleToken(FencedError):
    """A newer grant of the key exists. Nothing was done."""
    code = "stale_token"


class Expired(FencedError):
    """The grant's lease ran out. Nothing was done."""
    code = "expired"


class UnknownKey(FencedError):
    """The key was never granted."""
    code = "unknown_key"


class BadRequest(FencedError):
    """The request was malformed. Nothing was done."""
    code = "bad_request"


class Unavailable(FencedError):
    """No node could serve the request. Nothing was done."""
    code = "unavailable"


class UnknownOutcome(FencedError):
    """A write may or may not have been committed. The client retries such
    writes itself (they are idempotent); it raises this only when its
    deadline passes first. Never read it as "failed"."""
    code = "outcome_unknown"


class LeaseLost(FencedError):
    """The lease ended: the grant was lost or could not be renewed in time."""
    code = "lease_lost"


class Refused(FencedError):
    """A resource refused a write whose token is lower than one it saw."""
    code = "refused"


class NotLeading(FencedError):
    """The Election does not lead (never campaigned, resigned, or lost it).
    Nothing was published."""
    code = "not_leading"


class NoLeader(FencedError):
    """Nobody holds the election's key."""
    code = "no_leader"


_BY_CODE = {c.code: c for c in (Held, LimitMismatch, NotHolder, StaleToken, Expired, UnknownKey, BadRequest, Unavailable, UnknownOutcome)}
_BY_CODE["malformed_token"] = BadRequest


def error_of(status, body, message):
    """The exception for a non-2xx answer."""
    code = body.get("code", "") if isinstance(body, dict) else ""
    cls = _BY_CODE.get(code, FencedError)
    return cls("%s (%s)" % (message, code or "http_%d" % status), code=code or "http_%d" % status, status=status,
               body=body if isinstance(body, dict) else {})
