package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// A semaphore key through a three-node cluster on real TCP: permits,
// refusals, verify per permit, renewals, the key's read, and waiters
// served first come, first served as permits free up.
func TestSemaphoreThroughTheCluster(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	sem := func(holder string, wait time.Duration) AcquireArgs {
		return AcquireArgs{Key: "s", Holder: holder, TTL: time.Minute, Limit: 2, Wait: wait, RequestID: "rq-" + holder}
	}
	a, err := lead.Acquire(ctx, sem("a", 0))
	if err != nil {
		t.Fatal(err)
	}
	b, err := lead.Acquire(ctx, sem("b", 0))
	if err != nil || b.Token <= a.Token || b.Limit != 2 {
		t.Fatalf("second permit: %+v %v", b, err)
	}
	if _, err := lead.Acquire(ctx, sem("c", 0)); !errors.Is(err, fsm.ErrHeld) {
		t.Fatalf("third permit of two: %v", err)
	}
	bad := sem("c", 0)
	bad.Limit = 3
	if _, err := lead.Acquire(ctx, bad); !errors.Is(err, fsm.ErrLimitMismatch) {
		t.Fatalf("another limit: %v", err)
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "s", Holder: "c", TTL: time.Minute}); !errors.Is(err, fsm.ErrLimitMismatch) {
		t.Fatalf("a lock of a semaphore key: %v", err)
	}
	if g, err := lead.Acquire(ctx, sem("a", 0)); err != nil || g.Token != a.Token {
		t.Fatalf("a retry of a's acquire: %+v %v", g, err)
	}
	for _, g := range []Grant{a, b} {
		if v, err := tc.follower().Verify(ctx, "s", g.Token, g.Holder); err == nil || v.Allow {
			t.Fatalf("a follower allowed: %+v %v", v, err)
		}
		if v, err := lead.Verify(ctx, "s", g.Token, g.Holder); err != nil || !v.Allow {
			t.Fatalf("verify of %s's permit: %+v %v", g.Holder, v, err)
		}
	}
	if v, _ := lead.Verify(ctx, "s", a.Token, "b"); v.Allow || v.Reason != ReasonHolderMismatch {
		t.Fatalf("a's permit as b's: %+v", v)
	}
	if _, _, err := lead.Renew(ctx, "s", "a", a.Token); err != nil {
		t.Fatalf("renew a's permit: %v", err)
	}
	if _, _, err := lead.Renew(ctx, "s", "b", a.Token); !errors.Is(err, fsm.ErrNotHolder) {
		t.Fatalf("renew of a's permit by b: %v", err)
	}
	if ls, err := lead.Keepalive(ctx, "b", nil); err != nil || len(ls) != 1 || ls[0].Key.Key != "s" || ls[0].Key.Token != b.Token {
		t.Fatalf("keepalive of b: %+v %v", ls, err)
	}

	// Waiters, in order, as permits free up one by one.
	order := make(chan Grant, 3)
	for i, h := range []string{"w1", "w2", "w3"} {
		go func(h string) {
			g, err := lead.Acquire(ctx, sem(h, 20*time.Second))
			if err != nil {
				g.Holder = "error:" + err.Error()
			}
			order <- g
		}(h)
		testutil.Eventually(t, 5*time.Second, func() error {
			if lead.waiters.count() < i+1 {
				return errors.New("not queued yet")
			}
			return nil
		})
	}
	ki, ok, err := lead.Key(ctx, "s")
	if err != nil || !ok || ki.Limit != 2 || len(ki.Permits) != 2 || len(ki.Waiters) != 3 || ki.Waiters[0] != "w1" {
		t.Fatalf("key read: %+v %v", ki, err)
	}
	for _, p := range ki.Permits {
		if p.Deadline.IsZero() {
			t.Fatalf("permit without a deadline: %+v", p)
		}
	}
	last := b.Token
	for i, free := range []Grant{a, b} {
		if _, err := lead.Release(ctx, ReleaseArgs{Key: "s", Holder: free.Holder, Token: free.Token, RequestID: "rel-" + free.Holder}); err != nil {
			t.Fatal(err)
		}
		g := <-order
		if want := []string{"w1", "w2"}[i]; g.Holder != want || g.Token <= last {
			t.Fatalf("served %+v after %d, want %s", g, last, want)
		}
		last = g.Token
		if v, _ := lead.Verify(ctx, "s", free.Token, ""); v.Allow {
			t.Fatalf("a released permit verified: %+v", v)
		}
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "s", Force: true, RequestID: "force"}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a forced release without a token: %v", err)
	}
	ki, _, _ = lead.Key(ctx, "s")
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "s", Holder: ki.Permits[0].Holder, Token: ki.Permits[0].Token}); err != nil {
		t.Fatal(err)
	}
	if g := <-order; g.Holder != "w3" || g.Token <= last {
		t.Fatalf("third waiter: %+v", g)
	}
}

// A permit's lease is re-armed by a new leader (it is still live after the
// election, and its first renewal goes through a touch), and expires on its
// own: a waiter gets the permit once it ran out.
func TestPermitLeaseExpiresAndIsReArmedOnFailover(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	li, lead := tc.leader()
	const ttl = 4 * time.Second
	p1, err := lead.Acquire(ctx, AcquireArgs{Key: "s", Holder: "a", TTL: ttl, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	long, err := lead.Acquire(ctx, AcquireArgs{Key: "t", Holder: "a", TTL: time.Minute, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	tc.stop(li)
	_, lead2 := tc.leader()
	if v, err := lead2.Verify(ctx, "t", long.Token, "a"); err != nil || !v.Allow {
		t.Fatalf("permit not re-armed: %+v %v", v, err)
	}
	// The first renewal after the election goes through a touch.
	if _, _, err := lead2.Renew(ctx, "t", "a", long.Token); err != nil {
		t.Fatalf("renew after failover: %v", err)
	}
	p2, err := lead2.Acquire(ctx, AcquireArgs{Key: "s", Holder: "b", TTL: ttl, Limit: 1, Wait: 30 * time.Second})
	if err != nil || p2.Token <= p1.Token {
		t.Fatalf("waiting permit: %+v %v", p2, err)
	}
	if v, _ := lead2.Verify(ctx, "s", p1.Token, ""); v.Allow {
		t.Fatalf("expired permit verified: %+v", v)
	}
	if v, _ := lead2.Verify(ctx, "t", long.Token, "a"); !v.Allow {
		t.Fatalf("long permit: %+v", v)
	}
}

// Shared and exclusive grants through the cluster: readers coexist, a
// writer waits for them all, and once it waits no new reader overtakes it:
// one that does not wait is refused, one that waits is served after it.
func TestSharedExclusiveThroughTheCluster(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	read := func(holder string, wait time.Duration) AcquireArgs {
		return AcquireArgs{Key: "rw", Holder: holder, TTL: time.Minute, Shared: true, Wait: wait}
	}
	r1, err := lead.Acquire(ctx, read("r1", 0))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := lead.Acquire(ctx, read("r2", 0))
	if err != nil || r2.Token <= r1.Token || !r2.Shared {
		t.Fatalf("second reader: %+v %v", r2, err)
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "rw", Holder: "w", TTL: time.Minute}); !errors.Is(err, fsm.ErrHeld) {
		t.Fatalf("a writer beside readers: %v", err)
	}
	got := make(chan Grant, 2)
	go func() {
		g, err := lead.Acquire(ctx, AcquireArgs{Key: "rw", Holder: "w", TTL: time.Minute, Wait: 20 * time.Second})
		if err != nil {
			g.Holder = "error: " + err.Error()
		}
		got <- g
	}()
	testutil.Eventually(t, 5*time.Second, func() error {
		if lead.waiters.count() < 1 {
			return errors.New("the writer does not wait yet")
		}
		return nil
	})
	if _, err := lead.Acquire(ctx, read("r3", 0)); !errors.Is(err, fsm.ErrHeld) {
		t.Fatalf("a reader overtook a waiting writer: %v", err)
	}
	go func() {
		g, err := lead.Acquire(ctx, read("r4", 20*time.Second))
		if err != nil {
			g.Holder = "error: " + err.Error()
		}
		got <- g
	}()
	testutil.Eventually(t, 5*time.Second, func() error {
		if lead.waiters.count() < 2 {
			return errors.New("the reader does not wait yet")
		}
		return nil
	})
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "rw", Holder: "r1", Token: r1.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "rw", Holder: "r2", Token: r2.Token}); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w.Holder != "w" || w.Token <= r2.Token || w.Shared {
		t.Fatalf("the writer after the readers: %+v", w)
	}
	for _, r := range []Grant{r1, r2} {
		if v, _ := lead.Verify(ctx, "rw", r.Token, ""); v.Allow {
			t.Fatalf("a reader's token verified beside the writer: %+v", v)
		}
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "rw", Holder: "w", Token: w.Token}); err != nil {
		t.Fatal(err)
	}
	if r4 := <-got; r4.Holder != "r4" || r4.Token <= w.Token || !r4.Shared {
		t.Fatalf("the reader after the writer: %+v", r4)
	}
}
