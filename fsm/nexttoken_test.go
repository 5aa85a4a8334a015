package fsm

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// NextToken names the token the next acquire gets whenever that acquire is
// granted, over random sequences of grants, releases, handoffs, expiries,
// lock-delays, floor raises and new terms; when it names none, the acquire
// is refused. A proof signed for a wrong guess is never handed out (the
// leader compares the grant's claims first), but a guess that is often wrong
// would sign every proof twice.
func TestPropertyNextTokenIsTheGrants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := New(Config{MaxSeq: uint64(rapid.IntRange(2, 6).Draw(t, "maxseq"))})
		a := &applier{f: f}
		term := uint64(1)
		n := rapid.IntRange(1, 200).Draw(t, "n")
		for i := 0; i < n; i++ {
			term += uint64(rapid.IntRange(0, 1).Draw(t, "bump")) * uint64(rapid.IntRange(0, 3).Draw(t, "by"))
			c := genCommand(t, f)
			acq, isAcq := c.(Acquire)
			var guess, guessed = f.NextToken(acq.Key, acq.Holder, term)
			r := a.at(term, c)
			if !isAcq {
				continue
			}
			switch {
			case r.Err == nil && !guessed:
				t.Fatalf("acquire of %s by %s granted %d (renewed %v) with no token guessed", acq.Key, acq.Holder, r.Key.Token, r.Renewed)
			case r.Err == nil && guess != r.Key.Token:
				t.Fatalf("acquire of %s by %s granted %d (renewed %v), guessed %d", acq.Key, acq.Holder, r.Key.Token, r.Renewed, guess)
			}
		}
	})
}

// A key held by another holder, or with live permits, has no next token to
// guess; a key the holder holds has its own.
func TestNextTokenRefusals(t *testing.T) {
	f := New(Config{})
	a := &applier{f: f}
	g := a.at(3, Acquire{Key: "k", Holder: "h1", TTL: time.Second})
	if _, ok := f.NextToken("k", "h2", 3); ok {
		t.Fatal("a token guessed for a key another holder holds")
	}
	if tk, ok := f.NextToken("k", "h1", 4); !ok || tk != g.Key.Token {
		t.Fatalf("the holder's own grant: %d %v, want %d", tk, ok, g.Key.Token)
	}
	a.at(3, Acquire{Key: "s", Holder: "h1", TTL: time.Second, Limit: 2})
	if _, ok := f.NextToken("s", "h2", 3); ok {
		t.Fatal("a token guessed for a semaphore's permit")
	}
	if tk, ok := f.NextToken("new", "h1", 5); !ok || tk != tok(t, 5, 1) {
		t.Fatalf("a new key: %d %v, want %d", tk, ok, tok(t, 5, 1))
	}
}
