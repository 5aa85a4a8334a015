package cluster

import (
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// expiryLog records the expiries a lease table proposes, and when.
type expiryLog struct {
	mu  sync.Mutex
	at  map[string]time.Time
	gen map[string]uint64
	n   map[string]int
}

func (e *expiryLog) expire(gen uint64, x fsm.Expire, _ time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.at[x.Key], e.gen[x.Key] = time.Now(), gen
	e.n[x.Key]++
}

func (e *expiryLog) get(key string) (time.Time, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at[key], e.n[key]
}

// TestLeaseTableExpiresEachLeaseOnceAfterItsDeadline arms leases with mixed
// TTLs in one table (one deadline heap, one timer), renews some, re-arms some
// with a shorter TTL, releases some, and checks that every remaining lease's
// expiry is proposed exactly once, never before its last deadline, and that
// released leases never expire.
func TestLeaseTableExpiresEachLeaseOnceAfterItsDeadline(t *testing.T) {
	log := &expiryLog{at: map[string]time.Time{}, gen: map[string]uint64{}, n: map[string]int{}}
	l := newLeases(hclog.NewNullLogger(), log.expire, nil)
	rng := rand.New(rand.NewSource(1))
	const n = 300
	ks := make([]fsm.KeyState, n)
	for i := range ks {
		// Mixed TTLs, each long enough that no lease can run out while the
		// loop below, slow under load and -race, renews, re-arms and
		// releases them: an expiry before its lease was released or
		// re-armed would be counted against the table.
		ks[i] = fsm.KeyState{Key: fmt.Sprintf("k%d", i), Holder: fmt.Sprintf("h%d", i%7), Token: fence.Token(i + 1),
			TTL: time.Duration(2000+rng.Intn(1000)) * time.Millisecond, State: fsm.Held, Armed: uint64(i + 1)}
	}
	l.activate(3, walkList(ks[:n/2]), nil)
	for _, k := range ks[n/2:] {
		l.granted(k)
	}
	notBefore := map[string]time.Time{}
	released := map[string]bool{}
	for i, k := range ks {
		switch i % 5 {
		case 0: // released: never expires
			l.ended(fsm.KeyState{Key: k.Key, Token: k.Token, State: fsm.Released})
			released[k.Key] = true
		case 1: // renewed: not before the renewed deadline
			_, dl, ok := l.renew(k.Key, k.Holder, k.Token)
			if !ok {
				t.Fatalf("renewal of %s refused", k.Key)
			}
			notBefore[k.Key] = dl
		case 2: // re-armed by an acquire with a shorter TTL
			k.TTL, k.Armed = 5*time.Millisecond, k.Armed+1000
			armed := time.Now() // before the table reads its clock
			l.granted(k)
			notBefore[k.Key] = armed.Add(k.TTL)
		default:
			dl, ok := l.live(k.Key, k.Token)
			if !ok {
				t.Fatalf("%s is not live", k.Key)
			}
			notBefore[k.Key] = dl
		}
	}
	renewed, _ := l.renewHolder("h3", nil)
	for _, r := range renewed {
		if !released[r.Key.Key] {
			notBefore[r.Key.Key] = r.Deadline
		}
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		for key := range notBefore {
			if _, c := log.get(key); c == 0 {
				return fmt.Errorf("%s has not expired", key)
			}
		}
		return nil
	})
	for key, nb := range notBefore {
		at, c := log.get(key)
		if c != 1 {
			t.Errorf("%s: %d expiries proposed, want 1", key, c)
		}
		if at.Before(nb) {
			t.Errorf("%s: expiry proposed %v before its deadline", key, nb.Sub(at))
		}
		if log.gen[key] != 3 {
			t.Errorf("%s: expiry of generation %d, want 3", key, log.gen[key])
		}
	}
	for key := range released {
		if _, c := log.get(key); c != 0 {
			t.Errorf("released %s: %d expiries proposed", key, c)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if got := l.holderLenLocked("h1"); got != 0 {
		t.Errorf("holder h1 still has %d leases after all ended", got)
	}
	if len(l.heap) != 0 || l.n != 0 || len(l.byHolder) != 0 {
		t.Errorf("table not empty after every lease ended: heap %d, keys %d, holders %d", len(l.heap), l.n, len(l.byHolder))
	}
}

// TestLeaseTableDeactivatedProposesNothing: a deactivated table (leadership
// lost) keeps no timer and no lease, and a late timer callback of an earlier
// generation proposes nothing in a later one's name.
func TestLeaseTableDeactivatedProposesNothing(t *testing.T) {
	log := &expiryLog{at: map[string]time.Time{}, gen: map[string]uint64{}, n: map[string]int{}}
	l := newLeases(hclog.NewNullLogger(), log.expire, nil)
	l.activate(1, walkList([]fsm.KeyState{{Key: "a", Holder: "h", Token: 1, TTL: time.Hour, State: fsm.Held}}), nil)
	l.deactivate()
	l.mu.Lock()
	timer, leases := l.timer, len(l.heap)+l.n+len(l.byHolder)+len(l.chunks)+l.index.Size()
	l.mu.Unlock()
	if timer != nil || leases != 0 {
		t.Fatalf("deactivated table kept a timer (%v) or %d lease entries", timer != nil, leases)
	}
	l.activate(2, walkList([]fsm.KeyState{{Key: "b", Holder: "h", Token: 2, TTL: time.Millisecond, State: fsm.Held}}), nil)
	// Hold generation 2's own timer back, so that only the calls below fire.
	l.mu.Lock()
	l.timer.Stop()
	l.mu.Unlock()
	testutil.Eventually(t, 10*time.Second, func() error {
		if _, live := l.live("b", 2); live {
			return fmt.Errorf("b is not due yet")
		}
		return nil
	})
	l.fire(1) // a callback of generation 1, late: b is due, but not its to end
	if _, c := log.get("b"); c != 0 {
		t.Fatalf("a late callback of generation 1 expired b")
	}
	l.fire(2)
	if _, c := log.get("b"); c != 1 {
		t.Fatalf("b: %d expiries by its own generation, want 1", c)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.n["a"] != 0 || log.gen["b"] != 2 {
		t.Fatalf("expiries %v of generations %v; want only b, by generation 2", log.n, log.gen)
	}
}

// A lease keeps its TTL and lock-delay in whole milliseconds, rounded up:
// never shorter than the grant's.
func TestLeaseDurationsRoundUp(t *testing.T) {
	for in, want := range map[time.Duration]uint32{0: 0, time.Nanosecond: 1, time.Millisecond: 1, 1500 * time.Microsecond: 2, time.Hour: 3600000, -time.Second: 0, 1 << 62: 1<<32 - 1} {
		if got := toMs(in); got != want {
			t.Errorf("toMs(%v) = %d, want %d", in, got, want)
		}
	}
	if s := unsafe.Sizeof(leaseRec{}); s != 64 {
		t.Errorf("a lease takes %d bytes, not one 64-byte cache line", s)
	}
}

// A lease's lock-delay, kept beside the lease, goes with its expiry and
// renewals, and leaves with the lease.
func TestLeaseLockDelayFollowsItsLease(t *testing.T) {
	var mu sync.Mutex
	delays := map[string]time.Duration{}
	l := newLeases(hclog.NewNullLogger(), func(_ uint64, x fsm.Expire, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		delays[x.Key] = d
	}, nil)
	l.activate(1, walkList([]fsm.KeyState{
		// A lock-delay long enough to be still in force when it is checked
		// below, and not whole milliseconds: it must round up.
		{Key: "d", Holder: "h", Token: 1, TTL: 5 * time.Millisecond, LockDelay: time.Minute + 500*time.Microsecond, State: fsm.Held},
		{Key: "plain", Holder: "h", Token: 2, TTL: 5 * time.Millisecond, State: fsm.Held},
		{Key: "gone", Holder: "h", Token: 3, TTL: time.Hour, LockDelay: time.Second, State: fsm.Held},
	}), nil)
	if k, _, ok := l.renew("d", "h", 1); !ok || k.LockDelay != time.Minute+time.Millisecond {
		t.Fatalf("renewal of d: %+v %v", k, ok)
	}
	l.ended(fsm.KeyState{Key: "gone", Holder: "h", Token: 3, State: fsm.Released})
	testutil.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(delays) < 2 {
			return fmt.Errorf("expiries %v", delays)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if delays["d"] != time.Minute+time.Millisecond || delays["plain"] != 0 {
		t.Fatalf("expiries proposed with lock-delays %v", delays)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, started := l.keyDelays["d"]; !started {
		t.Fatal("d's lock-delay did not start at its expiry")
	}
	if len(l.grantDelays) != 0 || len(l.byHolder) != 0 {
		t.Fatalf("lock-delays %d and holders %d left behind", len(l.grantDelays), len(l.byHolder))
	}
}

// walkList walks a list of live grants, as activate wants them.
func walkList(live []fsm.KeyState) walkFunc {
	return func(begin func(int), fn func(fsm.KeyState)) {
		begin(len(live))
		for _, k := range live {
			fn(k)
		}
	}
}
