package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fsm"
)

// flapLeaders hands the leadership on every interval until stop closes.
func flapLeaders(tc *testCluster, every time.Duration, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(every):
		}
		for _, n := range tc.nodes {
			if n != nil && n.r().State() == raft.Leader {
				_ = n.TransferLeadership("")
				break
			}
		}
	}
}

// readyLeader returns the ready leader, or nil.
func readyLeader(tc *testCluster) *Node {
	for _, n := range tc.nodes {
		if n != nil && n.Ready() {
			return n
		}
	}
	return nil
}

// deadHolderUnderFlapping grants two keys with a TTL of ttl, keeps one
// renewed and stops renewing the other, and hands the leadership on every
// second for up to window. It returns how long after its holder's last
// renewal the dead key expired (false if it did not within window), and
// fails the test if the renewed key ever expired.
func deadHolderUnderFlapping(t *testing.T, full bool, ttl, window time.Duration) (time.Duration, bool) {
	tc := newTestClusterWith(t, 3, func(c *Config) { c.LeaseRearmFull = full })
	ctx := context.Background()
	_, lead := tc.leader()
	dead, err := lead.Acquire(ctx, AcquireArgs{Key: "dead", Holder: "dead", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	alive, err := lead.Acquire(ctx, AcquireArgs{Key: "alive", Holder: "alive", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := lead.Renew(ctx, "dead", "dead", dead.Token); err != nil {
		t.Fatal(err)
	}
	lastRenewal := time.Now() // the holder dies here
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); flapLeaders(tc, time.Second, stop) }()
	go func() { // the live holder renews every ttl/6, wherever the leader is
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(ttl / 6):
			}
			if n := readyLeader(tc); n != nil {
				_, _ = n.Keepalive(ctx, "alive", nil)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(window)
	for time.Now().Before(deadline) {
		for _, n := range tc.nodes {
			if k, ok := n.fsm.Get("alive"); ok && (k.State != fsm.Held || k.Token != alive.Token) {
				t.Fatalf("the renewed grant ended while leaders changed: %+v", k)
			}
		}
		if k, _ := tc.nodes[0].fsm.Get("dead"); k.State == fsm.Expired {
			return time.Since(lastRenewal), true
		}
		time.Sleep(20 * time.Millisecond) // polling the state, not synchronising
	}
	return 0, false
}

// A holder that stopped renewing loses its key within its TTL plus the
// bound of docs/GUARANTEES.md however often the leader changes, while a
// holder that renews keeps its own throughout.
func TestDeadHolderExpiresUnderFlappingLeaders(t *testing.T) {
	const ttl = 2 * time.Second
	took, ok := deadHolderUnderFlapping(t, false, ttl, 3*ttl+10*time.Second)
	if !ok {
		t.Fatalf("a lease whose holder stopped renewing was kept for the %v leaders kept changing", 3*ttl+10*time.Second)
	}
	t.Logf("expired %v after its holder's last renewal (TTL %v)", took, ttl)
	if took < ttl {
		t.Fatalf("expired %v after the last renewal, before its TTL %v", took, ttl)
	}
}

// The positive control: leaders that re-arm every lease for a full TTL
// keep a dead holder's key for as long as they keep changing.
func TestDeadHolderKeptUnderFlappingWithFullRearm(t *testing.T) {
	const ttl = 2 * time.Second
	if took, ok := deadHolderUnderFlapping(t, true, ttl, 3*ttl+10*time.Second); ok {
		t.Logf("expired %v after the last renewal: a leader served long enough for a full TTL", took)
		t.Skip("the schedule left one leader in place for a whole TTL; nothing to show this time")
	}
}
