package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/internal/testutil"
)

func TestFloorOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bytes   uint64
		percent float64
		total   uint64
		want    uint64
	}{
		{"off", 0, 0, 1 << 30, 0},
		{"bytes larger", 64 << 20, 5, 100 << 20, 64 << 20},
		{"percent larger", 64 << 20, 5, 10 << 30, 512 << 20},
		{"percent only", 0, 10, 1000, 100},
		{"unknown total", 64 << 20, 5, 0, 64 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{DataDirMinFree: tc.bytes, DataDirMinFreePercent: tc.percent}
			if got := c.floorOf(tc.total); got != tc.want {
				t.Fatalf("floorOf(%d) = %d, want %d", tc.total, got, tc.want)
			}
		})
	}
}

// fakeDisk is a node's file system as its free-space check sees it.
type fakeDisk struct{ free atomic.Uint64 }

const fakeDiskTotal = 1 << 30

func (d *fakeDisk) statFS(string) (uint64, uint64, error) { return d.free.Load(), fakeDiskTotal, nil }

// newSpaceCluster is a cluster whose nodes' free space the test sets, by
// node index; every disk starts half free. The floor is 5% (about 51 MiB).
func newSpaceCluster(t *testing.T, size int, mod func(*Config)) (*testCluster, []*fakeDisk) {
	disks := make([]*fakeDisk, size)
	byID := map[string]*fakeDisk{}
	for i := range disks {
		disks[i] = &fakeDisk{}
		disks[i].free.Store(fakeDiskTotal / 2)
		byID["n"+string(rune('1'+i))] = disks[i]
	}
	tc := newTestClusterWith(t, size, func(c *Config) {
		c.freeSpace = byID[c.ID].statFS
		c.DataDirMinFreePercent = 5
		c.DiskCheckInterval = 20 * time.Millisecond
		mod(c)
	})
	return tc, disks
}

// A leader under its free-space floor refuses new keys with ErrNoSpace, and
// only them: the holder's re-acquire, renewals, keepalives, verifies and
// releases go on. Freeing space is all it takes to accept new keys again.
func TestNoSpaceRefusesOnlyNewKeys(t *testing.T) {
	tc, disks := newSpaceCluster(t, 1, func(*Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	li, lead := tc.leader()
	g1, err := lead.Acquire(ctx, AcquireArgs{Key: "held", Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	g2, err := lead.Acquire(ctx, AcquireArgs{Key: "other", Holder: "b", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	disks[li].free.Store(10 << 20) // under the floor
	testutil.Eventually(t, 10*time.Second, func() error {
		if !lead.NoSpace() {
			return errors.New("the leader has not noticed")
		}
		return nil
	})
	if st := lead.Status(); st.DataDir == nil || !st.DataDir.NoSpace || st.DataDir.FreeBytes != 10<<20 || st.DataDir.FloorBytes == 0 || st.DataDir.Reason == "" {
		t.Fatalf("status data dir: %+v", st.DataDir)
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "new", Holder: "a", TTL: time.Minute}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("new key without space: %v", err)
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "held", Holder: "c", TTL: time.Minute}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("another holder's acquire of a held key without space: %v", err)
	}
	if g, err := lead.Acquire(ctx, AcquireArgs{Key: "held", Holder: "a", TTL: time.Minute}); err != nil || g.Token != g1.Token {
		t.Fatalf("the holder's re-acquire without space: %+v %v", g, err)
	}
	if _, _, err := lead.Renew(ctx, "held", "a", g1.Token); err != nil {
		t.Fatalf("renew without space: %v", err)
	}
	if _, err := lead.Keepalive(ctx, "a", nil); err != nil {
		t.Fatalf("keepalive without space: %v", err)
	}
	if v, err := lead.Verify(ctx, "held", g1.Token, "a"); err != nil || !v.Allow {
		t.Fatalf("verify without space: %+v %v", v, err)
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "other", Holder: "b", Token: g2.Token}); err != nil {
		t.Fatalf("release without space: %v", err)
	}

	disks[li].free.Store(fakeDiskTotal / 2) // space freed
	testutil.Eventually(t, 10*time.Second, func() error {
		if lead.NoSpace() {
			return errors.New("the leader still says no space")
		}
		return nil
	})
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "new", Holder: "a", TTL: time.Minute}); err != nil {
		t.Fatalf("new key after space was freed: %v", err)
	}
}

// A log write that fails with ENOSPC makes the node refuse new keys at once,
// whatever the floor says, until a check finds space.
func TestENOSPCRefusesNewKeys(t *testing.T) {
	tc, _ := newSpaceCluster(t, 1, func(c *Config) { c.DiskCheckInterval = time.Hour })
	_, lead := tc.leader()
	lead.sawENOSPC(&pathErr{syscall.ENOSPC})
	if !lead.NoSpace() {
		t.Fatal("ENOSPC on a log write was not noticed")
	}
	if _, err := lead.Acquire(context.Background(), AcquireArgs{Key: "new", Holder: "a", TTL: time.Minute}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("new key after ENOSPC: %v", err)
	}
	lead.checkDisk() // the disk has space: the next check ends it
	if lead.NoSpace() {
		t.Fatal("a check that found space did not end it")
	}
}

type pathErr struct{ err error }

func (e *pathErr) Error() string { return "write wal: " + e.err.Error() }
func (e *pathErr) Unwrap() error { return e.err }

// A leader without space hands leadership to a voter that has space; the new
// leader takes new keys. A cluster whose voters all lack space keeps its
// leader (it still serves renewals, releases and verifies).
func TestNoSpaceLeaderHandsOver(t *testing.T) {
	var tc *testCluster
	tc, disks := newSpaceCluster(t, 3, func(c *Config) {
		c.noSpaceBackoff = 200 * time.Millisecond
		c.PeerHasSpace = func(_ context.Context, id, _ string) bool {
			for _, n := range tc.nodes {
				if n != nil && n.cfg.ID == id {
					return !n.NoSpace()
				}
			}
			return false
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Every voter full: the leader stays.
	for _, d := range disks {
		d.free.Store(1 << 20)
	}
	li, lead := tc.leader()
	testutil.Eventually(t, 10*time.Second, func() error {
		for _, n := range tc.nodes {
			if !n.NoSpace() {
				return errors.New("not every node has noticed")
			}
		}
		return nil
	})
	if i, _ := tc.leader(); i != li {
		t.Fatalf("leadership moved from %d to %d though no voter has space", li, i)
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "k", Holder: "a", TTL: time.Minute}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("new key on a full cluster: %v", err)
	}

	// One follower gets space: leadership moves to it, and it takes new
	// keys.
	fi := (li + 1) % 3
	disks[fi].free.Store(fakeDiskTotal / 2)
	testutil.Eventually(t, 30*time.Second, func() error {
		if !tc.nodes[fi].Ready() {
			return errors.New("the voter with space does not lead")
		}
		return nil
	})
	if _, err := tc.nodes[fi].Acquire(ctx, AcquireArgs{Key: "k", Holder: "a", TTL: time.Minute}); err != nil {
		t.Fatalf("new key on the leader with space: %v", err)
	}
}
