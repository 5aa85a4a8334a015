"""A fence for SQLite: the resource side of fencing.

The fence table keeps, per key, the highest token a write came with. A write
checks and raises it in ONE statement, in the same transaction as the write
it protects, so a holder that froze after its lease check and woke after
someone else's grant is refused by the database, whatever it believes:

    INSERT INTO fences(key, fence) VALUES(?, ?)
    ON CONFLICT(key) DO UPDATE SET fence = excluded.fence
    WHERE fences.fence <= excluded.fence

Equal tokens pass (the same grant writes many times); lower ones change no
row, and the transaction is rolled back.
"""

import sqlite3

from .errors import Refused
from .proof import verify_proof
from .token import Token

__all__ = ["SQLiteFence"]


class SQLiteFence:
    """Guards writes to a SQLite database with fencing tokens.

    ``with fence.write("orders-db", lease.token) as conn: conn.execute(...)``
    runs the body in a transaction that first raises the key's fence to the
    token; a token lower than the fence raises Refused and nothing is
    written. Tokens fit SQLite's INTEGER: their epoch is below 2^31.
    """

    def __init__(self, conn, table="fences", keys=None, cluster=None, require_proof=False):
        """With keys (a fenced.proof.KeySet), write(key, token, proof)
        checks the proof before the fence is touched, as FenceGuard does."""
        if require_proof and keys is None:
            raise ValueError("require_proof needs keys")
        self.keys, self.require_proof = keys, require_proof
        self.cluster = cluster if cluster is not None else getattr(keys, "cluster", "")
        if not table.isidentifier():
            raise ValueError("table name %r is not an identifier" % table)
        self.conn = conn
        self.table = table
        conn.execute("CREATE TABLE IF NOT EXISTS %s (key TEXT PRIMARY KEY, fence INTEGER NOT NULL)" % table)
        conn.commit()

    def fence(self, key):
        """The highest token seen for key, or None."""
        row = self.conn.execute("SELECT fence FROM %s WHERE key = ?" % self.table, (key,)).fetchone()
        return Token(row[0]) if row else None

    def write(self, key, token, proof=None):
        """A context manager: a transaction whose first statement is the fence
        check. Raises Refused (and rolls back) for a stale token, and
        ProofRefused, before any transaction, for a bad proof."""
        token = Token(token)
        if self.keys is not None and (self.require_proof or proof):
            verify_proof(proof, self.keys, key, token, cluster=self.cluster)
        return _Write(self, key, token)


class _Write:
    def __init__(self, fence, key, token):
        self.f, self.key, self.token = fence, key, token

    def __enter__(self):
        conn = self.f.conn
        if conn.in_transaction:
            raise RuntimeError("SQLiteFence.write must start its own transaction")
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute(
            "INSERT INTO {t}(key, fence) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET fence = excluded.fence "
            "WHERE {t}.fence <= excluded.fence".format(t=self.f.table), (self.key, int(self.token)))
        if cur.rowcount != 1:
            conn.rollback()
            raise Refused("token %s for %r is lower than the fence %s: refused" % (self.token, self.key, self.f.fence(self.key)))
        return conn

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.f.conn.commit()
        else:
            self.f.conn.rollback()
        return False


def _check_upsert():
    """SQLite gained UPSERT in 3.24 (2018)."""
    if sqlite3.sqlite_version_info < (3, 24, 0):
        raise ImportError("fenced.sqlite needs SQLite 3.24 or later (UPSERT), not %s" % sqlite3.sqlite_version)


_check_upsert()
