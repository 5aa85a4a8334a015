package fsm

import (
	"bytes"
	"reflect"
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
