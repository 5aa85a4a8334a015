"""Request ids. The client sends them and the lease names its holder with
one: a module of their own keeps lease.py from importing client.py, which
imports lease.py."""

import os

__all__ = ["new_request_id"]


def new_request_id():
    """A random request id for an acquire."""
    return os.urandom(12).hex()
