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

// slotDelayed waits until every node records one delayed slot of key.
func slotDelayed(t *testing.T, tc *testCluster, key string) fsm.KeyState {
	t.Helper()
	var slot fsm.KeyState
	for _, n := range tc.nodes {
		if n == nil {
			continue
		}
		testutil.Eventually(t, 20*time.Second, func() error {
			ds := n.FSM().SlotDelays(key)
			if len(ds) != 1 {
				return fmt.Errorf("node %s: delayed slots of %s: %+v", n.ID(), key, ds)
			}
			slot = ds[0]
			return nil
		})
	}
	return slot
}

// A permit that expires with a lock-delay keeps its slot for the delay,
// on the leader that saw the expiry and on the next one: a limit-2
// semaphore with one live permit and one delayed slot admits nobody else
// until the delay ends, and then does. Before permits took a lock-delay,
// the third holder was granted the expired holder's slot at once.
func TestPermitLockDelayKeepsItsSlot(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	li, lead := tc.leader()
	sem := func(holder string, ttl, delay time.Duration) AcquireArgs {
		return AcquireArgs{Key: "s", Holder: holder, TTL: ttl, Limit: 2, LockDelay: delay}
	}
	const delay = 3 * time.Second
	a, err := lead.Acquire(ctx, sem("a", 100*time.Millisecond, delay))
	if err != nil || a.LockDelay != delay {
		t.Fatalf("a's permit: %+v %v", a, err)
	}
	if _, err := lead.Acquire(ctx, sem("b", time.Minute, 0)); err != nil {
		t.Fatal(err)
	}
	slot := slotDelayed(t, tc, "s")
	if slot.Token != a.Token || slot.Holder != "a" {
		t.Fatalf("delayed slot %+v, want a's", slot)
	}
	var lde *LockDelayError
	if _, err := lead.Acquire(ctx, sem("c", time.Minute, 0)); !errors.As(err, &lde) || lde.RetryAfter <= 0 || lde.RetryAfter > delay {
		t.Fatalf("c took a's delayed slot: %v", err)
	}
	// The next leader keeps the slot for a full delay from its takeover.
	tc.stop(li)
	_, lead = tc.leader()
	if _, err := lead.Acquire(ctx, sem("c", time.Minute, 0)); !errors.Is(err, ErrLockDelay) {
		t.Fatalf("the new leader gave c a's delayed slot: %v", err)
	}
	// A waiting acquire is granted once the delay ended.
	c, err := lead.Acquire(ctx, func() AcquireArgs { x := sem("c", time.Minute, 0); x.Wait = 20 * time.Second; return x }())
	if err != nil || c.Token <= a.Token {
		t.Fatalf("c after the delay: %+v %v", c, err)
	}
	for _, n := range tc.nodes {
		if n == nil {
			continue
		}
		testutil.Eventually(t, 20*time.Second, func() error {
			if ds := n.FSM().SlotDelays("s"); len(ds) != 0 {
				return fmt.Errorf("node %s still records %+v", n.ID(), ds)
			}
			return nil
		})
	}
}

// A shared grant that expires with a lock-delay keeps exclusive acquires,
// single and multi-key, out for the delay, and lets other readers in.
func TestSharedLockDelayKeepsWritersOut(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	const delay = 3 * time.Second
	r, err := lead.Acquire(ctx, AcquireArgs{Key: "rw", Holder: "r1", TTL: 100 * time.Millisecond, Shared: true, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	slotDelayed(t, tc, "rw")
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "rw", Holder: "w", TTL: time.Minute}); !errors.Is(err, ErrLockDelay) {
		t.Fatalf("a writer beside an expired reader's lock-delay: %v", err)
	}
	if _, err := lead.AcquireMulti(ctx, AcquireMultiArgs{Keys: []string{"other", "rw"}, Holder: "w", TTL: time.Minute}); !errors.Is(err, ErrLockDelay) {
		t.Fatalf("a multi-key set beside an expired reader's lock-delay: %v", err)
	}
	if _, ok := lead.FSM().Get("other"); ok {
		t.Fatal("a refused set changed a key")
	}
	r2, err := lead.Acquire(ctx, AcquireArgs{Key: "rw", Holder: "r2", TTL: time.Minute, Shared: true})
	if err != nil || r2.Token <= r.Token {
		t.Fatalf("another reader: %+v %v", r2, err)
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "rw", Holder: "r2", Token: r2.Token}); err != nil {
		t.Fatal(err)
	}
	w, err := lead.Acquire(ctx, AcquireArgs{Key: "rw", Holder: "w", TTL: time.Minute, Wait: 20 * time.Second})
	if err != nil || w.Token <= r2.Token {
		t.Fatalf("the writer after the delay: %+v %v", w, err)
	}
}

// Acquires let through together, each finding a slot free beside a
// delayed one, do not fill the delayed slot: the state machine counts it
// too. Twelve holders ask at once for permits of a limit-3 semaphore with
// one delayed slot; two get one. (When only the leader counted delayed
// slots, all three free-looking slots went.)
func TestDelayedSlotNotFilledByConcurrentAcquires(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "s", Holder: "a", TTL: 100 * time.Millisecond, Limit: 3, LockDelay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	slotDelayed(t, tc, "s")
	const n = 12
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		go func(i int) {
			<-start
			_, err := lead.Acquire(ctx, AcquireArgs{Key: "s", Holder: fmt.Sprintf("h%d", i), TTL: time.Minute, Limit: 3})
			errs <- err
		}(i)
	}
	close(start)
	granted := 0
	for i := 0; i < n; i++ {
		switch err := <-errs; {
		case err == nil:
			granted++
		case errors.Is(err, ErrLockDelay), errors.Is(err, fsm.ErrHeld):
		default:
			t.Errorf("acquire: %v", err)
		}
	}
	if _, ps := lead.FSM().Permits("s"); granted != 2 || len(ps) != 2 {
		t.Fatalf("%d granted, %d live permits beside a delayed slot of a limit of 3; want 2", granted, len(ps))
	}
}
