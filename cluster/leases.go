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
type lease struct {
	key      string
	holder   string
	token    fence.Token
	ttl      time.Duration
	armed    uint64
	delay    time.Duration // lock-delay after an expiry
	deadline time.Time
	timer    *time.Timer
}

// leases is the leader's lease table. It is active only while the node leads
// and is ready; every timer belongs to one generation (leadership term), so a
// timer of a lost term can never propose an expiry.
type leases struct {
	log    hclog.Logger
	expire func(gen uint64, e fsm.Expire, lockDelay time.Duration)

	mu       sync.Mutex
	gen      uint64 // 0: inactive
	byKey    map[string]*lease
	byHolder map[string]map[string]*lease
	// delays holds the end of each key's lock-delay after an expiry.
	delays map[string]time.Time
}

func newLeases(log hclog.Logger, expire func(gen uint64, e fsm.Expire, lockDelay time.Duration)) *leases {
	return &leases{log: log, expire: expire, byKey: map[string]*lease{}, byHolder: map[string]map[string]*lease{}, delays: map[string]time.Time{}}
}

// activate arms a full TTL for every live grant, from now, for generation gen,
// and a full lock-delay for every expired grant that has one: a new leader
// cannot know when an expiry happened, so it assumes just now.
func (l *leases) activate(gen uint64, live, delayed []fsm.KeyState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopLocked()
	l.gen = gen
	for _, k := range live {
		l.armLocked(k)
	}
	now := time.Now()
	for _, k := range delayed {
		l.delays[k.Key] = now.Add(k.LockDelay)
	}
	l.log.Info("leases re-armed for a full TTL", "generation", gen, "live", len(live))
}

// deactivate stops every timer at once: a node that no longer leads must not
// propose expiries or answer renewals.
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
	for _, ls := range l.byKey {
		ls.timer.Stop()
	}
	l.byKey = map[string]*lease{}
	l.byHolder = map[string]map[string]*lease{}
	l.delays = map[string]time.Time{}
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
		l.delays[k.Key] = time.Now().Add(k.LockDelay)
	}
}

// delayed returns how long a key's lock-delay still lasts.
func (l *leases) delayed(key string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.delays[key]
	if !ok {
		return 0, false
	}
	left := time.Until(until)
	if left <= 0 {
		delete(l.delays, key)
		return 0, false
	}
	return left, true
}

func (l *leases) armLocked(k fsm.KeyState) {
	if old := l.byKey[k.Key]; old != nil {
		l.removeLocked(old)
	}
	ls := &lease{key: k.Key, holder: k.Holder, token: k.Token, ttl: k.TTL, armed: k.Armed, delay: k.LockDelay, deadline: time.Now().Add(k.TTL)}
	gen := l.gen
	ls.timer = time.AfterFunc(k.TTL, func() { l.fire(gen, ls) })
	l.byKey[k.Key] = ls
	h := l.byHolder[k.Holder]
	if h == nil {
		h = map[string]*lease{}
		l.byHolder[k.Holder] = h
	}
	h[k.Key] = ls
}

func (l *leases) removeLocked(ls *lease) {
	ls.timer.Stop()
	delete(l.byKey, ls.key)
	if h := l.byHolder[ls.holder]; h != nil {
		delete(h, ls.key)
		if len(h) == 0 {
			delete(l.byHolder, ls.holder)
		}
	}
}

// fire runs when a lease's timer ends. A renewal may have moved the deadline
// after the timer was already running, so the deadline is checked again.
func (l *leases) fire(gen uint64, ls *lease) {
	l.mu.Lock()
	if l.gen != gen || l.byKey[ls.key] != ls {
		l.mu.Unlock()
		return
	}
	if wait := time.Until(ls.deadline); wait > 0 {
		ls.timer.Reset(wait)
		l.mu.Unlock()
		return
	}
	l.removeLocked(ls)
	if ls.delay > 0 {
		// The lock-delay starts now, before the expiry is proposed: once the
		// expiry is applied the key looks free, and an acquire checking
		// between that moment and ended() would find no delay to honour.
		l.delays[ls.key] = time.Now().Add(ls.delay)
	}
	l.mu.Unlock()
	l.expire(gen, fsm.Expire{Key: ls.key, Token: ls.token, Armed: ls.armed}, ls.delay)
}

// undelay drops the lock-delay of key: an expiry that was proposed did not
// end the grant (the holder renewed it first), so no delay is owed.
func (l *leases) undelay(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.delays, key)
}

// live reports whether the grant has a live lease, and its deadline.
func (l *leases) live(key string, tok fence.Token) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.byKey[key]
	if ls == nil || ls.token != tok || !time.Now().Before(ls.deadline) {
		return time.Time{}, false
	}
	return ls.deadline, true
}

// renew extends a live lease of holder for a full TTL from now.
func (l *leases) renew(key, holder string, tok fence.Token) (fsm.KeyState, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.byKey[key]
	if ls == nil || ls.token != tok || ls.holder != holder || !time.Now().Before(ls.deadline) {
		return fsm.KeyState{}, time.Time{}, false
	}
	ls.deadline = time.Now().Add(ls.ttl)
	return ls.state(), ls.deadline, true
}

// renewHolder extends every live lease of a holder.
func (l *leases) renewHolder(holder string) []RenewedLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	var out []RenewedLease
	for _, ls := range l.byHolder[holder] {
		if !now.Before(ls.deadline) {
			continue
		}
		ls.deadline = now.Add(ls.ttl)
		out = append(out, RenewedLease{Key: ls.state(), Deadline: ls.deadline})
	}
	return out
}

func (ls *lease) state() fsm.KeyState {
	return fsm.KeyState{Key: ls.key, Holder: ls.holder, Token: ls.token, TTL: ls.ttl, State: fsm.Held, Armed: ls.armed, LockDelay: ls.delay}
}

// RenewedLease is a grant whose lease a renewal extended, and its new deadline.
type RenewedLease struct {
	Key      fsm.KeyState
	Deadline time.Time
}
