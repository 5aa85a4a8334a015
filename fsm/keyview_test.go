package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// viewContents returns what a view holds: each key's version.
func viewContents(t *testing.T, v *keyView) map[string]uint64 {
	t.Helper()
	got := make(map[string]uint64, v.n)
	for s := 0; s < v.n; s++ {
		sl := v.at(uint32(s))
		if _, dup := got[sl.key()]; dup {
			t.Fatalf("view holds %q twice", sl.key())
		}
		got[sl.key()] = sl.e.index
	}
	return got
}

// TestKeyViewKeepsItsSlots takes views of a table at random points of
// random puts, overwrites, deletes and reservations, releases them at
// random later, and checks after every step that each live view still
// holds the keys and entries the table held when it was taken: every
// write the table makes to a page a view may share must copy it first.
func TestKeyViewKeepsItsSlots(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var kt keyTable
	ref := make(map[string]uint64)
	type live struct {
		v    *keyView
		want map[string]uint64
	}
	var views []live
	reserved := false
	const ops, keys = 40_000, 5 * pageSlots
	for op := 0; op < ops; op++ {
		k := fmt.Sprintf("k%d", rng.IntN(keys))
		grow := op/(ops/8)%2 == 0
		switch r := rng.IntN(1000); {
		case r < 2:
			views = append(views, live{kt.view(), maps.Clone(ref)})
		case r < 4 && len(views) > 0:
			i := rng.IntN(len(views))
			views[i].v.release()
			views = append(views[:i], views[i+1:]...)
		case r < 450 && grow, r < 200:
			kt.put(k, tableEntry(k, uint64(op)))
			ref[k] = uint64(op)
		case r < 990:
			_, was := ref[k]
			kt.delete(k)
			delete(ref, k)
			reserved = reserved && !was
		default:
			// Less than a page more: more would leave spare pages that
			// checkTable's bound on them does not allow for.
			kt.reserve(kt.len() + rng.IntN(pageSlots/2))
			reserved = true
		}
		if op%500 == 0 || op == ops-1 {
			for i, l := range views {
				if got := viewContents(t, l.v); !maps.Equal(got, l.want) {
					t.Fatalf("op %d: view %d of %d keys changed under the table's writes (now %d keys)", op, i, len(l.want), len(got))
				}
			}
			checkTable(t, &kt, ref, reserved)
		}
	}
	if len(views) == 0 {
		t.Fatal("no view was live at the end: the test checked too little")
	}
	for _, l := range views {
		l.v.release()
	}
	if kt.sh.views != 0 {
		t.Fatalf("%d views counted after all were released", kt.sh.views)
	}
}

// fataler is what the snapshot helpers need of a test, a benchmark or a
// rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// snapshotBytes persists snap.
func snapshotBytes(t fataler, snap raft.FSMSnapshot) []byte {
	t.Helper()
	var out sink
	if err := snap.Persist(&out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// persisted takes a snapshot of f, persists and releases it, as raft does.
func persisted(t fataler, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	return snapshotBytes(t, snap)
}

// imageBytes encodes the FSM's state now.
func imageBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := f.Image().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// churn applies, in term, grants of new keys, renewals, releases and
// reclamations of the keys named from, so that a snapshot's pages are
// appended to, rewritten and filled from the last slot.
func churn(t *testing.T, c *clocked, term uint64, prefix string, n int) {
	t.Helper()
	var ended []ReclaimKey
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%s%05d", prefix, i)
		g, ok := c.f.Get(k)
		switch {
		case !ok:
			c.at(term, Acquire{Key: k, Holder: "h", TTL: time.Minute, RequestID: "n" + k})
		case g.State == Held && i%3 == 0:
			c.at(term, Release{Key: k, Holder: g.Holder, Token: g.Token})
			ended = append(ended, ReclaimKey{Key: k, Token: g.Token})
		case g.State == Held:
			c.at(term, Acquire{Key: k, Holder: g.Holder, TTL: 2 * time.Minute, RequestID: g.RequestID})
		}
	}
	// Released in an earlier term: a raised floor lets them go.
	r := c.at(term+1, Reclaim{Floor: c.f.Floor() + 1, Keys: ended})
	if r.Reclaim.Reclaimed == 0 && len(ended) > 0 {
		r = c.at(term+1, Reclaim{Floor: c.f.Floor(), Keys: ended})
		if r.Reclaim.Reclaimed == 0 {
			t.Fatalf("nothing reclaimed: %+v", r.Reclaim)
		}
	}
}

// TestSnapshotIsThePointInTime: a snapshot persisted while entries go on
// being applied (new keys, renewals, releases, reclaimed keys) writes the
// state as it was when it was taken, byte for byte.
func TestSnapshotIsThePointInTime(t *testing.T) {
	c := newClocked(Config{})
	churn(t, c, 3, "a/", 3*pageSlots)
	churn(t, c, 3, "a/", 3*pageSlots)
	want := imageBytes(t, c.f)
	snap, err := c.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	before := c.f.keys.len()
	churn(t, c, 5, "a/", 3*pageSlots)
	churn(t, c, 7, "b/", 2*pageSlots)
	if c.f.keys.len() == before || bytes.Equal(imageBytes(t, c.f), want) {
		t.Fatal("the churn changed nothing: the test checks nothing")
	}
	if got := snapshotBytes(t, snap); !bytes.Equal(got, want) {
		t.Fatalf("snapshot of %d bytes differs from the state when it was taken (%d bytes)", len(got), len(want))
	}
	snap.Release()
}

// TestSnapshotReleasedAfterResetLeavesTheNewTable: a snapshot of a table
// that a reset (or a restore) has since replaced counts its release on the
// table it shared, not on the new one, whose own live snapshot must stay
// protected.
func TestSnapshotReleasedAfterResetLeavesTheNewTable(t *testing.T) {
	c := newClocked(Config{})
	churn(t, c, 3, "a/", 2*pageSlots)
	old, err := c.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	c.f.Reset()
	c.index = 0
	churn(t, c, 3, "b/", 2*pageSlots)
	want := imageBytes(t, c.f)
	snap, err := c.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	old.Release()
	churn(t, c, 5, "b/", 2*pageSlots)
	if got := snapshotBytes(t, snap); !bytes.Equal(got, want) {
		t.Fatalf("snapshot of %d bytes differs from the state when it was taken (%d bytes)", len(got), len(want))
	}
	snap.Release()
}

// TestSnapshotPersistsWhileApplying persists a snapshot on another
// goroutine while entries are applied, as raft does: the bytes are the
// state when it was taken, and under -race no write of the apply loop
// touches a page the persist reads.
func TestSnapshotPersistsWhileApplying(t *testing.T) {
	c := newClocked(Config{})
	churn(t, c, 3, "a/", 4*pageSlots)
	want := imageBytes(t, c.f)
	snap, err := c.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		var out sink
		if err := snap.Persist(&out); err != nil {
			t.Error(err)
		}
		got <- out.Bytes()
	}()
	churn(t, c, 5, "a/", 4*pageSlots)
	churn(t, c, 7, "b/", pageSlots)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("snapshot of %d bytes differs from the state when it was taken (%d bytes)", len(b), len(want))
	}
	snap.Release()
}
