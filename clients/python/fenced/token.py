"""Fencing tokens: epoch<<32 | seq, carried as decimal text."""

import re

__all__ = ["Token", "MalformedToken", "MAX_TOKEN"]

# ASCII only: re's \d and str.isdigit() also match other scripts' digits.
_DECIMAL = re.compile(r"[1-9][0-9]{0,18}")

#: The highest token, 2^63-1: every token fits a signed 64-bit integer
#: (SQLite's INTEGER, Java's long).
MAX_TOKEN = (1 << 63) - 1


class MalformedToken(ValueError):
    """Text (or a number) that is not a fencing token fenced could grant."""


def _check(value, shown):
    if value > MAX_TOKEN:
        raise MalformedToken("not a fencing token: %s is above 2^63-1" % shown)
    if value & 0xFFFFFFFF == 0:
        raise MalformedToken("not a fencing token: %s has seq 0, which is never granted" % shown)


class Token(int):
    """A fencing token. It compares as an integer (never as text) and is
    written as its decimal text, the only form fenced sends and takes.

    ``Token.parse`` accepts exactly what fenced accepts (``fence.Parse``):
    ASCII digits only, no sign, no spaces, no leading zero, at most 2^63-1,
    and a non-zero seq (the low 32 bits). ``Token(int)`` takes the same
    values.
    """

    __slots__ = ()

    def __new__(cls, value):
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise MalformedToken("a token is an int or its decimal text, not %r" % (value,))
        if value < 1:
            raise MalformedToken("not a fencing token: %d is below 1" % value)
        _check(value, "%d" % value)
        return super().__new__(cls, value)

    @classmethod
    def parse(cls, text):
        """Parse the strict decimal text of a token; raise MalformedToken."""
        if not isinstance(text, str) or _DECIMAL.fullmatch(text) is None:
            raise MalformedToken("not a fencing token (ASCII decimal digits, no sign, no leading zero, at most 19): %r"
                                 % (text,))
        value = int(text)
        _check(value, repr(text))
        return super().__new__(cls, value)

    @property
    def epoch(self):
        """The epoch of the grant (the high 32 bits)."""
        return int(self) >> 32

    @property
    def seq(self):
        """The per-key sequence number inside the epoch (the low 32 bits)."""
        return int(self) & 0xFFFFFFFF

    def __str__(self):
        return int.__repr__(self)

    def __repr__(self):
        return "Token(%s)" % int.__repr__(self)
