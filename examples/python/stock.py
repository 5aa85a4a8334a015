#!/usr/bin/env python3
"""Reserve the last item in stock, fenced: the Python twin of
examples/stock (Go) and examples/js/stock.mjs.

The holder takes a lease on the item, checks it still holds it, and writes
the reservation through a SQLite fence in the same transaction, so a holder
that froze after its check and woke up after someone else's grant is
refused by the database, whatever it believes about its lease.

    python3 examples/python/stock.py --db stock.db --init 1
    python3 examples/python/stock.py --db stock.db --holder alice

With --wait-for-go the holder stops after its lease check and writes only
when a line arrives on standard input: the window in which a real process is
paused by GC, SIGSTOP or a slow disk. Exit codes: 0 reserved, 1 error,
3 refused by the fence (nothing written), 4 sold out.
"""

import argparse
import os
import sqlite3
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from fenced import Client, Refused  # noqa: E402
from fenced.sqlite import SQLiteFence  # noqa: E402

EXIT_OK, EXIT_ERROR, EXIT_REFUSED, EXIT_SOLD_OUT = 0, 1, 3, 4


def init_db(path, item, qty):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS stock (item TEXT PRIMARY KEY, qty INTEGER NOT NULL)")
    conn.execute("CREATE TABLE IF NOT EXISTS reservations (item TEXT, holder TEXT, token INTEGER)")
    conn.execute("INSERT INTO stock (item, qty) VALUES (?, ?) ON CONFLICT (item) DO UPDATE SET qty = excluded.qty", (item, qty))
    conn.close()


def store(conn, item, holder, qty, token):
    conn.execute("UPDATE stock SET qty = ? WHERE item = ?", (qty, item))
    conn.execute("INSERT INTO reservations (item, holder, token) VALUES (?, ?, ?)", (item, holder, int(token)))


def reserve(args):
    client = Client(args.endpoints)
    key = "stock/" + args.item
    with client.lease(key, ttl=args.ttl, holder=args.holder, wait=args.wait) as lease:
        print("acquired %s token %s" % (args.item, lease.token), flush=True)
        lease.check()  # still ours by our clock: decide under the lease
        conn = sqlite3.connect(args.db, isolation_level=None, timeout=10)
        qty = conn.execute("SELECT qty FROM stock WHERE item = ?", (args.item,)).fetchone()[0]
        if qty == 0:
            print("sold out", flush=True)
            return EXIT_SOLD_OUT
        print("lease checked", flush=True)
        if args.wait_for_go:
            sys.stdin.readline()
        # From here on the holder acts on its belief; only the fence protects.
        if args.no_fence:
            conn.execute("BEGIN IMMEDIATE")
            store(conn, args.item, args.holder, qty - 1, lease.token)
            conn.execute("COMMIT")
        else:
            try:
                with SQLiteFence(conn).write(key, lease.token) as db:
                    store(db, args.item, args.holder, qty - 1, lease.token)
            except Refused as e:
                print("refused: %s" % e, flush=True)
                return EXIT_REFUSED
        print("reserved %s for %s" % (args.item, args.holder), flush=True)
        return EXIT_OK


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoints", default=os.environ.get("FENCE_ENDPOINTS", "127.0.0.1:7700"))
    p.add_argument("--db", default="stock.db")
    p.add_argument("--holder", default="")
    p.add_argument("--item", default="widget")
    p.add_argument("--init", type=int, default=-1, help="create the database with this many items and exit")
    p.add_argument("--ttl", type=float, default=2.0, help="lease TTL, seconds")
    p.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the lock")
    p.add_argument("--wait-for-go", action="store_true")
    p.add_argument("--no-fence", action="store_true", help="write without the fence (to see what it prevents)")
    args = p.parse_args()
    if args.init >= 0:
        init_db(args.db, args.item, args.init)
        return EXIT_OK
    if not args.holder:
        p.error("--holder is required")
    args.endpoints = args.endpoints.split(",")
    try:
        return reserve(args)
    except Exception as e:  # noqa: BLE001 - an example reports and exits
        print("error: %s" % e, file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
