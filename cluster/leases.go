package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// lease is the leader's view of one live grant: a deadline on the leader's
// monotonic clock. Followers keep none; a new leader re-arms every live grant
// for a full TTL, so no lease ever ends early because of an election.
//
// A lease is one allocation: its key and holder are the strings the state
// machine already holds, and it carries its own places in the deadline heap
// and in its holder's list, so a million leases need no timer and no map per
// holder.
type lease struct {
	key string
	// h is the lease's holder and its list of leases.
	h     *holderLeases
	token fence.Token
	armed uint64
	// deadline is when the lease ends; due is when the heap next looks at
	// it. A renewal moves only deadline, so it costs no heap work: when due
	// comes, a lease whose deadline moved goes back in at its deadline.
	// Both are nanoseconds on the table's monotonic clock (see leases.at).
	deadline, due int64
	// prev and next link the leases of one holder.
	prev, next *lease
	// slot is the lease's index in the heap, -1 once it left it.
	slot int32
	// ttlMs is in whole milliseconds, as the state machine keeps it: 80
	// bytes a lease. The few leases with a lock-delay keep it in
	// leases.lockDelays.
	ttlMs uint32
}

// toMs converts a duration to whole milliseconds, rounding up: a lease is
// never shorter than its grant's TTL (the state machine's durations are
// whole milliseconds already).
func toMs(d time.Duration) uint32 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return uint32(min(max(ms, 0), 1<<32-1))
}

func (ls *lease) ttl() time.Duration { return time.Duration(ls.ttlMs) * time.Millisecond }

// delay returns the lock-delay of ls's grant. The caller holds l.mu.
func (l *leases) delay(ls *lease) time.Duration {
	if len(l.lockDelays) == 0 {
		return 0 // most tables: no lookup on a renewal
	}
	return time.Duration(l.lockDelays[ls]) * time.Millisecond
}

// holderLeases is the list of one holder's leases, and their number.
type holderLeases struct {
	holder string
	first  *lease
	n      int
}

func (h *holderLeases) head() *lease {
	if h == nil {
		return nil
	}
	return h.first
}

func (h *holderLeases) len() int {
	if h == nil {
		return 0
	}
	return h.n
}

// leases is the leader's lease table. It is active only while the node leads
// and is ready; one timer, armed for the earliest due lease, belongs to the
// generation (leadership term) that armed it, so a timer of a lost term can
// never propose an expiry.
type leases struct {
	log    hclog.Logger
	expire func(gen uint64, e fsm.Expire, lockDelay time.Duration)
	// endDelay, if set, proposes the end of a lock-delay that ran out.
	endDelay func(gen uint64, e fsm.DelayEnd)
	// base is the zero of the table's clock: deadlines are kept as
	// nanoseconds since base, read from the monotonic clock.
	base time.Time

	mu    sync.Mutex
	gen   uint64 // 0: inactive
	byKey map[string]*lease
	// byHolder holds each holder's leases.
	byHolder map[string]*holderLeases
	// under counts the live leases of the holders below each namespace:
	// for holder "a/b/c", the namespaces "a" and "a/b" (namespaceCount).
	under map[string]int
	// heap orders the leases by due, earliest first.
	heap []*lease
	// timer fires at the earliest due; timerAt is when (0: stopped).
	timer   *time.Timer
	timerAt int64
	// delays holds each key's lock-delay after an expiry; delayQ orders
	// their ends for the one timer of all of them, delayTimer, armed for
	// delayTimerAt (0: stopped). See delays.go.
	delays       map[string]lockDelay
	delayQ       delayQueue
	delayTimer   *time.Timer
	delayTimerAt int64
	// lockDelays holds the lock-delay (ms) of the leases whose grant has one.
	lockDelays map[*lease]uint32
}

func newLeases(log hclog.Logger, expire func(gen uint64, e fsm.Expire, lockDelay time.Duration), endDelay func(gen uint64, e fsm.DelayEnd)) *leases {
	return &leases{log: log, expire: expire, endDelay: endDelay, base: time.Now(), byKey: map[string]*lease{}, byHolder: map[string]*holderLeases{}, under: map[string]int{},
		delays: map[string]lockDelay{}, lockDelays: map[*lease]uint32{}}
}

// now returns the table's clock.
func (l *leases) now() int64 { return int64(time.Since(l.base)) }

// at converts a time of the table's clock to a time.Time (with its
// monotonic reading, so comparisons with time.Now stay monotonic).
func (l *leases) at(t int64) time.Time { return l.base.Add(time.Duration(t)) }

// walkFunc walks the live grants: begin hears their number, fn each one
// (fsm.FSM.WalkLive).
type walkFunc func(begin func(n int), fn func(fsm.KeyState))

// activate arms a full TTL for every live grant that walk yields, from now,
// for generation gen, and a full lock-delay for every expired grant whose
// delay the log does not record as ended: a new leader cannot know when an
// expiry happened, so it assumes just now. The table is filled straight
// from the walk: no list of every live grant is made first.
func (l *leases) activate(gen uint64, walk walkFunc, delayed []fsm.KeyState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopLocked()
	l.gen = gen
	now := l.now()
	start := now
	walk(func(n int) {
		l.byKey = make(map[string]*lease, n)
		l.heap = make([]*lease, 0, n)
	}, func(k fsm.KeyState) {
		if old := l.byKey[k.Key]; old != nil {
			l.removeLocked(old) // the heap is put in order below
		}
		l.insertLocked(k, now)
	})
	// One heapify for all of them: O(n), where n pushes are O(n log n).
	for i := len(l.heap)/2 - 1; i >= 0; i-- {
		l.down(i)
	}
	l.resetTimerLocked()
	for _, k := range delayed {
		l.delayLocked(k.Key, k.Token, now+int64(k.LockDelay))
	}
	l.log.Info("leases re-armed for a full TTL", "generation", gen, "live", len(l.heap), "took", time.Duration(l.now()-start))
}

// deactivate stops the timer and forgets every lease at once: a node that
// no longer leads must not propose expiries or answer renewals.
func (l *leases) deactivate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopLocked()
	l.gen = 0
}

// deactivateGen deactivates the table only if generation gen armed it: a
// newer generation's table is left alone.
func (l *leases) deactivateGen(gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen == gen {
		l.stopLocked()
		l.gen = 0
	}
}

func (l *leases) stopLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.timerAt = 0
	l.byKey = map[string]*lease{}
	l.byHolder = map[string]*holderLeases{}
	l.under = map[string]int{}
	l.heap = nil
	l.stopDelaysLocked()
	l.lockDelays = map[*lease]uint32{}
}

// granted arms (or re-arms, for a renewal by acquire) the lease of a grant.
func (l *leases) granted(k fsm.KeyState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen != 0 {
		l.armLocked(k)
	}
}

// ended forgets the lease of a grant that was released or expired.
func (l *leases) ended(k fsm.KeyState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ls := l.byKey[k.Key]; ls != nil && ls.token == k.Token {
		l.removeLocked(ls)
	}
	if l.gen != 0 && k.State == fsm.Expired && k.LockDelay > 0 {
		l.delayLocked(k.Key, k.Token, l.now()+int64(k.LockDelay))
	}
}

func (l *leases) armLocked(k fsm.KeyState) {
	if old := l.byKey[k.Key]; old != nil {
		l.removeLocked(old)
	}
	ls := l.insertLocked(k, l.now())
	l.up(int(ls.slot))
	if ls.slot == 0 {
		l.resetTimerLocked()
	}
}

// insertLocked makes the lease of k, due a TTL after now, and appends it to
// the heap without restoring the heap's order.
func (l *leases) insertLocked(k fsm.KeyState, now int64) *lease {
	ls := &lease{key: k.Key, token: k.Token, armed: k.Armed, ttlMs: toMs(k.TTL), slot: int32(len(l.heap))}
	if d := toMs(k.LockDelay); d > 0 {
		l.lockDelays[ls] = d
	}
	ls.deadline = now + int64(ls.ttl())
	ls.due = ls.deadline
	l.heap = append(l.heap, ls)
	l.byKey[k.Key] = ls
	h := l.byHolder[k.Holder]
	if h == nil {
		h = &holderLeases{holder: k.Holder}
		l.byHolder[k.Holder] = h
	}
	ls.h = h
	if h.first != nil {
		ls.next, h.first.prev = h.first, ls
	}
	h.first = ls
	h.n++
	l.countUnder(k.Holder, 1)
	return ls
}

// countUnder adds d to the count of every namespace above holder.
func (l *leases) countUnder(holder string, d int) {
	for i := 0; i < len(holder); i++ {
		if holder[i] != '/' {
			continue
		}
		ns := holder[:i]
		if l.under[ns] += d; l.under[ns] == 0 {
			delete(l.under, ns)
		}
	}
}

func (l *leases) removeLocked(ls *lease) {
	delete(l.byKey, ls.key)
	delete(l.lockDelays, ls)
	if h := ls.h; h != nil {
		if h.first == ls {
			h.first = ls.next
		}
		if h.n--; h.n == 0 {
			delete(l.byHolder, h.holder)
		}
		l.countUnder(h.holder, -1)
		ls.h = nil
	}
	if ls.prev != nil {
		ls.prev.next = ls.next
	}
	if ls.next != nil {
		ls.next.prev = ls.prev
	}
	ls.prev, ls.next = nil, nil
	if ls.slot >= 0 {
		l.heapRemove(int(ls.slot))
	}
	// A stale timer only makes fire look at the heap early; it is not
	// worth a reset per removal.
}

// resetTimerLocked arms the timer for the earliest due lease, unless it is
// already armed for that moment or earlier (fire then re-arms it).
func (l *leases) resetTimerLocked() {
	if len(l.heap) > 0 {
		l.armEarliestLocked(&l.timer, &l.timerAt, l.heap[0].due, l.fire)
	}
}

// armEarliestLocked arms *t to run fire at due, unless *at says it is armed
// for that moment or earlier already. A new timer belongs to the table's
// current generation: fire hears that generation, so a timer of a lost
// term proposes nothing in a later one's name.
func (l *leases) armEarliestLocked(t **time.Timer, at *int64, due int64, fire func(gen uint64)) {
	if *t != nil && *at != 0 && *at <= due {
		return
	}
	wait := time.Duration(due - l.now())
	if *t == nil {
		gen := l.gen
		*t = time.AfterFunc(wait, func() { fire(gen) })
	} else {
		(*t).Reset(wait)
	}
	*at = due
}

// fire runs when the timer ends: every lease whose deadline passed is
// forgotten and its expiry proposed; a lease that a renewal moved goes back
// in the heap at its new deadline.
func (l *leases) fire(gen uint64) {
	type ending struct {
		e     fsm.Expire
		delay time.Duration
	}
	var ends []ending
	l.mu.Lock()
	if l.gen != gen || l.timer == nil {
		l.mu.Unlock()
		return
	}
	l.timerAt = 0
	now := l.now()
	for len(l.heap) > 0 && l.heap[0].due <= now {
		ls := l.heap[0]
		if ls.deadline > now {
			// A renewal moved the deadline after this lease was due.
			ls.due = ls.deadline
			l.down(0)
			continue
		}
		delay := l.delay(ls)
		l.removeLocked(ls)
		if delay > 0 {
			// The lock-delay starts now, before the expiry is proposed: once
			// the expiry is applied the key looks free, and an acquire
			// checking between that moment and ended() would find no delay
			// to honour.
			l.delayLocked(ls.key, ls.token, now+int64(delay))
		}
		ends = append(ends, ending{fsm.Expire{Key: ls.key, Token: ls.token, Armed: ls.armed}, delay})
	}
	l.resetTimerLocked()
	l.mu.Unlock()
	for _, x := range ends {
		l.expire(gen, x.e, x.delay)
	}
}

// The heap: a binary min-heap of leases by due, each lease knowing its slot.

func (l *leases) less(i, j int) bool { return l.heap[i].due < l.heap[j].due }

func (l *leases) swap(i, j int) {
	h := l.heap
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = int32(i), int32(j)
}

func (l *leases) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !l.less(i, p) {
			return
		}
		l.swap(i, p)
		i = p
	}
}

func (l *leases) down(i int) {
	n := len(l.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && l.less(r, c) {
			c = r
		}
		if !l.less(c, i) {
			return
		}
		l.swap(i, c)
		i = c
	}
}

func (l *leases) heapRemove(i int) {
	last := len(l.heap) - 1
	ls := l.heap[i]
	if i != last {
		l.swap(i, last)
	}
	l.heap[last] = nil
	l.heap = l.heap[:last]
	ls.slot = -1
	if i != last {
		l.down(i)
		l.up(i)
	}
}

// live reports whether the grant has a live lease, and its deadline.
func (l *leases) live(key string, tok fence.Token) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.byKey[key]
	if ls == nil || ls.token != tok || ls.deadline <= l.now() {
		return time.Time{}, false
	}
	return l.at(ls.deadline), true
}

// renew extends a live lease of holder for a full TTL from now.
func (l *leases) renew(key, holder string, tok fence.Token) (fsm.KeyState, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.byKey[key]
	now := l.now()
	if ls == nil || ls.token != tok || ls.h.holder != holder || ls.deadline <= now {
		return fsm.KeyState{}, time.Time{}, false
	}
	ls.deadline = now + int64(ls.ttl())
	return l.state(ls), l.at(ls.deadline), true
}

// renewHolder extends every live lease of a holder.
func (l *leases) renewHolder(holder string) []RenewedLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	h := l.byHolder[holder]
	if h == nil {
		return nil
	}
	out := make([]RenewedLease, 0, h.len())
	for ls := h.head(); ls != nil; ls = ls.next {
		if ls.deadline <= now {
			continue
		}
		ls.deadline = now + int64(ls.ttl())
		out = append(out, RenewedLease{Key: l.state(ls), Deadline: l.at(ls.deadline)})
	}
	return out
}

// state returns the grant of ls. The caller holds l.mu.
func (l *leases) state(ls *lease) fsm.KeyState {
	return fsm.KeyState{Key: ls.key, Holder: ls.h.holder, Token: ls.token, TTL: ls.ttl(), State: fsm.Held, Armed: ls.armed, LockDelay: l.delay(ls)}
}

// RenewedLease is a grant whose lease a renewal extended, and its new deadline.
type RenewedLease struct {
	Key      fsm.KeyState
	Deadline time.Time
}
