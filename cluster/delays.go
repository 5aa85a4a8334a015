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
//     asked about with lockDelayLeft, and its end proposed by fireDelays;
//   - a slot's delay is the same for a permit or a shared grant, named by
//     its lease (permitLease): only the grant's slot is kept, in
//     leases.slotDelays, asked about with slotLeft. A semaphore counts
//     its delayed slots against its limit; an exclusive grant (a lock, a
//     multi-key set) waits for every delayed slot of its key.

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

// startDelayLocked keeps the lease name (a key, or a permit's lease) from
// new holders until until, after the expiry of grant token, and queues the
// end of that delay.
func (l *leases) startDelayLocked(name string, token fence.Token, until int64) {
	d := keyDelay{until: until, token: token}
	if key := grantKey(name); key != name {
		slots := l.slotDelays[key]
		if slots == nil {
			slots = make(map[fence.Token]int64)
			l.slotDelays[key] = slots
		}
		slots[token] = until
	} else {
		l.keyDelays[name] = d
	}
	heap.Push(&l.delayQ, queuedDelay{key: name, keyDelay: d})
	l.resetDelayTimerLocked()
}

// takeDelayLocked removes the delay queued as d, unless it was dropped or
// started again since, and reports whether it did.
func (l *leases) takeDelayLocked(d queuedDelay) bool {
	if key := grantKey(d.key); key != d.key {
		if until, ok := l.slotDelays[key][d.token]; !ok || until != d.until {
			return false
		}
		l.dropSlotLocked(key, d.token)
		return true
	}
	if cur, ok := l.keyDelays[d.key]; !ok || cur != d.keyDelay {
		return false
	}
	delete(l.keyDelays, d.key)
	return true
}

// dropSlotLocked forgets the delay of key's slot token.
func (l *leases) dropSlotLocked(key string, token fence.Token) {
	slots := l.slotDelays[key]
	delete(slots, token)
	if len(slots) == 0 {
		delete(l.slotDelays, key)
	}
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
		if !l.takeDelayLocked(d) {
			continue // dropped, or started again
		}
		ends = append(ends, fsm.DelayEnd{Key: grantKey(d.key), Token: d.token})
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
	l.slotDelays = map[string]map[fence.Token]int64{}
	l.reproposed = nil
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

// dropDelay drops the delay started by the expiry of grant token of key:
// an expiry that was proposed did not end the grant (the holder renewed it
// first), so no delay is owed.
func (l *leases) dropDelay(key string, token fence.Token) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d, ok := l.keyDelays[key]; ok && d.token == token {
		delete(l.keyDelays, key)
	}
	l.dropSlotLocked(key, token)
}

// slotLeft returns what is left of the delay of key's slot token on this
// leader's clock (0: over), and whether this leader keeps it at all: false
// once its end was proposed, or for a slot it never kept.
func (l *leases) slotLeft(key string, token fence.Token) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.slotDelays[key][token]
	if !ok {
		return 0, false
	}
	return max(time.Duration(until-l.now()), 0), true
}

// reproposeDue reports whether the end of key's slot token, which this
// leader no longer keeps but the state still records, may be proposed
// again now: at most once per reproposeEvery, however many acquires find
// the slot taken.
func (l *leases) reproposeDue(key string, token fence.Token) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen == 0 {
		return false
	}
	name, now := permitLease(key, token), l.now()
	if last, ok := l.reproposed[name]; ok && now-last < int64(reproposeEvery) {
		return false
	}
	if l.reproposed == nil {
		l.reproposed = make(map[string]int64)
	}
	l.reproposed[name] = now
	return true
}

// reproposeEvery spaces the proposals of one slot's lost delay end.
const reproposeEvery = 250 * time.Millisecond
