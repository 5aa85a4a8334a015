package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// A refusal names a holder only when the key is held: while the key is free
// (here: its grant expired and its lock-delay runs) and another waits for it,
// an acquire that does not wait is told what is true (the lock-delay), never
// "held" by a holder whose grant ended, which no order of the operations
// explains.
func TestRefusalsOfAFreeKeyWithWaitersNameNoHolder(t *testing.T) {
	tc := newTestCluster(t, 1)
	_, lead := tc.leader()
	ctx := context.Background()
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "f", Holder: "a", TTL: 200 * time.Millisecond, LockDelay: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	go func() {
		_, err := lead.Acquire(ctx, AcquireArgs{Key: "f", Holder: "w", TTL: time.Second, Wait: 30 * time.Second})
		waiter <- err
	}()
	testutil.Eventually(t, 10*time.Second, func() error {
		if k, _ := lead.fsm.Get("f"); k.State != fsm.Expired || !lead.waiters.waiting("f") {
			return errors.New("a's grant has not expired with w waiting yet")
		}
		return nil
	})
	_, err := lead.Acquire(ctx, AcquireArgs{Key: "f", Holder: "n", TTL: time.Second})
	if !errors.Is(err, ErrLockDelay) {
		t.Fatalf("an acquire without wait of an expired key in its lock-delay, with a waiter queued: %v; want the lock-delay refusal", err)
	}
	if err := recv(t, waiter, "the waiter's answer"); err != nil {
		t.Fatalf("the waiter, once the lock-delay ended: %v", err)
	}
}
