package cluster

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// grantMany grants n keys of one holder on the leader, concurrently, with
// a TTL long enough that none expires before the test moves the clock.
func grantMany(t testing.TB, lead *Node, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if _, err := lead.Acquire(ctx, AcquireArgs{Key: fmt.Sprintf("%s/%d", prefix, i), Holder: "mass", TTL: time.Hour}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// skipLeaseClock moves the leader's lease clock forward by d and fires the
// lease timer: every lease due before then is due now, at once.
func skipLeaseClock(n *Node, d time.Duration) {
	l := n.leases
	l.mu.Lock()
	base := l.base
	l.clock = func() int64 { return int64(time.Since(base) + d) }
	gen := l.gen
	l.mu.Unlock()
	l.fire(gen)
}

// Thousands of leases that fall due together are proposed by a bounded
// number of goroutines, not one (or two) per lease, and every one of them
// expires.
func TestMassExpiryBoundedGoroutines(t *testing.T) {
	const keys = 3000
	tc := newTestCluster(t, 1)
	_, lead := tc.leader()
	grantMany(t, lead, "mass", keys)
	base := runtime.NumGoroutine()
	peak := base
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, runtime.NumGoroutine())
			select {
			case <-done:
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	skipLeaseClock(lead, 2*time.Hour)
	testutil.Eventually(t, time.Minute, func() error {
		left := 0
		for _, k := range lead.FSM().Live() {
			if k.Holder == "mass" {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("%d leases not expired yet", left)
		}
		return nil
	})
	close(done)
	<-sampled
	if extra := peak - base; extra > 100 {
		t.Fatalf("%d leases falling due together took %d goroutines more at the peak (%d before)", keys, extra, base)
	}
	for i := 0; i < keys; i += keys / 10 {
		if k, _ := lead.FSM().Get(fmt.Sprintf("mass/%d", i)); k.State != fsm.Expired {
			t.Fatalf("mass/%d: %v", i, k.State)
		}
	}
}

// The table hands over no more expired leases than the proposals have room
// for, keeps the others (past their deadline: not renewable), and hands
// them over when asked again.
func TestFireTakesNoMoreThanRoom(t *testing.T) {
	var got []string
	l := newLeases(hclog.NewNullLogger(), func(_ uint64, e fsm.Expire, _ time.Duration) { got = append(got, e.Key) }, nil)
	room := 3
	l.room = func() int { return room - len(got) }
	var now int64
	l.clock = func() int64 { return now }
	ks := benchKeys(10)
	for i := range ks {
		ks[i].TTL = time.Second
	}
	l.activate(1, walkList(ks), nil)
	now = int64(2 * time.Second)
	l.fire(1)
	if len(got) != 3 {
		t.Fatalf("took %d expired leases with room for 3", len(got))
	}
	if _, _, ok := l.renew(ks[9].Key, ks[9].Holder, ks[9].Token); ok {
		t.Fatal("a lease kept past its deadline was renewed")
	}
	room = 100
	l.fire(1)
	if len(got) != len(ks) {
		t.Fatalf("%d of %d expired leases handed over", len(got), len(ks))
	}
	l.deactivate()
}
