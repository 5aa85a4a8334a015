"""The token rule of testdata/tokens.json, the table fence.Parse (Go) and the
JavaScript client are tested against too."""

import json
import os
import sqlite3
import sys
import unittest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from fenced import MalformedToken, Token  # noqa: E402
from fenced.sqlite import SQLiteFence  # noqa: E402

from tests.harness import ROOT  # noqa: E402


def token_cases():
    with open(os.path.join(ROOT, "testdata", "tokens.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    if not cases:
        raise AssertionError("testdata/tokens.json has no cases")
    return cases


def canonical_digits(text):
    """Whether text is what str(int) writes: Python's int() also takes
    spaces, signs, underscores and non-ASCII digits, which the table calls
    invalid for reasons of text, not of value."""
    return text.isascii() and text.isdigit() and str(int(text)) == text


class SharedTokenCasesTest(unittest.TestCase):
    def test_parse(self):
        for c in token_cases():
            with self.subTest(input=c["input"], why=c["why"]):
                if c["valid"]:
                    t = Token.parse(c["input"])
                    self.assertEqual(int(t), int(c["value"]))
                    self.assertEqual(str(t), c["input"])
                    self.assertEqual(Token.parse(str(t)), t)
                else:
                    with self.assertRaises(MalformedToken):
                        Token.parse(c["input"])

    def test_constructor_from_text(self):
        for c in token_cases():
            with self.subTest(input=c["input"], why=c["why"]):
                if c["valid"]:
                    self.assertEqual(int(Token(c["input"])), int(c["value"]))
                else:
                    with self.assertRaises(MalformedToken):
                        Token(c["input"])

    def test_constructor_from_int(self):
        # An out-of-range value is refused whether it comes as text or as an
        # int: 2^63, 2^64, seq 0.
        for c in token_cases():
            if not canonical_digits(c["input"]):
                continue
            with self.subTest(input=c["input"], why=c["why"]):
                if c["valid"]:
                    self.assertEqual(str(Token(int(c["input"]))), c["input"])
                else:
                    with self.assertRaises(MalformedToken):
                        Token(int(c["input"]))

    def test_not_text_nor_int(self):
        for bad in [None, 1.0, True, b"1", [1]]:
            with self.subTest(bad=bad):
                with self.assertRaises(MalformedToken):
                    Token(bad)
                with self.assertRaises(MalformedToken):
                    Token.parse(bad)

    def test_the_sqlite_fence_refuses_a_malformed_token_and_changes_nothing(self):
        conn = sqlite3.connect(":memory:", isolation_level=None)
        f = SQLiteFence(conn)
        for c in token_cases():
            if c["valid"]:
                continue
            with self.subTest(input=c["input"]):
                with self.assertRaises(MalformedToken):
                    with f.write("k", c["input"]):
                        self.fail("a malformed token was admitted")
        self.assertIsNone(f.fence("k"))
        self.assertFalse(conn.in_transaction)


if __name__ == "__main__":
    unittest.main()
