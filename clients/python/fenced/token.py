"""Fencing tokens: unsigned 64-bit integers carried as decimal text."""

import re

__all__ = ["Token", "MalformedToken"]

_DECIMAL = re.compile(r"(?:0|[1-9][0-9]{0,18})")


class MalformedToken(ValueError):
    """Text that is not the strict decimal form of a token."""


class Token(int):
    """A fencing token. It compares as an integer (never as text) and is
    written as its decimal text, the only form fenced sends and takes.

    ``Token.parse`` accepts exactly what fenced accepts: ASCII digits only,
    no sign, no spaces, no leading zero, at most 19 digits.
    """

    __slots__ = ()

    def __new__(cls, value):
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise MalformedToken("a token is an int or its decimal text, not %r" % (value,))
        if value < 0 or value >= 1 << 64:
            raise MalformedToken("token %d is outside 0..2^64-1" % value)
        return super().__new__(cls, value)

    @classmethod
    def parse(cls, text):
        """Parse the strict decimal text of a token; raise MalformedToken."""
        if not isinstance(text, str) or _DECIMAL.fullmatch(text) is None:
            raise MalformedToken("not a fencing token (decimal digits, no leading zero, at most 19): %r" % (text,))
        return super().__new__(cls, int(text))

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
