package fsm

import (
	"reflect"
	"testing"
	"time"
)

// TestDelayEndRule applies DelayEnd to every kind of key: only the expired
// grant it names, with a lock-delay, changes, and only that change is an
// event.
func TestDelayEndRule(t *testing.T) {
	a := &applier{f: New(Config{})}
	s, err := a.f.Feed().Subscribe("", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	delayed := a.at(1, Acquire{Key: "delayed", Holder: "h", TTL: time.Second, LockDelay: 2 * time.Second}).Key
	a.at(1, Expire{Key: "delayed", Token: delayed.Token})
	nodelay := a.at(1, Acquire{Key: "nodelay", Holder: "h", TTL: time.Second}).Key
	a.at(1, Expire{Key: "nodelay", Token: nodelay.Token})
	held := a.at(1, Acquire{Key: "held", Holder: "h", TTL: time.Second, LockDelay: time.Second}).Key
	released := a.at(1, Acquire{Key: "released", Holder: "h", TTL: time.Second, LockDelay: time.Second}).Key
	a.at(1, Release{Key: "released", Holder: "h", Token: released.Token})
	regranted := a.at(1, Acquire{Key: "regranted", Holder: "h", TTL: time.Second, LockDelay: time.Second}).Key
	a.at(1, Expire{Key: "regranted", Token: regranted.Token})
	a.at(1, Acquire{Key: "regranted", Holder: "h2", TTL: time.Second, LockDelay: time.Second})
	drain(t, s)

	for _, c := range []struct {
		name string
		cmd  DelayEnd
	}{
		{"unknown key", DelayEnd{Key: "nokey", Token: delayed.Token}},
		{"stale token", DelayEnd{Key: "delayed", Token: delayed.Token - 1}},
		{"later token", DelayEnd{Key: "delayed", Token: delayed.Token + 1}},
		{"expired without a delay", DelayEnd{Key: "nodelay", Token: nodelay.Token}},
		{"held", DelayEnd{Key: "held", Token: held.Token}},
		{"released", DelayEnd{Key: "released", Token: released.Token}},
		{"granted again", DelayEnd{Key: "regranted", Token: regranted.Token}},
	} {
		before := state(a.f)
		r := a.at(1, c.cmd)
		if r.Changed || r.Err != nil {
			t.Errorf("%s: result %+v, want a no-op", c.name, r)
		}
		if after := state(a.f); !reflect.DeepEqual(before, after) {
			t.Errorf("%s: the state changed", c.name)
		}
		if b := drain(t, s); len(b.Events) != 0 {
			t.Errorf("%s: events %+v, want none", c.name, b.Events)
		}
	}

	r := a.at(1, DelayEnd{Key: "delayed", Token: delayed.Token})
	if !r.Changed || r.Key.LockDelay != 0 || r.Key.State != Expired || r.Key.Token != delayed.Token {
		t.Fatalf("delay end: result %+v", r)
	}
	if k, _ := a.f.Get("delayed"); k.LockDelay != 0 || k.State != Expired || k.Holder != "h" {
		t.Fatalf("delay end left %+v", k)
	}
	b := drain(t, s)
	if len(b.Events) != 1 {
		t.Fatalf("events %+v, want one", b.Events)
	}
	ev := b.Events[0]
	if ev.Type != EventLockDelayEnded || ev.Key != "delayed" || ev.Token != delayed.Token || ev.Holder != "h" || ev.State != Expired || ev.LockDelay != 0 || ev.Index != a.index {
		t.Fatalf("event %+v", ev)
	}
	for _, k := range a.f.LockDelayed() {
		if k.Key == "delayed" {
			t.Fatalf("a new leader would delay %q again", k.Key)
		}
	}
	// A second DelayEnd of the same grant (a retry, another leader's) is a
	// no-op.
	if r := a.at(1, DelayEnd{Key: "delayed", Token: delayed.Token}); r.Changed {
		t.Fatalf("second delay end changed %+v", r)
	}
	if b := drain(t, s); len(b.Events) != 0 {
		t.Fatalf("second delay end: events %+v", b.Events)
	}
	// The next grant of the key is an ordinary one.
	if g := a.at(2, Acquire{Key: "delayed", Holder: "h3", TTL: time.Second}); g.Err != nil || g.Key.Token <= delayed.Token {
		t.Fatalf("grant after the delay end: %+v", g)
	}
}

// TestDelayEndSnapshot: a key whose lock-delay ended snapshots and
// restores as it is, with no delay, and one whose delay runs still has it.
func TestDelayEndSnapshot(t *testing.T) {
	a := &applier{f: New(Config{})}
	for _, key := range []string{"ended", "running"} {
		g := a.at(1, Acquire{Key: key, Holder: "h", TTL: time.Second, LockDelay: time.Second}).Key
		a.at(1, Expire{Key: key, Token: g.Token})
		if key == "ended" {
			a.at(1, DelayEnd{Key: key, Token: g.Token})
		}
	}
	assertRoundTrip(t, a.f)
	ld := a.f.LockDelayed()
	if len(ld) != 1 || ld[0].Key != "running" {
		t.Fatalf("lock-delayed keys %+v, want only running", ld)
	}
}
