package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"pgregory.net/rapid"

	"github.com/fenced/fenced/fence"
)

// clocked feeds commands like applier, stamping each entry with the leader's
// append time as raft does.
type clocked struct {
	applier
	now time.Time
}

func newClocked(cfg Config) *clocked {
	return &clocked{applier: applier{f: New(cfg)}, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *clocked) at(term uint64, cmd Command) *Result {
	if e, ok := cmd.(Expire); ok && e.Armed == 0 {
		k, _ := c.f.Get(e.Key)
		e.Armed = k.Armed
		cmd = e
	}
	c.index++
	r := c.f.Apply(&raft.Log{Index: c.index, Term: term, Type: raft.LogCommand, Data: Encode(cmd), AppendedAt: c.now})
	return r.(*Result)
}

// restart snapshots the FSM and restores the bytes into a new one, as a
// restarted node or a follower installing a snapshot does.
func (c *clocked) restart(t interface{ Fatal(...any) }, cfg Config) {
	var buf bytes.Buffer
	if err := c.f.Image().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	g := New(cfg)
	if err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	c.f = g
}

// A retry of a request whose grant ended and was replaced by another holder's
// grant must not mint a second grant for the same request id.
func TestRequestIDRetryAfterOtherHolder(t *testing.T) {
	c := newClocked(Config{})
	first := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R"})
	c.at(1, Expire{Key: "k", Token: first.Key.Token})
	other := c.at(1, Acquire{Key: "k", Holder: "h2", TTL: time.Second, RequestID: "S"})
	c.at(1, Release{Key: "k", Holder: "h2", Token: other.Key.Token})
	retry := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R"})
	if !errors.Is(retry.Err, ErrGrantEnded) {
		t.Fatalf("retry of R after its grant %v ended: err %v, token %v (a second grant for one request id)", first.Key.Token, retry.Err, retry.Key.Token)
	}
}

// A retry of a request whose grant ended, after the same holder got a new
// grant with another request id, must not answer renewed with that other
// request's token.
func TestRequestIDRetryAfterOwnNewGrant(t *testing.T) {
	c := newClocked(Config{})
	first := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R1"})
	c.at(1, Expire{Key: "k", Token: first.Key.Token})
	second := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R2"})
	retry := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R1"})
	if !errors.Is(retry.Err, ErrGrantEnded) {
		t.Fatalf("retry of R1 (grant %v, ended) while R2's grant %v is live: err %v, renewed %v, token %v",
			first.Key.Token, second.Key.Token, retry.Err, retry.Renewed, retry.Key.Token)
	}
	// R2's own retry still gets its grant back.
	if again := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R2"}); again.Err != nil || !again.Renewed || again.Key.Token != second.Key.Token {
		t.Fatalf("retry of R2: %+v", again)
	}
}

// The memory of retired request ids survives a snapshot and restore, and is
// forgotten only after the recognition window has passed on the leader's
// clock (one term's entries).
func TestRequestIDHistorySurvivesSnapshotAndWindow(t *testing.T) {
	c := newClocked(Config{})
	first := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R"})
	c.at(1, Release{Key: "k", Holder: "h1", Token: first.Key.Token})
	c.at(1, Acquire{Key: "k", Holder: "h2", TTL: time.Second})
	c.restart(t, Config{})
	c.now = c.now.Add(RequestIDWindow - time.Second)
	if r := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R"}); !errors.Is(r.Err, ErrGrantEnded) {
		t.Fatalf("retry inside the window after a restart: %+v", r)
	}
	if n := c.f.RetiredRequests(); n != 1 {
		t.Fatalf("retired request ids remembered: %d, want 1", n)
	}
	// Acquires move the log clock. One that goes backwards does not
	// shorten or lengthen anything.
	tick := Acquire{Key: "tick", Holder: "t", TTL: time.Second}
	c.now = c.now.Add(-time.Hour)
	c.at(1, tick)
	if n := c.f.RetiredRequests(); n != 1 {
		t.Fatalf("after an earlier append time: %d remembered", n)
	}
	c.now = c.now.Add(time.Hour + 2*time.Second)
	c.at(1, tick)
	if n := c.f.RetiredRequests(); n != 0 {
		t.Fatalf("retired request ids past the window: %d, want 0", n)
	}
}

// A request id first answered by renewing its holder's live grant keeps that
// grant as its own: once it ended, a retry gets grant_ended, not a new grant.
func TestRequestIDAnsweredByRenewalKeepsThatGrant(t *testing.T) {
	c := newClocked(Config{})
	first := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R1"})
	joined := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R2"})
	if !joined.Renewed || joined.Key.Token != first.Key.Token {
		t.Fatalf("acquire by the holder: %+v", joined)
	}
	c.at(1, Release{Key: "k", Holder: "h1", Token: first.Key.Token})
	if r := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R2"}); !errors.Is(r.Err, ErrGrantEnded) {
		t.Fatalf("retry of R2 after the grant it was answered with ended: err %v token %v", r.Err, r.Key.Token)
	}
}

// The memory is bounded by count as well as by time.
func TestRequestIDHistoryCountCap(t *testing.T) {
	c := newClocked(Config{MaxRetired: 3})
	for i := 0; i < 10; i++ {
		r := c.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second, RequestID: fmt.Sprintf("r%d", i)})
		c.at(1, Release{Key: "k", Holder: "h", Token: r.Key.Token})
	}
	if n := c.f.RetiredRequests(); n != 3 {
		t.Fatalf("remembered %d retired request ids, cap 3", n)
	}
	if r := c.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second, RequestID: "r8"}); !errors.Is(r.Err, ErrGrantEnded) {
		t.Fatalf("recent retired id: %+v", r)
	}
}

// Random sequences of acquires (with and without request ids, retried),
// expiries, releases by any holder, time passing and snapshot/restore in the
// middle never give one request id two different tokens, and a request id is
// answered only with its own grant.
func TestPropertyRequestIDOneGrant(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := newClocked(Config{})
		term := uint64(1)
		granted := map[string]fence.Token{} // key/request id -> its grant
		n := rapid.IntRange(1, 150).Draw(t, "n")
		for i := 0; i < n; i++ {
			term += uint64(rapid.IntRange(0, 1).Draw(t, "bump"))
			// At most 5s a step keeps the whole run inside the recognition window.
			c.now = c.now.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, "secs")) * time.Second)
			key := rapid.SampledFrom([]string{"a", "b"}).Draw(t, "key")
			holder := rapid.SampledFrom([]string{"h1", "h2"}).Draw(t, "holder")
			cur, _ := c.f.Get(key)
			var cmd Command
			switch rapid.IntRange(0, 5).Draw(t, "kind") {
			case 0, 1, 2:
				cmd = Acquire{Key: key, Holder: holder, TTL: time.Second, RequestID: rapid.SampledFrom([]string{"", "r1", "r2", "r3", "r4"}).Draw(t, "rid")}
			case 3:
				rel := Release{Key: key, Holder: cur.Holder, Token: cur.Token}
				if rapid.Bool().Draw(t, "handoff") {
					rel.Next = &Acquire{Key: key, Holder: holder, TTL: time.Second, RequestID: rapid.SampledFrom([]string{"", "r1", "r5"}).Draw(t, "nrid")}
				}
				cmd = rel
			case 4:
				cmd = Expire{Key: key, Token: cur.Token}
			default:
				c.restart(t, Config{})
				continue
			}
			r := c.at(term, cmd)
			acq, ok := cmd.(Acquire)
			if rel, isRel := cmd.(Release); isRel && r.Next != nil {
				acq, ok, r = *rel.Next, true, r.Next
			}
			if !ok || acq.RequestID == "" || r.Err != nil {
				continue
			}
			id := acq.Key + "/" + acq.RequestID
			if prev, had := granted[id]; had && prev != r.Key.Token {
				t.Fatalf("request %s answered with grant %v after grant %v", id, r.Key.Token, prev)
			}
			granted[id] = r.Key.Token
		}
	})
}

// A version-1 snapshot (before the request-id history) is still read: its
// keys come back, with an empty history and log clock.
func TestRestoreReadsVersion1(t *testing.T) {
	c := newClocked(Config{})
	r := c.at(2, Acquire{Key: "k", Holder: "h", TTL: time.Second, RequestID: "R"})
	img := c.f.Image()
	img.Clock, img.ClockTerm, img.ClockLast, img.ClockElapsed, img.Retired = 0, 0, 0, false, nil
	var buf bytes.Buffer
	if err := img.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	// Drop the two empty history fields and the CRC, mark version 1, seal.
	body := append([]byte(nil), buf.Bytes()[:buf.Len()-4-2]...)
	body[4] = snapVersion1
	v1 := sealed(body)
	g := New(Config{})
	if err := g.Restore(nopCloser{bytes.NewReader(v1)}); err != nil {
		t.Fatalf("version-1 snapshot: %v", err)
	}
	if k, ok := g.Get("k"); !ok || k.Token != r.Key.Token || k.RequestID != "R" || g.RetiredRequests() != 0 {
		t.Fatalf("restored %+v %v", k, ok)
	}
}

// A floor near 2^64 must not wrap term + floor to a low epoch.
func TestFloorNearMaxDoesNotWrap(t *testing.T) {
	a := &applier{f: New(Config{})}
	first := a.at(5, Acquire{Key: "k", Holder: "h", TTL: time.Second})
	a.at(5, Release{Key: "k", Holder: "h", Token: first.Key.Token})
	restoreFloor(t, a.f, 1<<64-3)
	if r := a.at(5, Acquire{Key: "new", Holder: "h", TTL: time.Second}); !errors.Is(r.Err, ErrEpochExhausted) {
		t.Fatalf("grant with floor 2^64-3 at term 5: token %v (epoch %d) after %v, err %v", r.Key.Token, r.Key.Token.Epoch(), first.Key.Token, r.Err)
	}
}

// The FSM's log clock is deterministic only if every way an entry reaches a
// replica keeps its append time to the millisecond: the leader's own copy,
// the transport and the stores (msgpack in both time formats raft and
// raft-boltdb use; raft-wal uses time.MarshalBinary).
func TestAppendedAtSurvivesEncodings(t *testing.T) {
	at := time.Date(2026, 12, 1, 15, 4, 5, 987654321, time.FixedZone("x", 3600))
	for _, builtin := range []bool{false, true} {
		var buf bytes.Buffer
		enc := codec.NewEncoder(&buf, &codec.MsgpackHandle{BasicHandle: codec.BasicHandle{TimeNotBuiltin: !builtin}})
		if err := enc.Encode(&raft.Log{Index: 1, Term: 1, AppendedAt: at}); err != nil {
			t.Fatal(err)
		}
		var back raft.Log
		if err := codec.NewDecoder(&buf, &codec.MsgpackHandle{}).Decode(&back); err != nil {
			t.Fatal(err)
		}
		if back.AppendedAt.UnixMilli() != at.UnixMilli() {
			t.Fatalf("msgpack (new time format %v): %v -> %v", builtin, at, back.AppendedAt)
		}
	}
	b, _ := at.MarshalBinary()
	var back time.Time
	if err := back.UnmarshalBinary(b); err != nil || back.UnixMilli() != at.UnixMilli() {
		t.Fatalf("binary: %v -> %v (%v)", at, back, err)
	}
}

// An acquire of a version-1 entry (written before request ids were checked
// first) replays with version 1's rules and leaves the history alone, so a
// log replays the same whichever version wrote it; Encode writes version 4.
func TestVersion1AcquireKeepsItsRules(t *testing.T) {
	v1 := func(a Acquire) Acquire { a.rules = rulesV1; return a }
	if b := Encode(Acquire{Key: "k", Holder: "h", TTL: time.Second}); b[1] != version4 {
		t.Fatalf("acquire encoded as version %d", b[1])
	}
	b := Encode(v1(Acquire{Key: "k", Holder: "h", TTL: time.Second, RequestID: "R"}))
	if d, err := Decode(b); err != nil || b[1] != version1 || d.(Acquire).rules != rulesV1 {
		t.Fatalf("version-1 acquire: %x -> %+v %v", b, d, err)
	}
	c := newClocked(Config{})
	first := c.at(1, v1(Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R1"}))
	c.at(1, Expire{Key: "k", Token: first.Key.Token})
	second := c.at(1, v1(Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R2"}))
	// Version 1: the holder is checked first, so R1's retry renews R2's grant.
	if r := c.at(1, v1(Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R1"})); !r.Renewed || r.Key.Token != second.Key.Token {
		t.Fatalf("version-1 retry: %+v", r)
	}
	if n, img := c.f.RetiredRequests(), c.f.Image(); n != 0 || img.Clock != 0 {
		t.Fatalf("version-1 entries changed the history: %d retired, clock %d", n, img.Clock)
	}
	// A version-2 retry of the live grant's own request still gets it.
	if r := c.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second, RequestID: "R2"}); !r.Renewed || r.Key.Token != second.Key.Token {
		t.Fatalf("version-2 retry of the live grant: %+v", r)
	}
}
