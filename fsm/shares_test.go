package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"

	"github.com/fenced/fenced/fence"
)

// TestOneOwnersVolumeNeverEvictsAnothers: a client that retires request
// ids far faster than the window allows forgets its own oldest first; the
// id of another client is still recognised (with one pool for everyone, the
// flood shrank everyone's window: 524,289 cycles on one key, and another
// client's retry of its first request id got a second grant).
func TestOneOwnersVolumeNeverEvictsAnothers(t *testing.T) {
	c := newClocked(Config{MaxRetired: 40, MaxRetiredPerOwner: 10})
	bob := c.at(1, Acquire{Key: "bob/k", Holder: "bob/w", TTL: time.Second, RequestID: "B1"})
	c.at(1, Release{Key: "bob/k", Holder: "bob/w", Token: bob.Key.Token})
	c.at(1, Acquire{Key: "bob/k", Holder: "bob/w", TTL: time.Second}) // B1 is retired
	for i := range 200 {
		g := c.at(1, Acquire{Key: "flood", Holder: "mallory/" + fmt.Sprint(i%3), TTL: time.Second, RequestID: fmt.Sprintf("M%d", i)})
		c.at(1, Release{Key: "flood", Holder: g.Key.Holder, Token: g.Key.Token})
	}
	if r := c.at(1, Acquire{Key: "bob/k", Holder: "bob/w", TTL: time.Second, RequestID: "B1"}); !errors.Is(r.Err, ErrGrantEnded) {
		t.Fatalf("bob's retry after mallory's flood: %+v, want grant_ended (a second grant means his id was evicted)", r)
	}
	if n, early := c.f.RetiredRequests(), c.f.ForgottenEarly(); n > 40 || early == 0 {
		t.Fatalf("remembered %d (cap 40), forgotten early %d", n, early)
	}
	// Many owners filling their shares together: the oldest of all goes.
	for o := range 6 {
		for i := range 10 {
			g := c.at(1, Acquire{Key: "k", Holder: fmt.Sprintf("o%d/w", o), TTL: time.Second, RequestID: fmt.Sprintf("O%d-%d", o, i)})
			c.at(1, Release{Key: "k", Holder: g.Key.Holder, Token: g.Key.Token})
		}
	}
	if n := c.f.RetiredRequests(); n > 40 {
		t.Fatalf("remembered %d over the global cap 40", n)
	}
}

// TestALeaderWhoseClockRunsAheadAgesNothing: one entry stamped 16 minutes
// ahead (a new leader with a clock that runs ahead) used to wipe the
// history of every key; the log clock counts only the time that passes on
// one leader's clock.
func TestALeaderWhoseClockRunsAheadAgesNothing(t *testing.T) {
	c := newClocked(Config{})
	first := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R"})
	c.at(1, Release{Key: "k", Holder: "h1", Token: first.Key.Token})
	c.at(1, Acquire{Key: "k", Holder: "h2", TTL: time.Second})
	c.now = c.now.Add(16 * time.Minute) // the next leader's clock
	c.at(2, Acquire{Key: "other", Holder: "x", TTL: time.Second})
	if r := c.at(2, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R"}); !errors.Is(r.Err, ErrGrantEnded) {
		t.Fatalf("a retry after a leader whose clock is 16 minutes ahead: %+v, want grant_ended", r)
	}
	// Time that passes on that leader does count.
	c.now = c.now.Add(RequestIDWindow + time.Second)
	c.at(2, Acquire{Key: "other", Holder: "x", TTL: time.Second})
	if n := c.f.RetiredRequests(); n != 0 {
		t.Fatalf("after the window on one leader's clock: %d remembered, want 0", n)
	}
}

// TestReleaseRequestIDIsAppliedOnce: a forced release without a token,
// retried by a client that is not ours (it resolves "the current token"
// again, or sends the same body), ends only the grant its first attempt
// ended, and never hands the key off twice (3 violations in 90 s before:
// a release meant for grant T ended grant T+1).
func TestReleaseRequestIDIsAppliedOnce(t *testing.T) {
	c := newClocked(Config{})
	g := c.at(1, Acquire{Key: "k", Holder: "a", TTL: time.Second})
	first := c.at(1, Release{Key: "k", Token: g.Key.Token, Force: true, RequestID: "op-1", Next: &Acquire{Key: "k", Holder: "b", TTL: time.Second}})
	if first.Err != nil || first.Next == nil || first.Next.Err != nil {
		t.Fatalf("first release: %+v", first)
	}
	next := first.Next.Key
	for _, tok := range []fence.Token{g.Key.Token, next.Token} {
		retry := c.at(1, Release{Key: "k", Token: tok, Force: true, RequestID: "op-1", Next: &Acquire{Key: "k", Holder: "c", TTL: time.Second}})
		if retry.Err != nil || !retry.Recalled || retry.Changed || retry.Next != nil || retry.Key.Token != g.Key.Token {
			t.Fatalf("retry naming token %v: %+v; want the first release's answer (grant %v), no change, no handoff", tok, retry, g.Key.Token)
		}
	}
	if k, _ := c.f.Get("k"); k.Holder != "b" || k.Token != next.Token || k.State != Held {
		t.Fatalf("the next holder's grant after the retries: %+v, want b's %v held", k, next.Token)
	}
	// A holder's own release retried after its grant was taken over is
	// answered as done, not as a stale token.
	own := c.at(1, Release{Key: "k", Holder: "b", Token: next.Token, RequestID: "b-1"})
	c.at(1, Acquire{Key: "k", Holder: "d", TTL: time.Second})
	if r := c.at(1, Release{Key: "k", Holder: "b", Token: next.Token, RequestID: "b-1"}); r.Err != nil || !r.Recalled || r.Key.Token != own.Key.Token {
		t.Fatalf("b's retried release: %+v", r)
	}
	// The ids survive a restart.
	c.restart(t, Config{})
	if r := c.at(1, Release{Key: "k", Token: 1 << 40, Force: true, RequestID: "op-1"}); !r.Recalled {
		t.Fatalf("after a restart: %+v", r)
	}
}

// genVersioned is genCommand with entries of every encoding version, and
// request ids on releases.
func genVersioned(t *rapid.T, f *FSM) Command {
	c := genCommand(t, f)
	switch v := c.(type) {
	case Acquire:
		v.rules = rules(rapid.IntRange(0, 2).Draw(t, "rules"))
		if v.rules != rulesV1 && rapid.Bool().Draw(t, "value") {
			v.Value = "v"
		}
		return v
	case Release:
		if rapid.Bool().Draw(t, "legacy release") {
			v.legacy = true
		} else {
			v.RequestID = rapid.SampledFrom([]string{"", "x1", "x2"}).Draw(t, "release rid")
		}
		if v.Next != nil {
			v.Next.rules = rules(rapid.IntRange(0, 2).Draw(t, "next rules"))
		}
		return v
	case Reclaim:
		v.legacy = rapid.Bool().Draw(t, "legacy reclaim")
		return v
	}
	return c
}

// TestPropertyEverySnapshotRestores: any stream of commands, old entry
// versions mixed with current ones, at any append times and terms, leaves
// a state whose snapshot restores to the same state, and whose restored
// copy applies the rest of the stream as the original does. (A version-1
// acquire could once retire a request id twice, and every later snapshot
// was refused: "bad retired request record".)
func TestPropertyEverySnapshotRestores(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{MaxSeq: 4, MaxRetired: rapid.IntRange(1, 8).Draw(t, "max retired"), MaxRetiredPerOwner: rapid.IntRange(1, 4).Draw(t, "per owner")}
		a, b := New(cfg), New(cfg)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		term, index := uint64(1), uint64(0)
		n := rapid.IntRange(1, 150).Draw(t, "n")
		cut := rapid.IntRange(0, n).Draw(t, "snapshot at")
		for i := 0; i < n; i++ {
			term += uint64(rapid.IntRange(0, 1).Draw(t, "bump"))
			now = now.Add(time.Duration(rapid.IntRange(-60, 600).Draw(t, "seconds")) * time.Second)
			cmd := genVersioned(t, a)
			index++
			l := &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: Encode(cmd), AppendedAt: now}
			ra := a.Apply(l).(*Result)
			if i >= cut {
				rb := b.Apply(l).(*Result)
				if !reflect.DeepEqual(ra, rb) {
					t.Fatalf("entry %d (%T): the restored copy answered %+v, the original %+v", index, cmd, rb, ra)
				}
			}
			if i+1 == cut {
				var buf bytes.Buffer
				if err := a.Image().Encode(&buf); err != nil {
					t.Fatal(err)
				}
				how := rapid.SampledFrom([]string{"whole", "one-byte", "half", "data-err"}).Draw(t, "reads")
				window := rapid.SampledFrom([]int{1, 5, 64 << 10}).Draw(t, "window")
				if err := restoreThrough(b, buf.Bytes(), readers[how], window); err != nil {
					t.Fatalf("snapshot after entry %d does not restore: %v", index, err)
				}
			}
			var sa bytes.Buffer
			if err := a.Image().Encode(&sa); err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeImage(sa.Bytes()); err != nil {
				t.Fatalf("snapshot after entry %d is refused: %v", index, err)
			}
		}
		if cut < n {
			if ia, ib := a.Image().sort(), b.Image().sort(); !reflect.DeepEqual(ia, ib) {
				t.Fatalf("restored copy differs:\n%+v\n%+v", ib, ia)
			}
		}
	})
}
