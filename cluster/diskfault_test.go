package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft-wal/types"

	"github.com/fenced/fenced/internal/testutil"
)

// diskFault is what a node's WAL file system does wrong, switched on and off
// while the node runs.
type diskFault struct {
	mu        sync.Mutex
	syncErr   error         // every fsync fails with it
	syncDelay time.Duration // every fsync takes this long first
}

func (d *diskFault) setSyncErr(err error) { d.mu.Lock(); d.syncErr = err; d.mu.Unlock() }

func (d *diskFault) setSyncDelay(dl time.Duration) { d.mu.Lock(); d.syncDelay = dl; d.mu.Unlock() }

func (d *diskFault) onSync() error {
	d.mu.Lock()
	err, dl := d.syncErr, d.syncDelay
	d.mu.Unlock()
	if dl > 0 {
		time.Sleep(dl) // the slow disk itself, not a wait for a condition
	}
	return err
}

// faultVFS wraps a node's WAL file system with a diskFault.
type faultVFS struct {
	types.VFS
	d *diskFault
}

type faultFile struct {
	types.WritableFile
	d *diskFault
}

func (f faultFile) Sync() error {
	if err := f.d.onSync(); err != nil {
		return err
	}
	return f.WritableFile.Sync()
}

func (v faultVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return faultFile{WritableFile: f, d: v.d}, nil
}

func (v faultVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return faultFile{WritableFile: f, d: v.d}, nil
}

// newFaultyCluster is a cluster whose nodes' WALs each go through a
// diskFault, by node index.
func newFaultyCluster(t *testing.T, size int, mod func(*Config)) (*testCluster, []*diskFault) {
	faults := make([]*diskFault, size)
	byID := map[string]*diskFault{}
	for i := range faults {
		faults[i] = &diskFault{}
		byID[fmt.Sprintf("n%d", i+1)] = faults[i]
	}
	tc := newTestClusterWith(t, size, func(c *Config) {
		d := byID[c.ID]
		c.storeVFS = func(v types.VFS) types.VFS { return faultVFS{VFS: v, d: d} }
		mod(c)
	})
	return tc, faults
}

// A leader whose fsync fails with EIO stops itself: it never retries the
// fsync as if the data were durable. The others elect a leader and keep every
// acknowledged grant; the failed node, restarted on a disk that works again,
// recovers from what it has on disk and catches up.
func TestSyncFailureStopsNode(t *testing.T) {
	tc, faults := newFaultyCluster(t, 3, func(*Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	li, lead := tc.leader()
	g1, err := lead.Acquire(ctx, AcquireArgs{Key: "before", Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	faults[li].setSyncErr(syscall.EIO)
	_, _ = lead.Acquire(ctx, AcquireArgs{Key: "during", Holder: "a", TTL: time.Minute}) // its fsync fails
	select {
	case <-lead.Failed():
	case <-ctx.Done():
		t.Fatal("the node whose fsync failed did not stop")
	}
	if !errors.Is(lead.Err(), ErrStoreFailed) || !errors.Is(lead.Err(), syscall.EIO) {
		t.Fatalf("Err = %v", lead.Err())
	}
	if lead.IsLeader() || lead.Ready() {
		t.Fatal("the failed node still leads")
	}
	// Its disk works again: nothing makes it serve until it is restarted.
	faults[li].setSyncErr(nil)

	ni, lead2 := tc.leader()
	if ni == li {
		t.Fatal("the failed node leads again")
	}
	if v, err := lead2.Verify(ctx, "before", g1.Token, "a"); err != nil || !v.Allow {
		t.Fatalf("acknowledged grant after the failure: %+v %v", v, err)
	}
	g2, err := lead2.Acquire(ctx, AcquireArgs{Key: "after", Holder: "b", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	tc.stop(li)
	tc.start(li)
	testutil.Eventually(t, 30*time.Second, func() error {
		ks, ok := tc.nodes[li].FSM().Get("after")
		if !ok || ks.Token != g2.Token {
			return errors.New("the restarted node has not caught up")
		}
		return nil
	})
	if ks, ok := tc.nodes[li].FSM().Get("before"); !ok || ks.Token != g1.Token {
		t.Fatalf("the restarted node lost an acknowledged grant: %+v %v", ks, ok)
	}
}

// A leader whose fsync stalls past LogStallBound stops leading: the others
// elect a leader and serve while its disk stays slow. Once its disk is fast
// again it follows and catches up.
func TestSlowLeaderDiskStepsDown(t *testing.T) {
	tc, faults := newFaultyCluster(t, 3, func(c *Config) { c.LogStallBound = 500 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	li, lead := tc.leader()
	g1, err := lead.Acquire(ctx, AcquireArgs{Key: "before", Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	faults[li].setSyncDelay(5 * time.Second)
	go func() { _, _ = lead.Acquire(ctx, AcquireArgs{Key: "slow", Holder: "a", TTL: time.Minute}) }() // its fsync stalls
	var lead2 *Node
	testutil.Eventually(t, 30*time.Second, func() error {
		for i, n := range tc.nodes {
			if i != li && n.Ready() {
				lead2 = n
				return nil
			}
		}
		return errors.New("no other node leads while the leader's disk is slow")
	})
	g2, err := lead2.Acquire(ctx, AcquireArgs{Key: "after", Holder: "b", TTL: time.Minute})
	if err != nil {
		t.Fatalf("the new leader does not serve: %v", err)
	}
	if v, err := lead2.Verify(ctx, "before", g1.Token, "a"); err != nil || !v.Allow {
		t.Fatalf("acknowledged grant after the step-down: %+v %v", v, err)
	}

	faults[li].setSyncDelay(0)
	testutil.Eventually(t, 60*time.Second, func() error {
		if lead.IsLeader() {
			return errors.New("the slow node still thinks it leads")
		}
		if ks, ok := lead.FSM().Get("after"); !ok || ks.Token != g2.Token {
			return errors.New("the slow node has not caught up")
		}
		return nil
	})
}
