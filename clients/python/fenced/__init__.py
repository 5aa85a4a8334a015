"""fenced: a client of the fenced fencing-token coordinator, standard
library only.

    from fenced import Client
    client = Client(["127.0.0.1:7700", "127.0.0.1:7701"])
    with client.lease("orders-db", ttl=10) as lease:
        lease.check()                       # still ours, by our clock
        with fence.write("orders-db", lease.token) as db:  # the resource decides
            db.execute("UPDATE ...")
"""

from .client import Client, Grant, KeyInfo, Verdict, new_request_id
from .election import Election, Leader, Observation
from .errors import (BadRequest, Expired, FencedError, Held, LeaseLost, LimitMismatch, NoLeader, NotHolder, NotLeading, Refused, StaleToken,
                     Unavailable, UnknownKey, UnknownOutcome)
from .guard import FenceGuard
from .lease import Lease
from .proof import KeySet, ProofRefused, verify_proof
from .token import MAX_TOKEN, MalformedToken, Token
from .watch import Watch, WatchEvent

__version__ = "0.1.0"

__all__ = [
    "Client", "Grant", "KeyInfo", "Verdict", "Lease", "Watch", "WatchEvent", "Token", "MalformedToken", "MAX_TOKEN", "new_request_id",
    "FencedError", "Held", "LimitMismatch", "NotHolder", "StaleToken", "Expired", "UnknownKey", "BadRequest", "Unavailable",
    "UnknownOutcome", "LeaseLost", "Refused", "Election", "Leader", "Observation", "NotLeading", "NoLeader",
    "FenceGuard", "KeySet", "ProofRefused", "verify_proof",
]
