package fsm

import (
	"reflect"
	"testing"
	"time"
)

// touchObserver records what the observer hears.
type touchObserver struct {
	granted, touched []KeyState
	barriers         [][2]uint64
}

func (o *touchObserver) Granted(k KeyState, _ bool) { o.granted = append(o.granted, k) }
func (o *touchObserver) Ended(KeyState)             {}
func (o *touchObserver) Restored()                  {}
func (o *touchObserver) Touched(k KeyState)         { o.touched = append(o.touched, k) }
func (o *touchObserver) BarrierApplied(index, term uint64) {
	o.barriers = append(o.barriers, [2]uint64{index, term})
}

// A Touch moves the Armed index of the held grants it names (and nothing
// else of them), skips the others, is no watch event, and makes an expiry
// decided before it a no-op.
func TestTouchRule(t *testing.T) {
	obs := &touchObserver{}
	a := &applier{f: New(Config{Observer: obs})}
	s, err := a.f.Feed().Subscribe("", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	held := a.at(1, Acquire{Key: "held", Holder: "h", TTL: time.Second, LockDelay: time.Second, Value: "v"}).Key
	gone := a.at(1, Acquire{Key: "released", Holder: "h", TTL: time.Second}).Key
	a.at(1, Release{Key: "released", Holder: "h", Token: gone.Token})
	a.at(2, Barrier{})
	drain(t, s)
	before, _ := a.f.Get("released")
	r := a.at(2, Touch{Keys: []TouchKey{{Key: "held", Token: held.Token}, {Key: "released", Token: gone.Token},
		{Key: "held", Token: held.Token + 1}, {Key: "nokey", Token: 1}}})
	if !r.Changed || r.Touched != 1 {
		t.Fatalf("touch result %+v", r)
	}
	k, _ := a.f.Get("held")
	want := held
	want.Armed = a.index
	if !reflect.DeepEqual(k, want) {
		t.Fatalf("touched grant %+v, want %+v", k, want)
	}
	if after, _ := a.f.Get("released"); !reflect.DeepEqual(before, after) {
		t.Fatal("a touch changed another key")
	}
	if b := drain(t, s); len(b.Events) != 0 {
		t.Fatalf("a touch is not a watch event: %+v", b.Events)
	}
	if len(obs.touched) != 1 || obs.touched[0].Armed != a.index || len(obs.barriers) != 1 || obs.barriers[0] != [2]uint64{4, 2} {
		t.Fatalf("observer: touched %+v, barriers %v", obs.touched, obs.barriers)
	}
	if r := a.at(2, Expire{Key: "held", Token: held.Token, Armed: held.Armed}); r.Changed {
		t.Fatal("an expiry decided before the touch ended the touched grant")
	}
	if r := a.at(2, Expire{Key: "held", Token: held.Token}); !r.Changed {
		t.Fatal("an expiry naming the touch's arming did not end the grant")
	}
	c := Touch{Keys: []TouchKey{{Key: "a", Token: 5}, {Key: "", Token: 1}}}
	if got, err := Decode(Encode(c)); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := Decode(append(Encode(Touch{Keys: []TouchKey{{Key: "a", Token: 1}}}), 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}
