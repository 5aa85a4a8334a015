package fsm

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// drain polls a subscription once and returns its events' types by index.
func drain(t *testing.T, s *Sub) Batch {
	t.Helper()
	b, err := s.Poll()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEventsOfEveryChange(t *testing.T) {
	a := &applier{f: New(Config{})}
	s, err := a.f.Feed().Subscribe("", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := a.at(1, Acquire{Key: "k", Holder: "h1", TTL: time.Second})
	a.at(1, Acquire{Key: "k", Holder: "h1", TTL: 2 * time.Second})
	a.at(1, Acquire{Key: "k", Holder: "h2", TTL: time.Second}) // refused: no event
	a.at(1, Release{Key: "k", Holder: "h1", Token: g.Key.Token})
	a.at(1, Release{Key: "k", Holder: "h1", Token: g.Key.Token}) // repeated: no event
	g2 := a.at(2, Acquire{Key: "k", Holder: "h2", TTL: time.Second, LockDelay: time.Second})
	a.at(2, Expire{Key: "k", Token: g2.Key.Token})
	g3 := a.at(2, Acquire{Key: "k", Holder: "h3", TTL: time.Second})
	next := Acquire{Key: "k", Holder: "h4", TTL: time.Second}
	a.at(3, Release{Key: "k", Token: g3.Key.Token, Force: true, Next: &next})
	a.at(3, SetMember{ID: "n", HTTPAddr: "x:1"})
	b := drain(t, s)
	want := []EventType{EventGranted, EventRenewed, EventReleased, EventGranted, EventExpired, EventGranted, EventHandedOff}
	if len(b.Events) != len(want) {
		t.Fatalf("events %+v, want types %v", b.Events, want)
	}
	var last uint64
	for i, ev := range b.Events {
		if ev.Type != want[i] || ev.Index <= last {
			t.Fatalf("event %d is %+v, want %s after index %d", i, ev, want[i], last)
		}
		last = ev.Index
	}
	if ev := b.Events[4]; ev.LockDelay != time.Second || ev.State != Expired {
		t.Fatalf("expiry event %+v does not start the lock-delay", ev)
	}
	if ev := b.Events[6]; ev.PrevToken != g3.Key.Token || ev.PrevHolder != "h3" || ev.Ended != EventForceReleased || ev.Holder != "h4" || ev.Token <= g3.Key.Token {
		t.Fatalf("handoff event %+v", ev)
	}
	if b.Through != a.index {
		t.Fatalf("through %d, want %d", b.Through, a.index)
	}
}

func TestSubscribeResumesAndFilters(t *testing.T) {
	a := &applier{f: New(Config{})}
	a.at(1, Acquire{Key: "a/1", Holder: "h", TTL: time.Second})
	a.at(1, Acquire{Key: "b/1", Holder: "h", TTL: time.Second})
	a.at(1, Acquire{Key: "a/2", Holder: "h", TTL: time.Second})
	s, err := a.f.Feed().Subscribe("a/", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := drain(t, s)
	if len(b.Events) != 1 || b.Events[0].Key != "a/2" || b.Through != 3 {
		t.Fatalf("resume from 1 gave %+v", b)
	}
	exact, _ := a.f.Feed().Subscribe("a/1", true, 0)
	a.at(1, Acquire{Key: "a/10", Holder: "h", TTL: time.Second})
	if b := drain(t, exact); len(b.Events) != 1 || b.Events[0].Key != "a/1" {
		t.Fatalf("exact subscription gave %+v", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if b, err := s.Next(ctx); err != nil || len(b.Events) != 1 || b.Events[0].Key != "a/10" {
		t.Fatalf("next gave %+v, %v", b, err)
	}
}

func TestSubscribeBeforeHistoryIsCompacted(t *testing.T) {
	a := &applier{f: New(Config{})}
	a.f.Feed().SetLimits(2, 0)
	for i := 0; i < 4; i++ {
		a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Duration(i+1) * time.Second})
	}
	if _, err := a.f.Feed().Subscribe("k", true, 1); !errors.Is(err, ErrCompacted) {
		t.Fatalf("subscribe from 1 with 2 events of history: %v, want ErrCompacted", err)
	}
	if _, known := a.f.Feed().Changed("k", 1); known {
		t.Fatal("Changed claims to know the history before the ring")
	}
	s, err := a.f.Feed().Subscribe("k", true, 2)
	if err != nil {
		t.Fatal(err)
	}
	if b := drain(t, s); len(b.Events) != 2 || b.Events[0].Index != 3 {
		t.Fatalf("resume from 2 gave %+v", b)
	}
}

func TestSlowWatcherIsToldItLagged(t *testing.T) {
	a := &applier{f: New(Config{})}
	a.f.Feed().SetLimits(0, 3)
	s, _ := a.f.Feed().Subscribe("", false, 0)
	for i := 0; i < 4; i++ {
		a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Duration(i+1) * time.Second})
	}
	if _, err := s.Poll(); !errors.Is(err, ErrLagged) {
		t.Fatalf("a watcher 4 events behind with room for 3: %v, want ErrLagged", err)
	}
	// One that keeps up is never told so.
	s2, _ := a.f.Feed().Subscribe("", false, a.index)
	for i := 0; i < 10; i++ {
		a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Duration(i+1) * time.Second})
		if b := drain(t, s2); len(b.Events) != 1 {
			t.Fatalf("got %+v", b)
		}
	}
}

func TestRestoreResetsWatchers(t *testing.T) {
	a := &applier{f: New(Config{})}
	a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second})
	var buf bytes.Buffer
	if err := a.f.Image().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	g := New(Config{})
	s, _ := g.Feed().Subscribe("", false, 0)
	if err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Poll(); !errors.Is(err, ErrReset) {
		t.Fatalf("watcher across a restore: %v, want ErrReset", err)
	}
	if _, err := g.Feed().Subscribe("", false, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("resume from before the restored snapshot: %v, want ErrCompacted", err)
	}
	if _, err := g.Feed().Subscribe("", false, a.index); err != nil {
		t.Fatal(err)
	}
}

func TestValueIsKeptEncodedAndSnapshotted(t *testing.T) {
	a := &applier{f: New(Config{})}
	g := a.at(1, Acquire{Key: "leader", Holder: "n1", TTL: time.Second, Value: "10.0.0.1:80"})
	if g.Err != nil || g.Key.Value != "10.0.0.1:80" {
		t.Fatalf("grant %+v", g)
	}
	// The holder replaces its value and keeps its token (proclaim).
	p := a.at(1, Acquire{Key: "leader", Holder: "n1", TTL: time.Second, Value: "10.0.0.1:81"})
	if !p.Renewed || p.Key.Token != g.Key.Token || p.Key.Value != "10.0.0.1:81" {
		t.Fatalf("proclaim %+v", p)
	}
	if r := a.at(1, Acquire{Key: "big", Holder: "h", TTL: time.Second, Value: string(make([]byte, MaxValueLen+1))}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("a value over the bound: %v", r.Err)
	}
	// Under version 2's rules, an acquire without a value is version 2 and
	// one with a value version 3; a current acquire is version 4 either way.
	if b := Encode(Acquire{Key: "k", Holder: "h", TTL: time.Second, rules: rulesV2}); b[1] != version2 {
		t.Fatalf("acquire without a value is version %d", b[1])
	}
	enc := Encode(Acquire{Key: "k", Holder: "h", TTL: time.Second, Value: "v", rules: rulesV2})
	if enc[1] != version3 {
		t.Fatalf("acquire with a value is version %d", enc[1])
	}
	if c, err := Decode(enc); err != nil || c.(Acquire).Value != "v" || c.(Acquire).rules != rulesV2 {
		t.Fatalf("decode: %+v %v", c, err)
	}
	for _, v := range []string{"", "v"} {
		enc := Encode(Acquire{Key: "k", Holder: "h", TTL: time.Second, Value: v})
		if c, err := Decode(enc); enc[1] != version4 || err != nil || c.(Acquire).Value != v || c.(Acquire).rules != rulesCurrent {
			t.Fatalf("a current acquire with value %q: version %d, decoded %+v %v", v, enc[1], c, err)
		}
	}
	empty := Encode(Acquire{Key: "k", Holder: "h", TTL: time.Second, rules: rulesV2})
	empty[1] = version3
	empty = append(empty, 0)
	if _, err := Decode(empty); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a version-3 acquire with an empty value decodes: %v", err)
	}
	var buf bytes.Buffer
	if err := a.f.Image().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[4] != snapVersion3 {
		t.Fatalf("snapshot with a value is version %d", buf.Bytes()[4])
	}
	g2 := New(Config{})
	if err := g2.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	if k, _ := g2.Get("leader"); k.Value != "10.0.0.1:81" {
		t.Fatalf("restored value %q", k.Value)
	}
	b := &applier{f: New(Config{})}
	b.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second})
	buf.Reset()
	if err := b.f.Image().Encode(&buf); err != nil || buf.Bytes()[4] != snapVersion2 {
		t.Fatalf("snapshot without values: version %d, %v", buf.Bytes()[4], err)
	}
}

// TestResumeFromBeforeARestoredStateIsRefused: a state restored from a
// snapshot labelled with a lower index than entries this node applied
// before (a backup restored while entries were being appended: raft puts
// the snapshot after them) refuses every resume from the indexes served
// before it, both before and after the first entry that follows it, and
// serves the restored state's own indexes.
func TestResumeFromBeforeARestoredStateIsRefused(t *testing.T) {
	a := &applier{f: New(Config{})}
	for i := 0; i < 5; i++ {
		a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Duration(i+1) * time.Second})
	}
	img := a.f.Image()
	img.Applied = 3 // labelled before entries 4 and 5, which it replaces
	var buf bytes.Buffer
	if err := img.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if err := a.f.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	for _, from := range []uint64{4, 5} {
		if _, err := a.f.Feed().Subscribe("", false, from); !errors.Is(err, ErrCompacted) {
			t.Fatalf("resume from %d, served before the restore: %v, want ErrCompacted", from, err)
		}
	}
	if _, cut := a.f.KeysAt("", false); cut != 3 {
		t.Fatalf("the restored state's index is %d, want 3", cut)
	}
	// Raft put the snapshot at 7; the next entry is 8.
	a.index = 7
	a.at(2, Acquire{Key: "other", Holder: "h", TTL: time.Second})
	for _, from := range []uint64{3, 4, 5, 6} {
		if _, err := a.f.Feed().Subscribe("", false, from); !errors.Is(err, ErrCompacted) {
			t.Fatalf("resume from %d, before the snapshot raft placed at 7: %v, want ErrCompacted", from, err)
		}
	}
	s, err := a.f.Feed().Subscribe("", false, 7)
	if err != nil {
		t.Fatal(err)
	}
	if b := drain(t, s); len(b.Events) != 1 || b.Events[0].Index != 8 {
		t.Fatalf("resume from 7: %+v", b)
	}
}

// TestSubscribeFromAFutureIndexIsRefused: an index after the last entry the
// node applied names a change the node has not seen (an id kept from
// another cluster, or from before a restore); a subscription from it would
// skip every change up to it, so it is refused.
func TestSubscribeFromAFutureIndexIsRefused(t *testing.T) {
	a := &applier{f: New(Config{})}
	a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second})
	if _, err := a.f.Feed().Subscribe("k", true, 999999); !errors.Is(err, ErrCompacted) || !errors.Is(err, ErrFuture) {
		t.Fatalf("subscribe from 999999 at index 1: %v, want ErrFuture (a kind of ErrCompacted)", err)
	}
	if _, err := a.f.Feed().Subscribe("k", true, 1); err != nil {
		t.Fatal(err)
	}
}

// TestReclaimTellsEachForgottenKey: a reclamation entry that forgets keys is
// a deleted event per key it forgot, in the entry's order, all with the
// entry's index and the last grant of the key; a key it kept is no event. A
// prefix watcher takes the events of one entry in one poll, never split.
func TestReclaimTellsEachForgottenKey(t *testing.T) {
	a := &applier{f: New(Config{})}
	grants := map[string]*Result{}
	for _, k := range []string{"r/a", "r/b", "r/c", "r/held"} {
		grants[k] = a.at(1, Acquire{Key: k, Holder: "h-" + k, TTL: time.Second})
		if k != "r/held" {
			a.at(1, Release{Key: k, Holder: "h-" + k, Token: grants[k].Key.Token})
		}
	}
	s, err := a.f.Feed().Subscribe("r/", false, a.index)
	if err != nil {
		t.Fatal(err)
	}
	exact, _ := a.f.Feed().Subscribe("r/b", true, a.index)
	res := a.at(2, Reclaim{Keys: []ReclaimKey{
		{Key: "r/b", Token: grants["r/b"].Key.Token},
		{Key: "r/held", Token: grants["r/held"].Key.Token}, // held: kept
		{Key: "r/a", Token: grants["r/a"].Key.Token},
		{Key: "r/c", Token: grants["r/c"].Key.Token + 1}, // not its token: kept
	}})
	if res.Reclaim == nil || res.Reclaim.Reclaimed != 2 {
		t.Fatalf("reclaim: %+v", res.Reclaim)
	}
	b := drain(t, s)
	if len(b.Events) != 2 {
		t.Fatalf("events of the reclamation: %+v", b.Events)
	}
	for i, k := range []string{"r/b", "r/a"} {
		ev := b.Events[i]
		if ev.Type != EventDeleted || ev.Key != k || ev.Index != a.index || ev.Holder != "h-"+k || ev.Token != grants[k].Key.Token {
			t.Fatalf("event %d: %+v, want %s deleted at %d with its last grant", i, ev, k, a.index)
		}
	}
	if b := drain(t, exact); len(b.Events) != 1 || b.Events[0].Key != "r/b" || b.Events[0].Type != EventDeleted {
		t.Fatalf("the watcher of r/b: %+v", b.Events)
	}
	// A watcher that resumes from before the entry takes it whole, even
	// with a chunk of one event.
	a.f.Feed().chunk = 1
	r, err := a.f.Feed().Subscribe("r/", false, a.index-1)
	if err != nil {
		t.Fatal(err)
	}
	if b := drain(t, r); len(b.Events) != 2 {
		t.Fatalf("a resume from before the reclamation took %+v in its first poll", b.Events)
	}
}
