package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/metrics"
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
	// MaxKeysPerIdentity bounds the live grants of the holders of one
	// authenticated client identity (AcquireArgs.Owner): the holder Owner
	// and every holder under "Owner/". A client that invents holder names
	// is counted once.
	MaxKeysPerIdentity int
	// MaxWaitersPerIdentity bounds the acquires one identity has queued,
	// over all keys.
	MaxWaitersPerIdentity int
	// MaxEndedKeysPerIdentity bounds the ended keys (released or expired,
	// kept with their values until reclaimed) of one identity: the
	// authenticated client identity (AcquireArgs.Owner), or else the
	// holder's name up to its first "/" (fsm.OwnerOf). An acquire of a key
	// name the state does not hold is refused while the identity has that
	// many; acquiring one of its ended keys again is not (it adds none).
	MaxEndedKeysPerIdentity int
}

// Limit refusals: nothing was proposed. Retrying later may succeed.
var (
	ErrTooManyKeys    = errors.New("too many keys held by this holder")
	ErrTooManyWaiters = errors.New("too many acquires waiting for this key")
	// ErrTooManyEndedKeys refuses an acquire of a new key name by an
	// identity that has Limits.MaxEndedKeysPerIdentity ended keys kept.
	ErrTooManyEndedKeys = errors.New("too many ended keys kept for this identity")
)

// LimitError is a refusal because of a limit, with a hint of when to try
// again. errors.Is with ErrTooManyKeys or ErrTooManyWaiters works on it.
type LimitError struct {
	Err        error
	Limit      int
	RetryAfter time.Duration
	// Detail names what is over the limit when it is not the holder or
	// the key (an identity); empty otherwise.
	Detail string
}

func (e *LimitError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s (limit %d)", e.Detail, e.Limit)
	}
	return fmt.Sprintf("%v (limit %d)", e.Err, e.Limit)
}

// Unwrap returns the sentinel.
func (e *LimitError) Unwrap() error { return e.Err }

// RetryAfterHint is when the client may try again.
func (e *LimitError) RetryAfterHint() time.Duration { return e.RetryAfter }

// checkLimits refuses an acquire that would take the holder, or the
// identity it acts for, over its key limit, or queue past the key's or the
// identity's waiter limit. The current holder of the key renewing its grant
// passes every check: it adds no key and does not wait.
func (n *Node) checkLimits(a AcquireArgs) error {
	l := n.cfg.Limits
	if !l.apply(a) || n.holds(a.Key, a.Holder) {
		return nil
	}
	waits := a.Wait > 0
	owner := a.Owner != ""
	switch {
	case l.MaxKeysPerHolder > 0 && n.leases.holderCount(a.Holder) >= l.MaxKeysPerHolder:
		return &LimitError{Err: ErrTooManyKeys, Limit: l.MaxKeysPerHolder, RetryAfter: time.Second}
	case owner && l.MaxKeysPerIdentity > 0 && n.leases.namespaceCount(a.Owner) >= l.MaxKeysPerIdentity:
		return &LimitError{Err: ErrTooManyKeys, Limit: l.MaxKeysPerIdentity, RetryAfter: time.Second,
			Detail: fmt.Sprintf("identity %q already holds as many keys as it may, over all its holders", a.Owner)}
	case waits && l.MaxWaitersPerKey > 0 && n.waiters.len(a.Key) >= l.MaxWaitersPerKey:
		return &LimitError{Err: ErrTooManyWaiters, Limit: l.MaxWaitersPerKey, RetryAfter: time.Second}
	case waits && owner && l.MaxWaitersPerIdentity > 0 && n.waiters.ownerCount(a.Owner) >= l.MaxWaitersPerIdentity:
		return &LimitError{Err: ErrTooManyWaiters, Limit: l.MaxWaitersPerIdentity, RetryAfter: time.Second,
			Detail: fmt.Sprintf("identity %q already has as many acquires waiting as it may, over all keys", a.Owner)}
	}
	return n.checkEndedKeys(a)
}

// checkEndedKeys refuses an acquire of a key name the state does not hold
// when the identity it is counted against has as many ended keys kept as
// it may: each keeps its name and value (up to 1 KiB) for the retention,
// and a client that invents key names would otherwise grow the state
// without bound. Taking one of its ended keys again adds none, and is let
// through. The count is the leader's list of ended keys (reclaim.go),
// whole once a new leader's first scan is done.
func (n *Node) checkEndedKeys(a AcquireArgs) error {
	limit := n.cfg.Limits.MaxEndedKeysPerIdentity
	if limit <= 0 {
		return nil
	}
	if _, exists := n.fsm.Get(a.Key); exists {
		return nil
	}
	id := endedIdentity(a)
	if n.reclaim.endedBy(id) < limit {
		return nil
	}
	retry := time.Minute
	if n.cfg.KeyRetention > 0 {
		retry = reclaimInterval(n.cfg.KeyRetention)
	}
	metrics.EndedKeyRefusals.Inc()
	return &LimitError{Err: ErrTooManyEndedKeys, Limit: limit, RetryAfter: retry,
		Detail: fmt.Sprintf("identity %q has as many ended keys kept as it may: reuse one, or wait for the retention to reclaim them", id)}
}

// endedIdentity is who an acquire's ended keys are counted against: the
// authenticated identity, or else the holder's name up to its first "/".
func endedIdentity(a AcquireArgs) string {
	if a.Owner != "" {
		return a.Owner
	}
	return fsm.OwnerOf(a.Holder)
}

// apply reports whether any limit could refuse a.
func (l Limits) apply(a AcquireArgs) bool {
	waits, owner := a.Wait > 0, a.Owner != ""
	return l.MaxKeysPerHolder > 0 || (owner && l.MaxKeysPerIdentity > 0) || l.MaxEndedKeysPerIdentity > 0 ||
		(waits && (l.MaxWaitersPerKey > 0 || (owner && l.MaxWaitersPerIdentity > 0)))
}

// holderCount returns the number of live leases of a holder.
func (l *leases) holderCount(holder string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holderLenLocked(holder)
}

// namespaceCount returns the number of live leases of the holders in the
// namespace of identity name: name itself and every holder under "name/".
// The table keeps the count as leases come and go, so an acquire does not
// look at every holder.
func (l *leases) namespaceCount(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holderLenLocked(name) + l.under[name]
}

// len returns the number of acquires waiting for key.
func (q *waitq) len(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue[key])
}

// ownerCount returns the number of acquires waiting for any key on behalf
// of identity owner.
func (q *waitq) ownerCount(owner string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, ws := range q.queue {
		for _, w := range ws {
			if w.args.Owner == owner {
				n++
			}
		}
	}
	return n
}
