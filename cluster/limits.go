package cluster

import (
	"errors"
	"fmt"
	"time"
)

// Limits keep one client from hurting the others. The leader enforces them
// before it proposes an acquire; zero means no limit. They are soft by the
// number of acquires in flight at once: two concurrent acquires of one
// holder can both pass a check that only one of them should.
type Limits struct {
	// MaxKeysPerHolder bounds the live grants of one holder. A holder at
	// the limit can still renew what it holds (acquire again a key it has).
	MaxKeysPerHolder int
	// MaxWaitersPerKey bounds the acquires queued for one key.
	MaxWaitersPerKey int
}

// Limit refusals: nothing was proposed. Retrying later may succeed.
var (
	ErrTooManyKeys    = errors.New("too many keys held by this holder")
	ErrTooManyWaiters = errors.New("too many acquires waiting for this key")
)

// LimitError is a refusal because of a limit, with a hint of when to try
// again. errors.Is with ErrTooManyKeys or ErrTooManyWaiters works on it.
type LimitError struct {
	Err        error
	Limit      int
	RetryAfter time.Duration
}

func (e *LimitError) Error() string { return fmt.Sprintf("%v (limit %d)", e.Err, e.Limit) }

// Unwrap returns the sentinel.
func (e *LimitError) Unwrap() error { return e.Err }

// RetryAfterHint is when the client may try again.
func (e *LimitError) RetryAfterHint() time.Duration { return e.RetryAfter }

// checkLimits refuses an acquire that would take the holder over its key
// limit, or queue past the key's waiter limit. The current holder of the key
// renewing its grant passes both: it adds no key and does not wait.
func (n *Node) checkLimits(a AcquireArgs) error {
	l := n.cfg.Limits
	if (l.MaxKeysPerHolder <= 0 && (l.MaxWaitersPerKey <= 0 || a.Wait <= 0)) || n.holds(a.Key, a.Holder) {
		return nil
	}
	if l.MaxKeysPerHolder > 0 && n.leases.holderCount(a.Holder) >= l.MaxKeysPerHolder {
		return &LimitError{Err: ErrTooManyKeys, Limit: l.MaxKeysPerHolder, RetryAfter: time.Second}
	}
	if l.MaxWaitersPerKey > 0 && a.Wait > 0 && n.waiters.len(a.Key) >= l.MaxWaitersPerKey {
		return &LimitError{Err: ErrTooManyWaiters, Limit: l.MaxWaitersPerKey, RetryAfter: time.Second}
	}
	return nil
}

// holderCount returns the number of live leases of a holder.
func (l *leases) holderCount(holder string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byHolder[holder])
}

// len returns the number of acquires waiting for key.
func (q *waitq) len(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue[key])
}
