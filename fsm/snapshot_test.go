package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// sink is a raft.SnapshotSink in memory.
type sink struct{ bytes.Buffer }

func (*sink) ID() string    { return "test" }
func (*sink) Cancel() error { return nil }
func (*sink) Close() error  { return nil }

// unusual applies grants whose entries do not fit inline: a value, a holder
// longer than 64 KiB, a renewal more than 2^32 entries after its grant; and
// ordinary ones beside them.
func unusual(t *testing.T) *clocked {
	c := newClocked(Config{})
	c.at(2, Acquire{Key: "plain", Holder: "h", TTL: time.Second, RequestID: "r1"})
	c.at(2, Acquire{Key: "valued", Holder: "h", TTL: time.Second, Value: "10.0.0.1:80", LockDelay: time.Second})
	long := strings.Repeat("x", 70_000)
	c.at(2, Acquire{Key: "long", Holder: long, TTL: time.Second, RequestID: "r2"})
	c.at(2, Acquire{Key: "far", Holder: "h", TTL: time.Second})
	r := c.at(2, Acquire{Key: "gone", Holder: "h", TTL: time.Second, Value: "v"})
	c.at(2, Release{Key: "gone", Holder: "h", Token: r.Key.Token})
	c.index += 1 << 33
	if r := c.at(3, Acquire{Key: "far", Holder: "h", TTL: 2 * time.Second}); !r.Renewed || r.Key.Armed != c.index {
		t.Fatalf("renewal: %+v", r)
	}
	if k, _ := c.f.Get("far"); k.Armed != c.index || k.Index > 1<<32 {
		t.Fatalf("far renewal kept as armed %d, index %d", k.Armed, k.Index)
	}
	if k, _ := c.f.Get("long"); k.Holder != long || k.RequestID != "r2" {
		t.Fatalf("long holder came back as %d bytes, request id %q", len(k.Holder), k.RequestID)
	}
	return c
}

// The raft snapshot, made from the map's entries, must write the bytes that
// Image().Encode writes for the same state, and restore to the same state.
func TestSnapshotPersistsTheImagesBytes(t *testing.T) {
	c := unusual(t)
	snap, err := c.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var got sink
	if err := snap.Persist(&got); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := c.f.Image().Encode(&want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("snapshot of %d bytes differs from the image's %d", got.Len(), want.Len())
	}
	g := New(Config{})
	if err := g.Restore(nopCloser{bytes.NewReader(got.Bytes())}); err != nil {
		t.Fatal(err)
	}
	if a, b := c.f.Image().sort(), g.Image().sort(); !reflect.DeepEqual(a, b) {
		t.Fatalf("restored state differs:\n%+v\n%+v", a, b)
	}
	if img, err := DecodeImage(got.Bytes()); err != nil || !reflect.DeepEqual(img, c.f.Image().sort()) {
		t.Fatalf("decoded image differs: %v", err)
	}
}

// A key whose grant no longer needs its extra record loses it, and a
// forgotten key leaves none behind.
func TestExtrasFollowTheirKeys(t *testing.T) {
	c := unusual(t)
	k, _ := c.f.Get("valued")
	c.at(4, Release{Key: "valued", Holder: "h", Token: k.Token})
	c.at(4, Acquire{Key: "valued", Holder: "h2", TTL: time.Second})
	if k, _ := c.f.Get("valued"); k.Value != "" || k.Holder != "h2" || k.LockDelay != 0 {
		t.Fatalf("new grant: %+v", k)
	}
	gone, _ := c.f.Get("gone")
	c.at(5, Reclaim{Keys: []ReclaimKey{{"gone", gone.Token}}})
	if _, ok := c.f.Get("gone"); ok {
		t.Fatal("gone was not reclaimed")
	}
	if len(c.f.extras) != 2 { // long and far
		t.Fatalf("extras %v, want those of long and far", len(c.f.extras))
	}
}

// Two nodes whose tables were laid out differently (one restored from a
// snapshot halfway, the keys then in name order and under another hash
// seed) write the same snapshot bytes after the same entries, through a
// reclamation of most keys, which gives the table's memory back.
func TestSnapshotBytesDoNotDependOnTheTable(t *testing.T) {
	const n = 3000
	a := newClocked(Config{})
	var b *clocked
	tokens := make(map[string]Result)
	for i := 0; i < n; i++ {
		if i == n/2 {
			b = &clocked{applier: a.applier, now: a.now}
			b.restart(t, Config{})
		}
		k := fmt.Sprintf("k%05d", (i*7919)%n)
		cmd := Acquire{Key: k, Holder: "h", TTL: time.Second}
		if i%10 == 0 {
			cmd.Value = "v" + k
		}
		r := a.at(1, cmd)
		if b != nil {
			b.at(1, cmd)
		}
		tokens[k] = *r
	}
	// The leader's pattern: list what ended, then reclaim it, in batches.
	for _, c := range []*clocked{a, b} {
		for k, r := range tokens {
			c.at(1, Release{Key: k, Holder: "h", Token: r.Key.Token})
		}
		ended := c.f.Ended()
		slices.SortFunc(ended, func(x, y ReclaimKey) int { return strings.Compare(x.Key, y.Key) })
		ended = ended[:len(ended)-10]
		for len(ended) > 0 {
			batch := ended[:min(len(ended), MaxReclaimBatch)]
			ended = ended[len(batch):]
			if r := c.at(2, Reclaim{Keys: batch}); r.Reclaim.Reclaimed != len(batch) {
				t.Fatalf("reclaimed %d of %d", r.Reclaim.Reclaimed, len(batch))
			}
		}
	}
	var sa, sb sink
	for _, x := range []struct {
		c *clocked
		s *sink
	}{{a, &sa}, {b, &sb}} {
		snap, err := x.c.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if err := snap.Persist(x.s); err != nil {
			t.Fatal(err)
		}
		if x.c.f.Len() != 10 || x.c.f.keys.index.Size() > minIndex*16 || len(x.c.f.keys.pages) > 2 {
			t.Fatalf("%d keys left in an index of %d and %d pages", x.c.f.Len(), x.c.f.keys.index.Size(), len(x.c.f.keys.pages))
		}
	}
	if !bytes.Equal(sa.Bytes(), sb.Bytes()) {
		t.Fatalf("snapshots of the same state differ: %d and %d bytes", sa.Len(), sb.Len())
	}
}

// A restore appends the keys to the table without looking each up first
// (keyTable.load): that is safe only because the decoder refuses keys that
// are not in strictly increasing order, so a snapshot naming a key twice,
// or out of order, must be refused and change nothing.
func TestRestoreRefusesKeysOutOfOrder(t *testing.T) {
	a := &applier{f: New(Config{})}
	for _, k := range []string{"a", "b", "c"} {
		a.at(1, Acquire{Key: k, Holder: "h", TTL: time.Second})
	}
	img := a.f.Image().sort()
	for name, order := range map[string][]int{"twice": {0, 1, 1}, "reversed": {0, 2, 1}, "in order": {0, 1, 2}} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := encodeState(&buf, img, img.version(), len(order), func(i int) KeyState { return img.Keys[order[i]] }); err != nil {
				t.Fatal(err)
			}
			g, _ := seeded()
			before := g.Image().sort()
			err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())})
			if name == "in order" {
				if err != nil {
					t.Fatal(err)
				}
				if k, ok := g.Get("b"); !ok || k.Holder != "h" || g.Len() != 3 {
					t.Fatalf("restored b = %+v, %v; %d keys", k, ok, g.Len())
				}
				return
			}
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("err = %v, want ErrBadSnapshot", err)
			}
			if !reflect.DeepEqual(before, g.Image().sort()) {
				t.Fatal("a refused snapshot changed the state")
			}
		})
	}
}

// A table filled by a restore's bulk load answers lookups, puts and
// deletes as one filled key by key, across pages.
func TestBulkLoadedTableWorks(t *testing.T) {
	const n = 3*pageSlots + 17
	a := &applier{f: New(Config{})}
	for i := 0; i < n; i++ {
		a.at(1, Acquire{Key: fmt.Sprintf("k%06d", i), Holder: "h", TTL: time.Second})
	}
	var buf bytes.Buffer
	if err := a.f.Image().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	g := New(Config{})
	if err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, ok := g.Get(fmt.Sprintf("k%06d", i)); !ok {
			t.Fatalf("k%06d missing after the restore", i)
		}
	}
	for i := 0; i < n; i += 2 {
		if !g.keys.delete(fmt.Sprintf("k%06d", i)) {
			t.Fatalf("k%06d not deleted", i)
		}
	}
	for i := 0; i < n; i++ {
		if _, ok := g.Get(fmt.Sprintf("k%06d", i)); ok != (i%2 == 1) {
			t.Fatalf("k%06d present = %v after deleting the even keys", i, ok)
		}
	}
}

// assertSpoiledRefused decodes good, spoils the image with each of damage,
// encodes it in version and checks that both DecodeImage and Restore
// refuse it whole.
func assertSpoiledRefused(t *testing.T, good []byte, version byte, damage map[string]func(*Image)) {
	t.Helper()
	for name, spoil := range damage {
		t.Run(name, func(t *testing.T) {
			img, err := DecodeImage(good)
			if err != nil {
				t.Fatal(err)
			}
			spoil(img)
			var bad bytes.Buffer
			if err := encodeState(&bad, img, version, len(img.Keys), func(i int) KeyState { return img.Keys[i] }); err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeImage(bad.Bytes()); !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("decoded: %v", err)
			}
			g := New(Config{})
			if err := g.Restore(nopCloser{bytes.NewReader(bad.Bytes())}); !errors.Is(err, ErrBadSnapshot) || g.Len() != 0 {
				t.Fatalf("restored: %v", err)
			}
		})
	}
}
