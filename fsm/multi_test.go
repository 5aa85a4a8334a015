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

func TestAcquireMultiRules(t *testing.T) {
	a := &applier{f: New(Config{})}
	r := a.at(2, AcquireMulti{Keys: []string{"x", "y"}, Holder: "h", TTL: time.Second, RequestID: "m1"})
	if r.Err != nil || len(r.Grants()) != 2 || r.Grants()[0].Token != tok(t, 2, 1) || r.Grants()[1].Token != tok(t, 2, 1) {
		t.Fatalf("multi: %+v", r)
	}
	if again := a.at(2, AcquireMulti{Keys: []string{"x", "y"}, Holder: "h", TTL: time.Second, RequestID: "m1"}); again.Err != nil || !again.Renewed || again.Grants()[1].Token != r.Grants()[1].Token {
		t.Fatalf("a retry: %+v", again)
	}
	a.at(2, Acquire{Key: "z", Holder: "o", TTL: time.Second})
	var he *HeldError
	before := a.f.Image()
	if r := a.at(2, AcquireMulti{Keys: []string{"w", "z", "x"}, Holder: "p", TTL: time.Second}); !errors.As(r.Err, &he) || he.Key != "z" {
		t.Fatalf("a set with a held key: %+v", r)
	}
	if _, ok := a.f.Get("w"); ok {
		t.Fatal("a refused set granted a key")
	}
	after := a.f.Image()
	before.Clock, after.Clock = 0, 0
	if !reflect.DeepEqual(before.Keys, after.Keys) {
		t.Fatal("a refused set changed a key")
	}
	a.at(2, Release{Key: "x", Holder: "h", Token: r.Grants()[0].Token})
	if r := a.at(2, AcquireMulti{Keys: []string{"x", "y"}, Holder: "h", TTL: time.Second, RequestID: "m1"}); !errors.Is(r.Err, ErrGrantEnded) {
		t.Fatalf("a retry after one key ended: %+v", r)
	}
	for _, bad := range []AcquireMulti{
		{Keys: []string{"k", "k"}, Holder: "h", TTL: time.Second},
		{Holder: "h", TTL: time.Second},
		{Keys: make([]string, MaxMultiKeys+1), Holder: "h", TTL: time.Second},
	} {
		if r := a.at(2, bad); !errors.Is(r.Err, ErrInvalid) {
			t.Fatalf("%+v: %+v", bad, r)
		}
	}
	c := AcquireMulti{Keys: []string{"a", "b"}, Holder: "h", TTL: time.Second, RequestID: "r"}
	if got, err := Decode(Encode(c)); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	assertRoundTrip(t, a.f)
}

// Random interleavings of multi-key acquires, single acquires, releases,
// expiries and reclamations against a reference model of each key's lock:
// a multi-key acquire grants every key of its set in one entry or none
// (refused naming the first key held by another), tokens per key strictly
// increase; at the end a snapshot restores to an equal state and a replay
// of the log to the same one.
func TestPropertyAcquireMultiAllOrNothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := New(Config{})
		var log []*raft.Log
		index := uint64(0)
		apply := func(term uint64, c Command) *Result {
			index++
			l := &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: Encode(c)}
			log = append(log, l)
			return f.Apply(l).(*Result)
		}
		keys := []string{"a", "b", "c", "d"}
		holderOf := map[string]string{}
		tokenOf := map[string]fence.Token{}
		last := map[string]fence.Token{}
		term := uint64(1)
		n := rapid.IntRange(1, 200).Draw(t, "n")
		for i := 0; i < n; i++ {
			term += uint64(rapid.IntRange(0, 9).Draw(t, "bump") / 9)
			holder := rapid.SampledFrom([]string{"h1", "h2", "h3"}).Draw(t, "holder")
			switch rapid.IntRange(0, 5).Draw(t, "kind") {
			case 0, 1, 2:
				set := rapid.SliceOfNDistinct(rapid.SampledFrom(keys), 1, 3, func(k string) string { return k }).Draw(t, "set")
				r := apply(term, AcquireMulti{Keys: set, Holder: holder, TTL: time.Second, RequestID: fmt.Sprintf("m%d", i)})
				blocker := ""
				for _, k := range set {
					if h := holderOf[k]; h != "" && h != holder {
						blocker = k
						break
					}
				}
				if blocker != "" {
					var he *HeldError
					if !errors.As(r.Err, &he) || he.Key != blocker {
						t.Fatalf("set %v blocked by %s: %+v", set, blocker, r)
					}
					continue
				}
				if r.Err != nil || len(r.Grants()) != len(set) {
					t.Fatalf("set %v: %+v", set, r)
				}
				for j, k := range set {
					g := r.Grants()[j]
					if holderOf[k] == holder {
						if g.Token != tokenOf[k] {
							t.Fatalf("renewal of %s changed its token", k)
						}
						continue
					}
					if g.Token <= last[k] || g.Holder != holder || g.Key != k {
						t.Fatalf("key %s: %+v after %d", k, g, last[k])
					}
					holderOf[k], tokenOf[k], last[k] = holder, g.Token, g.Token
				}
			case 3:
				k := rapid.SampledFrom(keys).Draw(t, "key")
				if h := holderOf[k]; h != "" {
					if r := apply(term, Release{Key: k, Holder: h, Token: tokenOf[k]}); r.Err != nil || !r.Changed {
						t.Fatalf("release: %+v", r)
					}
					holderOf[k] = ""
				}
			case 4:
				k := rapid.SampledFrom(keys).Draw(t, "key")
				if h := holderOf[k]; h != "" {
					cur, _ := f.Get(k)
					if r := apply(term, Expire{Key: k, Token: cur.Token, Armed: cur.Armed}); !r.Changed {
						t.Fatalf("expire: %+v", r)
					}
					holderOf[k] = ""
				}
			default:
				k := rapid.SampledFrom(keys).Draw(t, "key")
				if cur, ok := f.Get(k); ok {
					apply(term, Reclaim{Floor: f.Floor() + 1, Keys: []ReclaimKey{{k, cur.Token}}})
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
