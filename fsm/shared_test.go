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

func shared(key, holder, rid string) Acquire {
	return Acquire{Key: key, Holder: holder, TTL: time.Second, RequestID: rid, Shared: true}
}

func TestSharedRules(t *testing.T) {
	a := &applier{f: New(Config{})}
	r1 := a.at(2, shared("k", "r1", "q1"))
	r2 := a.at(2, shared("k", "r2", "q2"))
	if r1.Err != nil || r2.Err != nil || r2.Key.Token <= r1.Key.Token || !r2.Key.Shared || r2.Key.Limit != 0 {
		t.Fatalf("shared grants: %+v %+v", r1, r2)
	}
	var he *HeldError
	if r := a.at(2, Acquire{Key: "k", Holder: "w", TTL: time.Second}); !errors.As(r.Err, &he) || he.Holder != "r1" {
		t.Fatalf("an exclusive grant beside shared ones: %+v", r)
	}
	if r := a.at(2, permit("k", "w", "", 2)); !errors.Is(r.Err, ErrLimitMismatch) {
		t.Fatalf("a permit of a shared key: %+v", r)
	}
	a.at(2, Release{Key: "k", Holder: "r1", Token: r1.Key.Token})
	a.at(2, Release{Key: "k", Holder: "r2", Token: r2.Key.Token})
	w := a.at(2, Acquire{Key: "k", Holder: "w", TTL: time.Second})
	if w.Err != nil || w.Key.Token <= r2.Key.Token {
		t.Fatalf("exclusive after the readers: %+v", w)
	}
	if r := a.at(2, shared("k", "r3", "")); !errors.As(r.Err, &he) || he.Holder != "w" {
		t.Fatalf("a shared grant beside an exclusive one: %+v", r)
	}
	if r := a.at(2, Acquire{Key: "k", Holder: "r3", TTL: time.Second, Shared: true, Limit: 2}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("shared with a limit: %+v", r)
	}
	a.at(2, Release{Key: "k", Holder: "w", Token: w.Key.Token})
	if r := a.at(2, shared("k", "r3", "")); r.Err != nil || r.Key.Token <= w.Key.Token {
		t.Fatalf("a reader after the writer: %+v", r)
	}
	got, err := Decode(Encode(shared("k", "h", "r")))
	if err != nil || !reflect.DeepEqual(got, shared("k", "h", "r")) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	assertRoundTrip(t, a.f)
}

// rwModel is the reference model of one key: its live shared grants or its
// live exclusive one, and the last token it granted.
type rwModel struct {
	readers   []KeyState
	exclusive *KeyState
	last      fence.Token
}

// Random interleavings of shared and exclusive acquires, releases,
// expiries and reclamations against a reference model: never a shared and
// an exclusive grant live together, every grant the model predicts (and no
// other), tokens per key strictly increasing; at the end a snapshot
// restores to an equal state and a replay of the log to the same one.
func TestPropertySharedExclusive(t *testing.T) {
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
		models := map[string]*rwModel{"a": {}, "b": {}}
		term := uint64(1)
		n := rapid.IntRange(1, 300).Draw(t, "n")
		for i := 0; i < n; i++ {
			term += uint64(rapid.IntRange(0, 9).Draw(t, "bump") / 9)
			key := rapid.SampledFrom([]string{"a", "b"}).Draw(t, "key")
			m := models[key]
			holder := rapid.SampledFrom([]string{"h1", "h2", "h3", "h4"}).Draw(t, "holder")
			switch rapid.IntRange(0, 7).Draw(t, "kind") {
			case 0, 1, 2:
				r := apply(term, shared(key, holder, fmt.Sprintf("s%d", i)))
				mine := -1
				for j, p := range m.readers {
					if p.Holder == holder {
						mine = j
					}
				}
				switch {
				case m.exclusive != nil:
					if !errors.Is(r.Err, ErrHeld) {
						t.Fatalf("shared beside exclusive: %+v", r)
					}
				case mine >= 0:
					if r.Err != nil || !r.Renewed || r.Key.Token != m.readers[mine].Token {
						t.Fatalf("shared renewal: %+v", r)
					}
				default:
					if r.Err != nil || r.Key.Token <= m.last || !r.Key.Shared {
						t.Fatalf("shared grant after %d: %+v", m.last, r)
					}
					m.readers, m.last = append(m.readers, r.Key), r.Key.Token
				}
			case 3:
				r := apply(term, Acquire{Key: key, Holder: holder, TTL: time.Second, RequestID: fmt.Sprintf("x%d", i)})
				switch {
				case len(m.readers) > 0 || m.exclusive != nil && m.exclusive.Holder != holder:
					if !errors.Is(r.Err, ErrHeld) {
						t.Fatalf("exclusive beside others: %+v", r)
					}
				case m.exclusive != nil:
					if r.Err != nil || !r.Renewed {
						t.Fatalf("exclusive renewal: %+v", r)
					}
				default:
					if r.Err != nil || r.Key.Token <= m.last {
						t.Fatalf("exclusive after %d: %+v", m.last, r)
					}
					k := r.Key
					m.exclusive, m.last = &k, k.Token
				}
			case 4, 5:
				if m.exclusive != nil {
					if r := apply(term, Release{Key: key, Holder: m.exclusive.Holder, Token: m.exclusive.Token}); r.Err != nil || !r.Changed {
						t.Fatalf("exclusive release: %+v", r)
					}
					m.exclusive = nil
					continue
				}
				if len(m.readers) == 0 {
					continue
				}
				j := rapid.IntRange(0, len(m.readers)-1).Draw(t, "reader")
				if r := apply(term, Release{Key: key, Holder: m.readers[j].Holder, Token: m.readers[j].Token}); r.Err != nil || !r.Changed {
					t.Fatalf("shared release: %+v", r)
				}
				m.readers = append(m.readers[:j:j], m.readers[j+1:]...)
			case 6:
				_, ps := f.Permits(key)
				if len(ps) == 0 {
					continue
				}
				j := rapid.IntRange(0, len(ps)-1).Draw(t, "reader")
				if r := apply(term, Expire{Key: key, Token: ps[j].Token, Armed: ps[j].Armed}); !r.Changed {
					t.Fatalf("shared expiry: %+v", r)
				}
				m.readers = append(m.readers[:j:j], m.readers[j+1:]...)
			default:
				if last, ok := f.Get(key); ok {
					r := apply(term, Reclaim{Floor: f.Floor() + 1, Keys: []ReclaimKey{{key, last.Token}}})
					if r.Reclaim.Reclaimed == 1 && (len(m.readers) > 0 || m.exclusive != nil) {
						t.Fatalf("reclaimed a key with a live grant")
					}
				}
			}
			for key, m := range models {
				_, ps := f.Permits(key)
				k, ok := f.Get(key)
				lockLive := ok && k.State == Held && len(ps) == 0
				if len(ps) > 0 && lockLive || len(ps) != len(m.readers) || lockLive != (m.exclusive != nil) {
					t.Fatalf("key %s: %d shared live, lock live %v; model %d and %v", key, len(ps), lockLive, len(m.readers), m.exclusive != nil)
				}
				for j := range ps {
					if ps[j].Token != m.readers[j].Token || !ps[j].Shared {
						t.Fatalf("key %s reader %d: %+v, model %+v", key, j, ps[j], m.readers[j])
					}
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
