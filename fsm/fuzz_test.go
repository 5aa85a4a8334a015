package fsm

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// seeded returns an FSM with held, released and expired keys, members, a
// floor and a cluster id: something for a fuzzed command to change.
func seeded() (*FSM, uint64) {
	a := &applier{f: New(Config{})}
	a.at(3, SetClusterID{ID: "c1"})
	a.at(3, SetMember{ID: "n1", HTTPAddr: "127.0.0.1:7700"})
	a.at(3, Acquire{Key: "k", Holder: "h", TTL: time.Second, RequestID: "r1"})
	r := a.at(3, Acquire{Key: "gone", Holder: "h", TTL: time.Second})
	a.at(3, Release{Key: "gone", Holder: "h", Token: r.Key.Token})
	a.at(3, Acquire{Key: "old", Holder: "h2", TTL: time.Second, LockDelay: time.Second})
	a.at(3, Expire{Key: "old", Token: 3<<32 | 1})
	a.at(3, Reclaim{Floor: 1})
	return a.f, a.index
}

// state is an FSM's image without its applied index, which every entry
// moves.
func state(f *FSM) *Image {
	img := f.Image().sort()
	img.Applied = 0
	return img
}

// FuzzApply feeds arbitrary log entries to Apply. An entry that does not
// decode must make Apply panic with the documented corrupt-log message (a
// committed entry that cannot be read is a corrupt log, and guessing would
// break determinism); one that decodes must apply identically on two
// replicas, never lower a key's token, and, when refused or a no-op, leave
// the state as it was.
func FuzzApply(f *testing.F) {
	for _, c := range []Command{
		Acquire{Key: "k", Holder: "h", TTL: time.Second, RequestID: "r1"},
		Acquire{Key: "k", Holder: "other", TTL: time.Second},
		Acquire{Key: "new", Holder: "h", TTL: time.Second, LockDelay: time.Second},
		Release{Key: "k", Holder: "h", Token: 3<<32 | 1},
		Release{Key: "k", Holder: "h", Token: 3<<32 | 1, Next: &Acquire{Key: "k", Holder: "w", TTL: time.Second}},
		Release{Key: "k", Force: true, Token: 3<<32 | 1},
		Expire{Key: "k", Token: 3<<32 | 1, Armed: 3},
		SetMember{ID: "n2", HTTPAddr: "x:1"},
		DelMember{ID: "n1"},
		Barrier{},
		SetClusterID{ID: "c2"},
		Reclaim{Keys: []ReclaimKey{{"gone", 3<<32 | 1}, {"old", 3<<32 | 1}, {"k", 3<<32 | 1}}},
		Reclaim{Floor: 2, Keys: []ReclaimKey{{"gone", 3<<32 | 1}}},
		DelayEnd{Key: "old", Token: 3<<32 | 1},
		DelayEnd{Key: "k", Token: 3<<32 | 1},
		ReleaseMulti{Keys: []ReleaseKey{{"k", 3<<32 | 1}}, Holder: "h", RequestID: "rm"},
		ReleaseMulti{Keys: []ReleaseKey{{"k", 3<<32 | 1}, {"old", 3<<32 | 1}}, Holder: "h"},
	} {
		f.Add(uint64(4), Encode(c))
	}
	f.Add(uint64(1), []byte{})
	f.Add(uint64(4), []byte{typeAcquire, 9})
	f.Add(uint64(4), []byte{typeReserved, version1, 9})
	f.Fuzz(func(t *testing.T, term uint64, data []byte) {
		term = 3 + term%4 // the seeded state is of term 3; a log's terms never go down
		a, idx := seeded()
		b, _ := seeded()
		before := state(a)
		entry := &raft.Log{Index: idx + 1, Term: term, Type: raft.LogCommand, Data: data}
		if _, err := Decode(data); err != nil {
			defer func() {
				p := recover()
				if s, ok := p.(string); !ok || !strings.Contains(s, "the log is corrupt") {
					t.Fatalf("undecodable entry %x: panic %v, want the corrupt-log panic", data, p)
				}
			}()
			a.Apply(entry)
			t.Fatalf("undecodable entry %x was applied", data)
		}
		res, ok := a.Apply(entry).(*Result)
		if !ok {
			t.Fatalf("Apply returned %T", res)
		}
		b.Apply(entry)
		after := state(a)
		if !reflect.DeepEqual(after, state(b)) {
			t.Fatalf("two replicas differ after %x", data)
		}
		for _, k := range before.Keys {
			now, exists := a.Get(k.Key)
			if !exists && reclaimable(data, k, term+a.Floor()) {
				continue
			}
			if now.Token < k.Token {
				t.Fatalf("token of %q went down: %d -> %d", k.Key, k.Token, now.Token)
			}
		}
		next := res.Next != nil && res.Next.Err == nil && res.Next.Changed
		if (res.Err != nil || !res.Changed) && !next && !reflect.DeepEqual(before, after) {
			t.Fatalf("refused or no-op entry %x (err %v) changed the state:\n%+v\n%+v", data, res.Err, before, after)
		}
	})
}

// reclaimable reports whether an entry may forget key k: a Reclaim naming
// its token, of an ended grant whose epoch is below the entry's.
func reclaimable(data []byte, k KeyState, epoch uint64) bool {
	c, err := Decode(data)
	rc, ok := c.(Reclaim)
	if err != nil || !ok || k.State == Held || k.Token.Epoch() >= epoch {
		return false
	}
	for _, rk := range rc.Keys {
		if rk.Key == k.Key && rk.Token == k.Token {
			return true
		}
	}
	return false
}
