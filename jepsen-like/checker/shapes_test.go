package checker

import (
	"testing"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

func permit(holder string, t fence.Token, limit int) history.Op {
	return history.Op{Kind: history.Acquire, Holder: holder, Granted: t, Limit: limit}
}

func rwAcq(holder string, t fence.Token, mode string) history.Op {
	return history.Op{Kind: history.Acquire, Holder: holder, Granted: t, Mode: mode}
}

func multi(holder string, keys []string, toks ...fence.Token) history.Op {
	return history.Op{Kind: history.AcquireMulti, Holder: holder, Key: keys[0], Keys: keys, Grants: toks}
}

func readKey(key, holder string, t fence.Token, index uint64) history.Op {
	return history.Op{Kind: history.ReadKey, Key: key, CurrentHolder: holder, Current: t, KeyIndex: index}
}

func relKey(key, holder string, t fence.Token) history.Op {
	return history.Op{Kind: history.Release, Key: key, Holder: holder, Token: t}
}

const shapeTTL = 2 * time.Second

// delayed gives an acquire a lock-delay of a second.
func delayed(o history.Op) history.Op {
	o.LockDelay = time.Second
	return o
}

func TestPermitCount(t *testing.T) {
	cases := []struct {
		name string
		b    *h
		pass bool
	}{
		{"two of two live", new(h).add(permit("a", tok(1, 1), 2), 0, 5).add(permit("b", tok(1, 2), 2), 1, 6).
			add(rel("a", tok(1, 1)), 50, 55).add(permit("c", tok(1, 3), 2), 56, 60), true},
		// c's acquire came after a's release was asked for: a may be gone.
		{"a release under way frees a permit", new(h).add(permit("a", tok(1, 1), 2), 0, 5).add(permit("b", tok(1, 2), 2), 1, 6).
			add(rel("a", tok(1, 1)), 50, 80).add(permit("c", tok(1, 3), 2), 56, 60), true},
		// a walked away: its lease may end TTL after its acquire was asked for.
		{"an expired permit frees one", new(h).add(permit("a", tok(1, 1), 2), 0, 5).add(permit("b", tok(1, 2), 2), 1, 6).
			add(permit("c", tok(1, 3), 2), 2001, 2010), true},
		{"three of two live", new(h).add(permit("a", tok(1, 1), 2), 0, 5).add(permit("b", tok(1, 2), 2), 1, 6).
			add(permit("c", tok(1, 3), 2), 10, 12), false},
		// a walked away with a lock-delay: its slot stays taken TTL and the
		// delay after its acquire was asked for.
		{"a permit's lock-delay keeps its slot", new(h).add(delayed(permit("a", tok(1, 1), 2)), 0, 5).add(permit("b", tok(1, 2), 2), 1000, 1006).
			add(permit("c", tok(1, 3), 2), 2001, 2010), false},
		{"a slot free after the lock-delay", new(h).add(delayed(permit("a", tok(1, 1), 2)), 0, 5).add(permit("b", tok(1, 2), 2), 1000, 1006).
			add(permit("c", tok(1, 3), 2), 3001, 3010), true},
		{"a released permit allowed", new(h).add(permit("a", tok(1, 1), 2), 0, 5).add(rel("a", tok(1, 1)), 10, 12).
			add(history.Op{Kind: history.Verify, Token: tok(1, 1), Allow: true}, 13, 14), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r := PermitCount(c.b.ops, shapeTTL); r.Pass != c.pass {
				t.Fatalf("pass=%v, want %v: %s %v", r.Pass, c.pass, r.Summary, r.Violations)
			}
		})
	}
}

func TestRWExclusion(t *testing.T) {
	cases := []struct {
		name string
		b    *h
		pass bool
	}{
		{"readers together, then a writer", new(h).add(rwAcq("r1", tok(1, 1), "shared"), 0, 5).add(rwAcq("r2", tok(1, 2), "shared"), 1, 6).
			add(rel("r1", tok(1, 1)), 10, 12).add(rel("r2", tok(1, 2)), 10, 12).add(rwAcq("w", tok(1, 3), "exclusive"), 11, 20).
			add(history.Op{Kind: history.Verify, Token: tok(1, 2), Code: "superseded"}, 21, 22), true},
		{"a reader's lock-delay keeps the writer out", new(h).add(delayed(rwAcq("r1", tok(1, 1), "shared")), 0, 5).
			add(rwAcq("w", tok(1, 2), "exclusive"), 2001, 2010), false},
		{"a writer after a reader's lock-delay", new(h).add(delayed(rwAcq("r1", tok(1, 1), "shared")), 0, 5).
			add(rwAcq("w", tok(1, 2), "exclusive"), 3001, 3010), true},
		{"a reader beside a writer", new(h).add(rwAcq("r1", tok(1, 1), "shared"), 0, 5).add(rwAcq("w", tok(1, 2), "exclusive"), 6, 8), false},
		{"two writers", new(h).add(rwAcq("w1", tok(1, 1), "exclusive"), 0, 5).add(rwAcq("w2", tok(1, 2), "exclusive"), 6, 8), false},
		{"a reader allowed after a later writer", new(h).add(rwAcq("r1", tok(1, 1), "shared"), 0, 5).add(rel("r1", tok(1, 1)), 6, 30).
			add(rwAcq("w", tok(1, 2), "exclusive"), 7, 20).add(history.Op{Kind: history.Verify, Token: tok(1, 1), Allow: true}, 21, 22), false},
		{"the resource admits a stale read", new(h).add(history.Op{Kind: history.Write, Token: tok(1, 2), Seq: 1}, 0, 1).
			add(history.Op{Kind: history.Read, Token: tok(1, 1), Seq: 2}, 2, 3), false},
		{"the resource refuses a stale read", new(h).add(history.Op{Kind: history.Write, Token: tok(1, 2), Seq: 1}, 0, 1).
			add(history.Op{Kind: history.Read, Token: tok(1, 1), Seq: 2, Outcome: history.Fail}, 2, 3).
			add(history.Op{Kind: history.Read, Token: tok(1, 3), Seq: 3}, 4, 5), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r := RWExclusion(c.b.ops, shapeTTL); r.Pass != c.pass {
				t.Fatalf("pass=%v, want %v: %s %v", r.Pass, c.pass, r.Summary, r.Violations)
			}
		})
	}
}

func TestMultiAtomicity(t *testing.T) {
	ab := []string{"a", "b"}
	cases := []struct {
		name string
		b    *h
		pass bool
	}{
		{"one entry, released, then another set", new(h).add(multi("h1", ab, tok(1, 1), tok(1, 1)), 0, 5).
			add(readKey("a", "h1", tok(1, 1), 7), 6, 7).add(readKey("b", "h1", tok(1, 1), 7), 6, 7).
			add(relKey("a", "h1", tok(1, 1)), 10, 11).add(relKey("b", "h1", tok(1, 1)), 10, 11).
			add(multi("h2", []string{"b", "a"}, tok(1, 2), tok(1, 2)), 12, 15).
			add(history.Op{Kind: history.AcquireMulti, Holder: "h3", Key: "a", Keys: ab, Outcome: history.Fail, Code: "held"}, 13, 14), true},
		{"two log entries", new(h).add(multi("h1", ab, tok(1, 1), tok(1, 1)), 0, 5).
			add(readKey("a", "h1", tok(1, 1), 7), 6, 7).add(readKey("b", "h1", tok(1, 1), 9), 6, 7), false},
		{"a refused set holds a key", new(h).
			add(history.Op{Kind: history.AcquireMulti, Holder: "h3", Key: "a", Keys: ab, Outcome: history.Fail, Code: "held"}, 0, 14).
			add(readKey("a", "h3", tok(1, 1), 7), 6, 7), false},
		{"two sets hold a key at once", new(h).add(multi("h1", ab, tok(1, 1), tok(1, 1)), 0, 5).
			add(multi("h2", []string{"b", "c"}, tok(1, 2), tok(1, 1)), 6, 8), false},
		{"epochs differ", new(h).add(multi("h1", ab, tok(1, 1), tok(2, 1)), 0, 5), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r := MultiAtomicity(c.b.ops, shapeTTL); r.Pass != c.pass {
				t.Fatalf("pass=%v, want %v: %s %v", r.Pass, c.pass, r.Summary, r.Violations)
			}
		})
	}
	if r := ShapeTokens(new(h).add(multi("h1", ab, tok(1, 2), tok(1, 1)), 0, 5).add(multi("h2", ab, tok(1, 1), tok(1, 2)), 6, 8).ops, "multi-tokens"); r.Pass {
		t.Fatalf("a token going backwards on key a passed: %s", r.Summary)
	}
}
