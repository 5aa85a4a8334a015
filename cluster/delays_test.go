package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// delayEndLog records the lock-delay ends a lease table proposes, and when.
type delayEndLog struct {
	mu   sync.Mutex
	at   map[string]time.Time
	ends map[string][]fsm.DelayEnd
	gen  map[string]uint64
	// early names the keys whose end was proposed while the table still
	// kept them, when table is set.
	table *leases
	early []string
}

func newDelayEndLog() *delayEndLog {
	return &delayEndLog{at: map[string]time.Time{}, ends: map[string][]fsm.DelayEnd{}, gen: map[string]uint64{}}
}

func (d *delayEndLog) end(gen uint64, e fsm.DelayEnd) {
	var early bool
	if d.table != nil {
		_, early = d.table.lockDelayLeft(e.Key)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if early {
		d.early = append(d.early, e.Key)
	}
	d.at[e.Key], d.gen[e.Key] = time.Now(), gen
	d.ends[e.Key] = append(d.ends[e.Key], e)
}

func (d *delayEndLog) get(key string) (time.Time, []fsm.DelayEnd) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at[key], append([]fsm.DelayEnd(nil), d.ends[key]...)
}

// TestLeaseTableEndsEachLockDelayOnce: lock-delays of many keys, from a
// takeover and from expiries, share one timer; the end of each is proposed
// once, for its grant, not before the key is free for admission, and one
// dropped (dropDelay) or replaced by a later delay is not proposed.
func TestLeaseTableEndsEachLockDelayOnce(t *testing.T) {
	log := newDelayEndLog()
	l := newLeases(hclog.NewNullLogger(), func(uint64, fsm.Expire, time.Duration) {}, log.end)
	log.table = l
	const n = 60
	var taken []fsm.KeyState
	for i := 0; i < n/2; i++ {
		taken = append(taken, fsm.KeyState{Key: fmt.Sprintf("t%d", i), Token: fence.Token(i + 1), State: fsm.Expired,
			LockDelay: time.Duration(10+i*3) * time.Millisecond})
	}
	l.activate(4, walkList(nil), taken)
	want := map[string]fence.Token{}
	for _, k := range taken {
		want[k.Key] = k.Token
	}
	for i := 0; i < n/2; i++ {
		k := fsm.KeyState{Key: fmt.Sprintf("e%d", i), Token: fence.Token(1000 + i), State: fsm.Expired,
			LockDelay: time.Duration(5+i*2) * time.Millisecond}
		l.ended(k)
		want[k.Key] = k.Token
	}
	// e0: the expiry did not end the grant; no delay, no end to record.
	l.dropDelay("e0", 1000)
	delete(want, "e0")
	// e1 expired again with another grant before its delay ran out: only
	// the later delay's end is proposed.
	l.ended(fsm.KeyState{Key: "e1", Token: 5000, State: fsm.Expired, LockDelay: 80 * time.Millisecond})
	want["e1"] = 5000
	l.mu.Lock()
	timers := 0
	if l.delayTimer != nil {
		timers++
	}
	l.mu.Unlock()
	if timers != 1 {
		t.Fatalf("%d delay timers, want one for all", timers)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		for key := range want {
			if _, ends := log.get(key); len(ends) == 0 {
				return fmt.Errorf("no end of %s's lock-delay yet", key)
			}
		}
		return nil
	})
	for key, tok := range want {
		_, ends := log.get(key)
		if len(ends) != 1 || ends[0] != (fsm.DelayEnd{Key: key, Token: tok}) {
			t.Errorf("%s: ends %+v, want one of token %s", key, ends, tok)
		}
		if log.gen[key] != 4 {
			t.Errorf("%s: proposed by generation %d, want 4", key, log.gen[key])
		}
	}
	if len(log.early) != 0 {
		t.Errorf("ends proposed while the table still kept the key: %v", log.early)
	}
	if _, ends := log.get("e0"); len(ends) != 0 {
		t.Errorf("dropped e0: ends %+v", ends)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.keyDelays) != 0 || len(l.delayQ) != 0 {
		t.Errorf("after every delay ended: %d delays, %d queued", len(l.keyDelays), len(l.delayQ))
	}
}

// A lock-delay's end is proposed only by the generation that kept it: a
// late callback of a lost generation proposes nothing, and a deactivated
// table keeps no delay and no timer.
func TestLeaseTableDelayEndOfLostGeneration(t *testing.T) {
	log := newDelayEndLog()
	l := newLeases(hclog.NewNullLogger(), func(uint64, fsm.Expire, time.Duration) {}, log.end)
	l.activate(1, walkList(nil), []fsm.KeyState{{Key: "a", Token: 1, State: fsm.Expired, LockDelay: time.Hour}})
	l.deactivate()
	l.mu.Lock()
	timer, kept := l.delayTimer, len(l.keyDelays)+len(l.delayQ)
	l.mu.Unlock()
	if timer != nil || kept != 0 {
		t.Fatalf("deactivated table kept a delay timer (%v) or %d delays", timer != nil, kept)
	}
	l.activate(2, walkList(nil), []fsm.KeyState{{Key: "b", Token: 2, State: fsm.Expired, LockDelay: time.Millisecond}})
	l.mu.Lock()
	l.delayTimer.Stop() // only the calls below fire
	l.mu.Unlock()
	testutil.Eventually(t, 10*time.Second, func() error {
		if _, inForce := l.lockDelayLeft("b"); inForce {
			return fmt.Errorf("b is still delayed")
		}
		return nil
	})
	l.fireDelays(1)
	if _, ends := log.get("b"); len(ends) != 0 {
		t.Fatalf("a late callback of generation 1 proposed %+v", ends)
	}
	l.fireDelays(2)
	if _, ends := log.get("b"); len(ends) != 1 || log.gen["b"] != 2 {
		t.Fatalf("b: ends %+v by generation %d, want one by 2", ends, log.gen["b"])
	}
}
