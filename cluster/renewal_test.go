package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/metrics"
)

// The windows must nest: a deposed leader answers renewals on a quorum
// contact at most renewWindow old only while no newer leader serves.
func TestRenewWindowShorterThanTakeoverWait(t *testing.T) {
	if renewWindow >= takeoverWait {
		t.Fatalf("renewWindow %v must be shorter than takeoverWait %v", renewWindow, takeoverWait)
	}
	if contactClock == nil {
		t.Skip("no suspend-aware clock on this platform: renewals always take a round")
	}
	a := contactClock()
	if b := contactClock(); b.Before(a) {
		t.Fatalf("contact clock went back: %v then %v", a, b)
	}
}

// A new leader serves only takeoverWait after it learned it leads, so that
// everything a deposed leader answered on a recent quorum contact happened
// before. Without the wait, a leadership transfer makes the new leader ready
// in milliseconds.
func TestNewLeaderWaitsBeforeServing(t *testing.T) {
	tc := newTestCluster(t, 3)
	defer tc.closeAll()
	li, lead := tc.leader()
	target := tc.nodes[(li+1)%3]
	start := time.Now()
	if err := lead.TransferLeadership(target.ID()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, func() error {
		if !target.Ready() {
			return errors.New("the new leader is not ready")
		}
		return nil
	})
	if took := time.Since(start); took < takeoverWait {
		t.Fatalf("the new leader served %v after the transfer began, before its takeover wait of %v", took, takeoverWait)
	}
}

// With a quorum in touch, renewals rest on the heartbeats and take no round of
// their own; cut off from every follower, the leader stops answering them
// within renewWindow of the last heartbeat they accepted, and well before it
// notices that it lost its quorum (LeaderLeaseTimeout, 400 ms here).
func TestRenewalsRestOnRecentQuorum(t *testing.T) {
	tc, li, lead, g := contactCluster(t, "r")
	ctx := context.Background()
	fast := metrics.RenewalConfirms.WithLabelValues("recent_quorum")
	before := promtest.ToFloat64(fast)
	for i := 0; i < 20; i++ {
		if _, _, err := lead.Renew(ctx, "r", "a", g.Token); err != nil {
			t.Fatal(err)
		}
	}
	if got := promtest.ToFloat64(fast) - before; got < 10 {
		t.Fatalf("%v of 20 renewals rested on the recent quorum contact", got)
	}
	if st := lead.Status(); st.QuorumContactMS == nil || *st.QuorumContactMS < 0 || *st.QuorumContactMS > 10_000 {
		t.Fatalf("leader's status: quorum contact %v ms", st.QuorumContactMS)
	}
	if st := tc.nodes[(li+1)%3].Status(); st.QuorumContactMS != nil {
		t.Fatalf("a follower's status shows a quorum contact: %v ms", *st.QuorumContactMS)
	}

	tc.stopFollowers(li)
	cut := time.Now()
	for time.Since(cut) < 2*takeoverWait {
		asked := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, _, err := lead.Renew(rctx, "r", "a", g.Token)
		cancel()
		if err == nil && asked.Sub(cut) > renewWindow {
			t.Fatalf("a renewal asked %v after the followers stopped succeeded", asked.Sub(cut))
		}
	}
}

// contactCluster starts three nodes and takes a grant of key for holder a
// on the leader: where the tests of what rests on the recent quorum contact
// start. It skips where no suspend-aware clock exists.
func contactCluster(t *testing.T, key string) (tc *testCluster, li int, lead *Node, g Grant) {
	t.Helper()
	if contactClock == nil {
		t.Skip("no suspend-aware clock on this platform: renewals and verifies always take a round")
	}
	tc = newTestCluster(t, 3)
	t.Cleanup(tc.closeAll)
	li, lead = tc.leader()
	g, err := lead.Acquire(context.Background(), AcquireArgs{Key: key, Holder: "a", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return tc, li, lead, g
}

// stopFollowers stops every node but the leader li: cut off from all of
// them at once.
func (tc *testCluster) stopFollowers(li int) {
	for i := range tc.nodes {
		if i != li {
			tc.stop(i)
		}
	}
}

// BenchmarkRenew measures a renewal on the leader of a 3-node in-process
// cluster, one at a time: resting on the recent quorum contact, and with a
// confirmation round of its own as before.
//
//	go test -run '^$' -bench Renew ./cluster
func BenchmarkRenew(b *testing.B) {
	tc := newTestCluster(b, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "r", Holder: "a", TTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("recent_quorum", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := lead.Renew(ctx, "r", "a", g.Token); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("round", func(b *testing.B) {
		for b.Loop() {
			if err := lead.confirmReady(ctx); err != nil {
				b.Fatal(err)
			}
			if _, _, ok := lead.leases.renew("r", "a", g.Token); !ok {
				b.Fatal("lease gone")
			}
		}
	})
}
