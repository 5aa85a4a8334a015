package cluster

import (
	"container/heap"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// lockDelay is a key's lock-delay after the expiry of grant token: it ends
// at until, on the lease table's clock.
type lockDelay struct {
	until int64
	token fence.Token
}

// delayEnd is a lock-delay's place in the table's queue of ends.
type delayEnd struct {
	key string
	lockDelay
}

// delayQueue orders the ends of lock-delays, earliest first. An entry whose
// key has another delay in the table by the time it is due (a later one, or
// none: undelay dropped it) is stale and skipped, so nothing is ever
// searched for in it.
type delayQueue []delayEnd

func (q delayQueue) Len() int           { return len(q) }
func (q delayQueue) Less(i, j int) bool { return q[i].until < q[j].until }
func (q delayQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *delayQueue) Push(x any)        { *q = append(*q, x.(delayEnd)) }
func (q *delayQueue) Pop() any {
	old := *q
	last := old[len(old)-1]
	old[len(old)-1] = delayEnd{}
	*q = old[:len(old)-1]
	return last
}

// delayLocked keeps key from new holders until until, after the expiry of
// grant token, and queues the end of that delay.
func (l *leases) delayLocked(key string, token fence.Token, until int64) {
	d := lockDelay{until: until, token: token}
	l.delays[key] = d
	heap.Push(&l.delayQ, delayEnd{key: key, lockDelay: d})
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
		d := heap.Pop(&l.delayQ).(delayEnd)
		if cur, ok := l.delays[d.key]; !ok || cur != d.lockDelay {
			continue // undelayed, or delayed again
		}
		delete(l.delays, d.key)
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
	l.delays = map[string]lockDelay{}
	l.delayQ = nil
}

// delayed returns how long a key's lock-delay still lasts.
func (l *leases) delayed(key string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.delays[key]
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

// undelay drops the lock-delay of key: an expiry that was proposed did not
// end the grant (the holder renewed it first), so no delay is owed.
func (l *leases) undelay(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.delays, key)
}
