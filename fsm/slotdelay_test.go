package fsm

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// expirePermit applies the expiry of key's permit tok as the leader would
// propose it, naming the permit's own arming.
func (a *applier) expirePermit(term uint64, key string, tok uint64) *Result {
	_, ps := a.f.Permits(key)
	for _, p := range ps {
		if uint64(p.Token) == tok {
			return a.at(term, Expire{Key: key, Token: p.Token, Armed: p.Armed})
		}
	}
	return &Result{}
}

// A permit's lock-delay: its expiry leaves a delayed slot, which a new
// leader would keep (LockDelayed), which keeps the key from reclamation,
// and which a DelayEnd naming its token frees, with an event, once.
func TestPermitLockDelaySlot(t *testing.T) {
	a := &applier{f: New(Config{})}
	s, err := a.f.Feed().Subscribe("", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	p1 := a.at(1, Acquire{Key: "s", Holder: "h1", TTL: time.Second, Limit: 2, LockDelay: 2*time.Second + time.Microsecond}).Key
	p2 := a.at(1, Acquire{Key: "s", Holder: "h2", TTL: time.Second, Limit: 2}).Key
	if p1.LockDelay != 2*time.Second || p2.LockDelay != 0 {
		t.Fatalf("granted %v and %v", p1.LockDelay, p2.LockDelay)
	}
	if last, _ := a.f.Get("s"); last.LockDelay != 0 {
		t.Fatalf("the key's last grant carries a permit's lock-delay: %+v", last)
	}
	if r := a.expirePermit(1, "s", uint64(p1.Token)); !r.Changed || r.Key.LockDelay != 2*time.Second {
		t.Fatalf("expiry: %+v", r)
	}
	a.expirePermit(1, "s", uint64(p2.Token))
	slots := a.f.SlotDelays("s")
	if len(slots) != 1 || slots[0].Token != p1.Token || slots[0].Limit != 2 || slots[0].State != Expired {
		t.Fatalf("delayed slots %+v", slots)
	}
	ld := a.f.LockDelayed()
	if len(ld) != 1 || ld[0].Token != p1.Token || !ld[0].Permit() || ld[0].LockDelay != 2*time.Second {
		t.Fatalf("LockDelayed %+v", ld)
	}
	if !a.f.DelayPending("s", p1.Token) || a.f.DelayPending("s", p2.Token) {
		t.Fatal("DelayPending")
	}
	if len(a.f.Ended()) != 0 {
		t.Fatalf("a key with a delayed slot is reclaimable: %+v", a.f.Ended())
	}
	if r := a.at(5, Reclaim{Floor: 1, Keys: []ReclaimKey{{"s", p2.Token}}}); r.Reclaim.Reclaimed != 0 {
		t.Fatal("reclaimed a key with a delayed slot")
	}
	assertRoundTrip(t, a.f)
	if r := a.at(5, DelayEnd{Key: "s", Token: p1.Token}); !r.Changed || r.Key.Token != p1.Token || r.Key.LockDelay != 0 {
		t.Fatalf("delay end: %+v", r)
	}
	if r := a.at(5, DelayEnd{Key: "s", Token: p1.Token}); r.Changed {
		t.Fatalf("a second delay end changed: %+v", r)
	}
	if len(a.f.SlotDelays("s")) != 0 || len(a.f.LockDelayed()) != 0 || len(a.f.Ended()) != 1 {
		t.Fatal("the slot outlived its delay end")
	}
	b := drain(t, s)
	var types []EventType
	for _, ev := range b.Events {
		types = append(types, ev.Type)
	}
	want := []EventType{EventGranted, EventGranted, EventExpired, EventExpired, EventLockDelayEnded}
	if len(types) != len(want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("events %v, want %v", types, want)
		}
	}
	if ev := b.Events[4]; ev.Token != p1.Token || ev.Limit != 2 || ev.Holder != "h1" {
		t.Fatalf("delay end event %+v", ev)
	}
	if ev := b.Events[2]; ev.LockDelay != 2*time.Second {
		t.Fatalf("expiry event %+v", ev)
	}
}

// A shared grant's lock-delay leaves a shared delayed slot; a renewal
// changes the lock-delay as a lock's does.
func TestSharedLockDelaySlot(t *testing.T) {
	a := &applier{f: New(Config{})}
	g := a.at(1, Acquire{Key: "rw", Holder: "r1", TTL: time.Second, Shared: true}).Key
	if r := a.at(1, Acquire{Key: "rw", Holder: "r1", TTL: time.Second, Shared: true, LockDelay: time.Second}); !r.Renewed || r.Key.LockDelay != time.Second {
		t.Fatalf("renewal: %+v", r)
	}
	a.expirePermit(1, "rw", uint64(g.Token))
	if slots := a.f.SlotDelays("rw"); len(slots) != 1 || !slots[0].Shared || slots[0].Token != g.Token {
		t.Fatalf("delayed slots %+v", slots)
	}
	// A release starts no delay.
	g2 := a.at(1, Acquire{Key: "rw", Holder: "r2", TTL: time.Second, Shared: true, LockDelay: time.Second}).Key
	a.at(1, Release{Key: "rw", Holder: "r2", Token: g2.Token})
	if len(a.f.SlotDelays("rw")) != 1 {
		t.Fatal("a release left a delayed slot")
	}
}

// A snapshot with permits' lock-delays or delayed slots is version 7 and
// restores to the same state; a crafted one is refused whole.
func TestSlotDelaySnapshot(t *testing.T) {
	a := &applier{f: New(Config{})}
	p1 := a.at(2, Acquire{Key: "s", Holder: "h1", TTL: time.Second, Limit: 3, LockDelay: time.Second}).Key
	a.at(2, Acquire{Key: "s", Holder: "h2", TTL: time.Second, Limit: 3, LockDelay: 3 * time.Second})
	a.expirePermit(2, "s", uint64(p1.Token))
	r := a.at(2, Acquire{Key: "t", Holder: "h1", TTL: time.Second, Shared: true, LockDelay: time.Second}).Key
	a.expirePermit(2, "t", uint64(r.Token))
	a.at(2, Acquire{Key: "u", Holder: "h1", TTL: time.Second})
	assertRoundTrip(t, a.f)
	var buf bytes.Buffer
	if err := a.f.Image().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[4] != snapVersion7 {
		t.Fatalf("version %d", buf.Bytes()[4])
	}
	damage := map[string]func(img *Image){
		"a live permit's token":   func(img *Image) { img.SlotDelays[0].Token = img.Semaphores[0].Permits[0].Token },
		"above the last grant":    func(img *Image) { img.SlotDelays[1].Token++ },
		"out of order":            func(img *Image) { img.SlotDelays[0], img.SlotDelays[1] = img.SlotDelays[1], img.SlotDelays[0] },
		"no lock-delay":           func(img *Image) { img.SlotDelays[0].LockDelay = 0 },
		"a part of a millisecond": func(img *Image) { img.SlotDelays[0].LockDelay += time.Microsecond },
		"unknown key":             func(img *Image) { img.SlotDelays[1].Key = "zz" },
		"no holder":               func(img *Image) { img.SlotDelays[0].Holder = "" },
		"a permit's lock-delay":   func(img *Image) { img.Semaphores[0].Permits[0].LockDelay = maxMs + time.Millisecond },
		"a negative lock-delay":   func(img *Image) { img.Semaphores[0].Permits[0].LockDelay = -time.Millisecond },
		"a limit above the most":  func(img *Image) { img.SlotDelays[0].Limit = MaxLimit + 1 },
		"the same slot twice":     func(img *Image) { img.SlotDelays[1] = img.SlotDelays[0] },
		"a slot of a never-key":   func(img *Image) { img.SlotDelays[0].Token = 0 },
	}
	assertSpoiledRefused(t, buf.Bytes(), snapVersion7, damage)
	// Once the delays ended and no permit has one, the older layout again.
	b := &applier{f: New(Config{})}
	p := b.at(2, Acquire{Key: "s", Holder: "h1", TTL: time.Second, Limit: 2, LockDelay: time.Second}).Key
	b.expirePermit(2, "s", uint64(p.Token))
	b.at(2, DelayEnd{Key: "s", Token: p.Token})
	buf.Reset()
	if err := b.f.Image().Encode(&buf); err != nil || buf.Bytes()[4] >= snapVersion5 {
		t.Fatalf("version %d, %v", buf.Bytes()[4], err)
	}
}

// The state machine keeps a delayed slot itself: acquires the leader let
// through together must not fill it. A permit finds it taken while live
// permits and delayed slots fill the limit; a lock and a multi-key set
// find the key kept while any slot is delayed; a holder with a live permit
// renews it; a DelayEnd frees the slot.
func TestDelayedSlotIsKeptByTheStateMachine(t *testing.T) {
	a := &applier{f: New(Config{})}
	p1 := a.at(1, Acquire{Key: "s", Holder: "h1", TTL: time.Second, Limit: 2, LockDelay: time.Second}).Key
	p2 := a.at(1, Acquire{Key: "s", Holder: "h2", TTL: time.Second, Limit: 2}).Key
	a.expirePermit(1, "s", uint64(p1.Token))
	var sd *SlotDelayedError
	if r := a.at(1, Acquire{Key: "s", Holder: "h3", TTL: time.Second, Limit: 2}); !errors.As(r.Err, &sd) || len(sd.Tokens) != 1 || sd.Tokens[0] != p1.Token {
		t.Fatalf("a permit into the delayed slot: %+v", r)
	}
	if r := a.at(1, Acquire{Key: "s", Holder: "h2", TTL: 2 * time.Second, Limit: 2}); r.Err != nil || !r.Renewed {
		t.Fatalf("h2's renewal: %+v", r)
	}
	if r := a.at(1, Acquire{Key: "s", Holder: "h4", TTL: time.Second, Limit: 3}); !errors.Is(r.Err, ErrLimitMismatch) {
		t.Fatalf("another limit beside a live permit: %+v", r)
	}
	a.at(1, Release{Key: "s", Holder: "h2", Token: p2.Token})
	if r := a.at(1, Acquire{Key: "s", Holder: "h4", TTL: time.Second}); !errors.Is(r.Err, ErrSlotDelayed) {
		t.Fatalf("a lock beside a delayed slot: %+v", r)
	}
	if r := a.at(1, AcquireMulti{Keys: []string{"t", "s"}, Holder: "h4", TTL: time.Second}); !errors.Is(r.Err, ErrSlotDelayed) {
		t.Fatalf("a set beside a delayed slot: %+v", r)
	}
	if _, ok := a.f.Get("t"); ok {
		t.Fatal("a refused set took a key")
	}
	if r := a.at(1, Acquire{Key: "s", Holder: "h3", TTL: time.Second, Limit: 2}); r.Err != nil {
		t.Fatalf("a permit beside one delayed slot of two: %+v", r)
	}
	a.at(1, DelayEnd{Key: "s", Token: p1.Token})
	if r := a.at(1, Acquire{Key: "s", Holder: "h5", TTL: time.Second, Limit: 2}); r.Err != nil {
		t.Fatalf("a permit once the delay ended: %+v", r)
	}
}

// A restore from backup ends every live permit; one with a lock-delay
// leaves its slot delayed, the key's last grant's too, and the image
// installs.
func TestEndPermitsKeepsTheirDelays(t *testing.T) {
	a := &applier{f: New(Config{})}
	p1 := a.at(2, Acquire{Key: "s", Holder: "h1", TTL: time.Second, Limit: 3, LockDelay: time.Second}).Key
	a.at(2, Acquire{Key: "s", Holder: "h2", TTL: time.Second, Limit: 3})
	p3 := a.at(2, Acquire{Key: "s", Holder: "h3", TTL: time.Second, Limit: 3, LockDelay: 2 * time.Second}).Key
	img := a.f.Image()
	img.EndPermits()
	for i, k := range img.Keys {
		if k.State == Held {
			img.Keys[i].State = Expired // as the restore does
		}
	}
	if len(img.SlotDelays) != 2 || img.SlotDelays[0].Token != p1.Token || img.SlotDelays[1].Token != p3.Token {
		t.Fatalf("delayed slots %+v", img.SlotDelays)
	}
	var buf bytes.Buffer
	if err := img.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	g := New(Config{})
	if err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	if !g.DelayPending("s", p3.Token) || !g.DelayPending("s", p1.Token) || len(g.LockDelayed()) != 2 {
		t.Fatalf("after the restore: %+v", g.LockDelayed())
	}
}
