package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// The end of a lock-delay is a committed change: a watcher hears expired,
// then lock_delay_ended of the same grant, and a leader elected after that
// entry keeps the key from nobody (before DelayEnd, every new leader kept
// every expired key with a lock-delay for a full delay again).
func TestLockDelayEndIsCommittedAndSurvivesFailover(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	li, lead := tc.leader()
	var watcher *Node
	for i, n := range tc.nodes {
		if i != li {
			watcher = n
			break
		}
	}
	sub, err := watcher.Feed().Subscribe("d", true, watcher.Feed().Last())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const delay = 2 * time.Second
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "d", Holder: "a", TTL: 100 * time.Millisecond, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	var evs []fsm.Event
	testutil.Eventually(t, 20*time.Second, func() error {
		b, err := sub.Poll()
		if err != nil {
			return err
		}
		evs = append(evs, b.Events...)
		if len(evs) < 3 {
			return fmt.Errorf("events so far %+v", evs)
		}
		return nil
	})
	want := []fsm.EventType{fsm.EventGranted, fsm.EventExpired, fsm.EventLockDelayEnded}
	for i, ev := range evs {
		if i >= len(want) || ev.Type != want[i] || ev.Token != g.Token || ev.Holder != "a" {
			t.Fatalf("event %d of %+v, want %v of token %s", i, evs, want, g.Token)
		}
	}
	if ev := evs[2]; ev.State != fsm.Expired || ev.LockDelay != 0 {
		t.Fatalf("lock_delay_ended event %+v", ev)
	}
	for _, n := range tc.nodes {
		testutil.Eventually(t, 10*time.Second, func() error {
			if k, _ := n.FSM().Get("d"); k.LockDelay != 0 || k.State != fsm.Expired {
				return fmt.Errorf("node %s has %+v", n.ID(), k)
			}
			return nil
		})
	}

	tc.stop(li)
	_, lead2 := tc.leader()
	if left, ok := lead2.leases.lockDelayLeft("d"); ok {
		t.Fatalf("the new leader keeps d for %v more after its lock-delay ended", left)
	}
	g2, err := lead2.Acquire(ctx, AcquireArgs{Key: "d", Holder: "b", TTL: time.Minute})
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("acquire from the new leader after the lock-delay ended: %+v %v", g2, err)
	}
}

// A waiter that takes the key when the lock-delay ends makes the delay's
// end a no-op, or follows it: either way the stream's last word on the
// grant that expired is never after the waiter's grant.
func TestLockDelayEndAndWaiter(t *testing.T) {
	tc := newTestCluster(t, 1)
	ctx := context.Background()
	_, lead := tc.leader()
	sub, err := lead.Feed().Subscribe("w", true, lead.Feed().Last())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "w", Holder: "a", TTL: 100 * time.Millisecond, LockDelay: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g2, err := lead.Acquire(ctx, AcquireArgs{Key: "w", Holder: "b", TTL: time.Minute, Wait: 20 * time.Second})
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("waiting acquire: %+v %v", g2, err)
	}
	var evs []fsm.Event
	testutil.Eventually(t, 10*time.Second, func() error {
		b, err := sub.Poll()
		if err != nil {
			return err
		}
		evs = append(evs, b.Events...)
		for _, ev := range evs {
			if ev.Token == g2.Token {
				return nil
			}
		}
		return errors.New("no grant to b yet")
	})
	// The DelayEnd may still be in flight: it must not apply after b's grant.
	if err := lead.WaitApplied(ctx, lead.r().LastIndex()); err != nil {
		t.Fatal(err)
	}
	b, err := sub.Poll()
	if err != nil {
		t.Fatal(err)
	}
	evs = append(evs, b.Events...)
	seenGrant := false
	for _, ev := range evs {
		switch {
		case ev.Token == g2.Token:
			seenGrant = true
		case ev.Type == fsm.EventLockDelayEnded && (seenGrant || ev.Token != g.Token):
			t.Fatalf("lock_delay_ended out of place in %+v", evs)
		}
	}
}
