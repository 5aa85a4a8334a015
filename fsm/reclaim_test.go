package fsm

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/fenced/fenced/fence"
)

func TestReclaimRule(t *testing.T) {
	c := newClocked(Config{})
	g := c.at(3, Acquire{Key: "a", Holder: "h", TTL: time.Second, RequestID: "r1"}).Key
	c.at(3, Release{Key: "a", Holder: "h", Token: g.Token})
	held := c.at(3, Acquire{Key: "b", Holder: "h", TTL: time.Second}).Key

	// Same epoch as the key's last grant: kept.
	r := c.at(3, Reclaim{Keys: []ReclaimKey{{"a", g.Token}}})
	if r.Reclaim.Reclaimed != 0 || r.Reclaim.Skipped != 1 || !exists(c.f, "a") {
		t.Fatalf("reclaimed in the key's own epoch: %+v", r.Reclaim)
	}
	// A floor raised by more than one is not raised; the key is kept.
	r = c.at(3, Reclaim{Floor: 2, Keys: []ReclaimKey{{"a", g.Token}}})
	if r.Reclaim.Raised || c.f.Floor() != 0 || !exists(c.f, "a") {
		t.Fatalf("floor jump accepted: %+v floor %d", r.Reclaim, c.f.Floor())
	}
	// A wrong token (a grant the leader did not see end), a held key and an
	// unknown key are kept, even with the floor raised.
	r = c.at(3, Reclaim{Floor: 1, Keys: []ReclaimKey{{"a", g.Token + 1}, {"b", held.Token}, {"zz", 5}}})
	if !r.Reclaim.Raised || c.f.Floor() != 1 || r.Reclaim.Reclaimed != 0 || r.Reclaim.Skipped != 3 {
		t.Fatalf("bump: %+v floor %d", r.Reclaim, c.f.Floor())
	}
	// Now the key's epoch (3) is below the entry's (3+1): forgotten.
	r = c.at(3, Reclaim{Floor: 1, Keys: []ReclaimKey{{"a", g.Token}, {"b", held.Token}}})
	if r.Reclaim.Raised || r.Reclaim.Reclaimed != 1 || exists(c.f, "a") || !exists(c.f, "b") {
		t.Fatalf("reclaim after bump: %+v", r.Reclaim)
	}
	// The last grant's request id is still never granted again.
	if r := c.at(3, Acquire{Key: "a", Holder: "h", TTL: time.Second, RequestID: "r1"}); !errors.Is(r.Err, ErrGrantEnded) {
		t.Fatalf("retry of a reclaimed key's request = %+v", r)
	}
	// A new grant of the key is higher than any it had.
	n := c.at(3, Acquire{Key: "a", Holder: "h2", TTL: time.Second, RequestID: "r2"}).Key
	if n.Token <= g.Token || n.Token != tok(t, 4, 1) {
		t.Fatalf("grant after reclaim %v, before %v", n.Token, g.Token)
	}
}

func exists(f *FSM, key string) bool { _, ok := f.Get(key); return ok }

// A floor raise that would leave the epoch space is not made, and nothing is
// reclaimed by an entry whose epoch does not fit.
func TestReclaimNearEpochSpaceEnd(t *testing.T) {
	c := newClocked(Config{})
	restoreFloor(t, c.f, fence.MaxEpoch-3)
	g := c.at(3, Acquire{Key: "a", Holder: "h", TTL: time.Second}).Key
	c.at(3, Release{Key: "a", Holder: "h", Token: g.Token})
	r := c.at(3, Reclaim{Floor: fence.MaxEpoch - 2, Keys: []ReclaimKey{{"a", g.Token}}})
	if r.Reclaim.Raised || r.Reclaim.Reclaimed != 0 || !exists(c.f, "a") {
		t.Fatalf("at the end of the epoch space: %+v", r.Reclaim)
	}
}

// tokenLog checks that every grant of a key is higher than every earlier
// grant of it, whatever was forgotten in between.
type tokenLog map[string]fence.Token

func (l tokenLog) grant(key string, tk fence.Token) error {
	if tk <= l[key] {
		return errors.New("key " + key + ": token " + tk.String() + " after " + l[key].String())
	}
	l[key] = tk
	return nil
}

// genReclaimStep draws a command over three keys, reclaims among them (of
// ended keys, of held keys, with stale tokens) and floor bumps.
func genReclaimStep(t *rapid.T, f *FSM) Command {
	keys := []string{"a", "b", "c"}
	key := rapid.SampledFrom(keys).Draw(t, "key")
	holder := rapid.SampledFrom([]string{"h1", "h2"}).Draw(t, "holder")
	cur, _ := f.Get(key)
	switch rapid.IntRange(0, 5).Draw(t, "kind") {
	case 0, 1:
		return Acquire{Key: key, Holder: holder, TTL: time.Second, RequestID: rapid.SampledFrom([]string{"", "r1", "r2", "r3"}).Draw(t, "rid")}
	case 2:
		return Release{Key: key, Holder: cur.Holder, Token: cur.Token}
	case 3:
		return Expire{Key: key, Token: cur.Token}
	default:
		rc := Reclaim{Floor: f.Floor() + uint64(rapid.IntRange(0, 2).Draw(t, "floor"))}
		for _, k := range keys {
			if !rapid.Bool().Draw(t, "pick") {
				continue
			}
			ks, _ := f.Get(k)
			tk := ks.Token
			if rapid.IntRange(0, 4).Draw(t, "stale") == 0 {
				tk = fence.Token(rapid.Uint64Range(0, 1<<40).Draw(t, "tok"))
			}
			rc.Keys = append(rc.Keys, ReclaimKey{Key: k, Token: tk})
		}
		return rc
	}
}

// Random sequences of grants, releases, expiries, reclaims and floor bumps
// at random non-decreasing terms keep every key's tokens strictly increasing
// across its reclamation and re-grant; a request id is never answered with
// two grants; and a snapshot of any reached state restores to an identical
// state (also mid-run, as a restarted node does).
func TestPropertyReclaimTokensStrictlyIncrease(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := newClocked(Config{MaxSeq: uint64(rapid.IntRange(2, 6).Draw(t, "maxseq"))})
		term := uint64(1)
		tokens := tokenLog{}
		byRequest := map[string]fence.Token{}
		n := rapid.IntRange(1, 250).Draw(t, "n")
		for i := 0; i < n; i++ {
			term += uint64(rapid.IntRange(0, 5).Draw(t, "bump") / 5)
			c.now = c.now.Add(time.Duration(rapid.IntRange(0, 3).Draw(t, "secs")) * time.Second)
			if rapid.IntRange(0, 20).Draw(t, "restart") == 0 {
				c.restart(t, Config{MaxSeq: c.f.maxSeq})
			}
			cmd := genReclaimStep(t, c.f)
			before := c.f.Floor()
			r := c.at(term, cmd)
			if rc, ok := cmd.(Reclaim); ok {
				if r.Reclaim.Raised != (rc.Floor == before+1) || c.f.Floor() > before+1 {
					t.Fatalf("floor %d -> %d by %+v: %+v", before, c.f.Floor(), rc, r.Reclaim)
				}
				continue
			}
			acq, ok := cmd.(Acquire)
			if !ok || r.Err != nil {
				continue
			}
			if acq.RequestID != "" {
				id := acq.Key + "/" + acq.RequestID
				if prev, had := byRequest[id]; had && prev != r.Key.Token {
					t.Fatalf("request %s answered with %v after %v", id, r.Key.Token, prev)
				}
				byRequest[id] = r.Key.Token
			}
			if r.Renewed {
				continue
			}
			if err := tokens.grant(acq.Key, r.Key.Token); err != nil {
				t.Fatal(err)
			}
		}
		assertRoundTrip(t, c.f)
	})
}

// The positive control of the property: forgetting a key without the epoch
// rule lets its next grant in the same epoch restart at seq 1, which the
// same check catches.
func TestReclaimIgnoresEpochIsCaught(t *testing.T) {
	c := newClocked(Config{ReclaimIgnoresEpoch: true})
	tokens := tokenLog{}
	g := c.at(2, Acquire{Key: "a", Holder: "h", TTL: time.Second}).Key
	if err := tokens.grant("a", g.Token); err != nil {
		t.Fatal(err)
	}
	c.at(2, Acquire{Key: "a", Holder: "h2", TTL: time.Second}) // refused
	c.at(2, Release{Key: "a", Holder: "h", Token: g.Token})
	g2 := c.at(2, Acquire{Key: "a", Holder: "h2", TTL: time.Second}).Key
	if err := tokens.grant("a", g2.Token); err != nil {
		t.Fatal(err)
	}
	c.at(2, Release{Key: "a", Holder: "h2", Token: g2.Token})
	if r := c.at(2, Reclaim{Keys: []ReclaimKey{{"a", g2.Token}}}); r.Reclaim.Reclaimed != 1 {
		t.Fatalf("broken reclaim kept the key: %+v", r.Reclaim)
	}
	g3 := c.at(2, Acquire{Key: "a", Holder: "h3", TTL: time.Second}).Key
	if err := tokens.grant("a", g3.Token); err == nil {
		t.Fatalf("the checker missed a token that went back: %v after %v", g3.Token, g2.Token)
	}
}

func TestReclaimRoundTrip(t *testing.T) {
	for _, c := range []Command{
		Reclaim{},
		Reclaim{Floor: 9},
		Reclaim{Floor: 1, Keys: []ReclaimKey{{"a", 1<<32 | 1}, {"", 0}, {"k/x", fence.MaxToken}}},
	} {
		got, err := Decode(Encode(c))
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("round trip %#v = %#v, %v", c, got, err)
		}
	}
	// A count the bytes cannot hold is refused, not allocated.
	b := append([]byte{typeReclaim, version1, 0}, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("huge count: %v", err)
	}
}
