package cluster

import (
	"container/heap"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// Two things are called a lock-delay here, and the names keep them apart:
//
//   - a grant's lock-delay is the duration it was granted with
//     (fsm.Acquire.LockDelay): lockDelayOf(i) for lease i, kept in
//     leases.grantDelays;
//   - a key's delay is that duration in force, from the grant's expiry:
//     the key is kept from other holders until it ends. It is a keyDelay in
//     leases.keyDelays, started by startDelayLocked, dropped by dropDelay,
//     asked about with lockDelayLeft, and its end proposed by fireDelays.

// keyDelay is the lock-delay in force on a key after the expiry of grant
// token: it ends at until, on the lease table's clock.
type keyDelay struct {
	until int64
	token fence.Token
}

// queuedDelay is a key's delay in the table's queue of ends.
type queuedDelay struct {
	key string
	keyDelay
}

// delayQueue orders the ends of keys' delays, earliest first. An entry whose
// key has another delay in the table by the time it is due (a later one, or
// none: dropDelay dropped it) is stale and skipped, so nothing is ever
// searched for in it.
type delayQueue []queuedDelay

func (q delayQueue) Len() int           { return len(q) }
func (q delayQueue) Less(i, j int) bool { return q[i].until < q[j].until }
func (q delayQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *delayQueue) Push(x any)        { *q = append(*q, x.(queuedDelay)) }
func (q *delayQueue) Pop() any {
	old := *q
	last := old[len(old)-1]
	old[len(old)-1] = queuedDelay{}
	*q = old[:len(old)-1]
	return last
}

// startDelayLocked keeps key from new holders until until, after the
// expiry of grant token, and queues the end of that delay.
func (l *leases) startDelayLocked(key string, token fence.Token, until int64) {
	d := keyDelay{until: until, token: token}
	l.keyDelays[key] = d
	heap.Push(&l.delayQ, queuedDelay{key: key, keyDelay: d})
	l.resetDelayTimerLocked()
}

// resetDelayTimerLocked arms the one timer of all lock-delays for the
// earliest end, unless it is armed for that moment or earlier already.
func (l *leases) resetDelayTimerLocked() {
	if len(l.delayQ) > 0 {
		l.armEarliestLocked(&l.delayTimer, &l.delayTimerAt, l.delayQ[0].until, l.fireDelays)
	}
}

// fireDelays runs when the lock-delay timer ends: every delay that ran out
// leaves the table (the key is free from now on, for admission) and its end
// is proposed, for the log to record it (fsm.DelayEnd).
func (l *leases) fireDelays(gen uint64) {
	var ends []fsm.DelayEnd
	l.mu.Lock()
	if l.gen != gen || l.delayTimer == nil {
		l.mu.Unlock()
		return
	}
	l.delayTimerAt = 0
	now := l.now()
	for len(l.delayQ) > 0 && l.delayQ[0].until <= now {
		d := heap.Pop(&l.delayQ).(queuedDelay)
		if cur, ok := l.keyDelays[d.key]; !ok || cur != d.keyDelay {
			continue // dropped, or started again
		}
		delete(l.keyDelays, d.key)
		ends = append(ends, fsm.DelayEnd{Key: d.key, Token: d.token})
	}
	l.resetDelayTimerLocked()
	l.mu.Unlock()
	if l.endDelay == nil {
		return
	}
	for _, e := range ends {
		l.endDelay(gen, e)
	}
}

// stopDelaysLocked forgets every lock-delay and stops their timer.
func (l *leases) stopDelaysLocked() {
	if l.delayTimer != nil {
		l.delayTimer.Stop()
		l.delayTimer = nil
	}
	l.delayTimerAt = 0
	l.keyDelays = map[string]keyDelay{}
	l.delayQ = nil
}

// lockDelayLeft returns how long the delay in force on key still lasts,
// and false when none is: the key is free of lock-delays for admission.
func (l *leases) lockDelayLeft(key string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.keyDelays[key]
	if !ok {
		return 0, false
	}
	// A delay that ran out leaves the table when its timer fires; until
	// then it keeps nobody out.
	left := time.Duration(d.until - l.now())
	if left <= 0 {
		return 0, false
	}
	return left, true
}

// dropDelay drops the delay in force on key: an expiry that was proposed
// did not end the grant (the holder renewed it first), so no delay is owed.
func (l *leases) dropDelay(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.keyDelays, key)
}
