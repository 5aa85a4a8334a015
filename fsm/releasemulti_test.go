package fsm

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"

	"github.com/fenced/fenced/fence"
)

func TestReleaseMultiRules(t *testing.T) {
	a := &applier{f: New(Config{})}
	set := a.at(2, AcquireMulti{Keys: []string{"x", "y", "z"}, Holder: "h", TTL: time.Second}).Grants()
	p := a.at(2, Acquire{Key: "sem", Holder: "h", TTL: time.Second, Limit: 2})
	a.at(2, Acquire{Key: "sem", Holder: "o", TTL: time.Second, Limit: 2})
	o := a.at(2, Acquire{Key: "other", Holder: "o", TTL: time.Second})
	keysOf := func(gs ...KeyState) []ReleaseKey {
		var out []ReleaseKey
		for _, g := range gs {
			out = append(out, ReleaseKey{Key: g.Key, Token: g.Token})
		}
		return out
	}
	refusals := []struct {
		name string
		c    ReleaseMulti
		key  string
		want error
	}{
		{"another holder's key", ReleaseMulti{Keys: keysOf(set[0], o.Key), Holder: "h"}, "other", ErrNotHolder},
		{"a stale token", ReleaseMulti{Keys: append(keysOf(set[0]), ReleaseKey{"y", set[1].Token + 1}), Holder: "h"}, "y", ErrStaleToken},
		{"an unknown key", ReleaseMulti{Keys: append(keysOf(set...), ReleaseKey{"nope", 7}), Holder: "h"}, "nope", ErrUnknownKey},
		{"a permit of another", ReleaseMulti{Keys: append(keysOf(set[2]), ReleaseKey{"sem", p.Key.Token + 1}), Holder: "h"}, "sem", ErrNotHolder},
	}
	for _, tc := range refusals {
		before := a.f.Image()
		r := a.at(2, tc.c)
		var ke *KeyError
		if !errors.As(r.Err, &ke) || ke.Key != tc.key || !errors.Is(r.Err, tc.want) || r.Changed {
			t.Fatalf("%s: %+v", tc.name, r)
		}
		after := a.f.Image()
		if !reflect.DeepEqual(before.sort().Keys, after.sort().Keys) || !reflect.DeepEqual(before.Semaphores, after.Semaphores) || !reflect.DeepEqual(before.Retired, after.Retired) {
			t.Fatalf("%s: a refused set changed the state", tc.name)
		}
	}
	for _, bad := range []ReleaseMulti{
		{Holder: "h"},
		{Keys: keysOf(set[0], set[0]), Holder: "h"},
		{Keys: keysOf(set[0])},
		{Keys: []ReleaseKey{{Key: "x"}}, Holder: "h"},
		{Keys: make([]ReleaseKey, MaxMultiKeys+1), Holder: "h"},
	} {
		if r := a.at(2, bad); !errors.Is(r.Err, ErrInvalid) {
			t.Fatalf("%+v: %+v", bad, r)
		}
	}

	c := ReleaseMulti{Keys: append(keysOf(set...), ReleaseKey{"sem", p.Key.Token}), Holder: "h", RequestID: "r1"}
	r := a.at(2, c)
	if r.Err != nil || !r.Changed || len(r.Grants()) != 4 {
		t.Fatalf("release of the set: %+v", r)
	}
	for i, g := range r.Grants() {
		if g.Key != c.Keys[i].Key || g.Token != c.Keys[i].Token || g.State != Released {
			t.Fatalf("grant %d: %+v", i, g)
		}
	}
	for _, k := range []string{"x", "y", "z"} {
		if cur, _ := a.f.Get(k); cur.State != Released {
			t.Fatalf("%s after the release: %+v", k, cur)
		}
	}
	if _, ps := a.f.Permits("sem"); len(ps) != 1 || ps[0].Holder != "o" {
		t.Fatalf("the semaphore after the release: %+v", ps)
	}
	// The repeat, after x went to another holder, is answered with the
	// grants it ended and ends nothing.
	nx := a.at(2, Acquire{Key: "x", Holder: "o", TTL: time.Second})
	again := a.at(2, ReleaseMulti{Keys: append(keysOf(nx.Key), c.Keys[1:]...), Holder: "h", RequestID: "r1"})
	if again.Err != nil || again.Changed || !again.Recalled || again.Grants()[0].Token != set[0].Token {
		t.Fatalf("a repeat: %+v", again)
	}
	if cur, _ := a.f.Get("x"); cur.State != Held || cur.Token != nx.Key.Token {
		t.Fatalf("a repeat ended a later grant: %+v", cur)
	}
	// Already released, without a request id: done, as a single release.
	if r := a.at(2, ReleaseMulti{Keys: keysOf(set[1], set[2]), Holder: "h"}); r.Err != nil || r.Changed {
		t.Fatalf("released again: %+v", r)
	}
	if got, err := Decode(Encode(c)); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	assertRoundTrip(t, a.f)
}

// Random interleavings of multi-key acquires, set releases (some naming a
// grant that is not the holder's live one), single releases and expiries
// against a reference model of each key's lock: a set release ends every
// grant it names in one entry or none, refused naming the first bad key in
// the request's order; a repeat of an applied request id ends nothing; a
// replay of the log reaches the same state.
func TestPropertyReleaseMultiAllOrNothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := New(Config{})
		var log []*raft.Log
		index := uint64(0)
		apply := func(c Command) *Result {
			index++
			l := &raft.Log{Index: index, Term: 3, Type: raft.LogCommand, Data: Encode(c)}
			log = append(log, l)
			return f.Apply(l).(*Result)
		}
		keys := []string{"a", "b", "c", "d"}
		holderOf := map[string]string{}
		tokenOf := map[string]fence.Token{}
		var applied []ReleaseMulti // set releases applied, for repeats
		n := rapid.IntRange(1, 80).Draw(t, "n")
		for i := 0; i < n; i++ {
			holder := rapid.SampledFrom([]string{"h1", "h2"}).Draw(t, "holder")
			set := rapid.SliceOfNDistinct(rapid.SampledFrom(keys), 1, 3, func(k string) string { return k }).Draw(t, "set")
			switch rapid.IntRange(0, 5).Draw(t, "kind") {
			case 0, 1:
				r := apply(AcquireMulti{Keys: set, Holder: holder, TTL: time.Second})
				if r.Err == nil {
					for j, k := range set {
						holderOf[k], tokenOf[k] = holder, r.Grants()[j].Token
					}
				}
			case 2, 3:
				c := ReleaseMulti{Holder: holder, RequestID: fmt.Sprintf("r%d", i)}
				bad := ""
				for _, k := range set {
					cur, ok := f.Get(k)
					tk := max(cur.Token, 1)
					if rapid.IntRange(0, 4).Draw(t, "wrong") == 0 {
						tk++
					}
					c.Keys = append(c.Keys, ReleaseKey{Key: k, Token: tk})
					live := ok && cur.State == Held && holderOf[k] == holder && tk == tokenOf[k]
					done := ok && cur.State == Released && cur.Holder == holder && tk == cur.Token
					if bad == "" && !live && !done {
						bad = k
					}
				}
				r := apply(c)
				if bad != "" {
					var ke *KeyError
					if !errors.As(r.Err, &ke) || ke.Key != bad || r.Changed {
						t.Fatalf("set %+v, bad %s: %+v", c, bad, r)
					}
					break
				}
				if r.Err != nil {
					t.Fatalf("set %+v: %v", c, r.Err)
				}
				for _, k := range set {
					holderOf[k] = ""
				}
				applied = append(applied, c)
			case 4:
				if len(applied) > 0 {
					c := rapid.SampledFrom(applied).Draw(t, "repeat")
					if r := apply(c); r.Err != nil || r.Changed || !r.Recalled {
						t.Fatalf("repeat %+v: %+v", c, r)
					}
				}
			default:
				k := set[0]
				if holderOf[k] != "" {
					cur, _ := f.Get(k)
					if r := apply(Expire{Key: k, Token: cur.Token, Armed: cur.Armed}); !r.Changed {
						t.Fatalf("expire: %+v", r)
					}
					holderOf[k] = ""
				}
			}
			for _, k := range keys {
				cur, ok := f.Get(k)
				live := ok && cur.State == Held
				if live != (holderOf[k] != "") || live && (cur.Holder != holderOf[k] || cur.Token != tokenOf[k]) {
					t.Fatalf("key %s: %+v, model %q %d", k, cur, holderOf[k], tokenOf[k])
				}
			}
		}
		assertRoundTrip(t, f)
		g := New(Config{})
		g.ApplyBatch(log)
		if !reflect.DeepEqual(f.Image().sort(), g.Image().sort()) {
			t.Fatalf("a replay of the log differs")
		}
	})
}
