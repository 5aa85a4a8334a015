package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// recv waits for one value of ch, failing the test by name when it does not
// come: a hook that was never reached is a test that proves nothing.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never happened", what)
	}
	var zero T
	return zero
}

// A leadership generation revoked while it is being established never
// becomes ready: a stale ready flag would let a node serve before its barrier
// and takeover wait, and let the expiry retries of the old generation run on.
func TestRevokedGenerationNeverBecomesReady(t *testing.T) {
	tc := newTestCluster(t, 1)
	_, lead := tc.leader()
	gen := lead.gen.Add(1) // leadership regained: a new generation
	lead.testHooks.Store(&hooks{beforeReady: func(g uint64) {
		if g == gen {
			lead.revoke() // leadership lost again, right before the ready flag
		}
	}})
	lead.wg.Add(1)
	lead.establish(lead.r(), gen, time.Time{})
	if got := lead.ready.Load(); got != 0 {
		t.Fatalf("ready is generation %d after that generation was revoked during establish (now %d); want 0", got, lead.gen.Load())
	}
	lead.leases.mu.Lock()
	lgen := lead.leases.gen
	lead.leases.mu.Unlock()
	if lgen != 0 {
		t.Fatalf("lease table active for generation %d after the revoke", lgen)
	}
}

// A waiting acquire whose deadline passes while a release already carries its
// acquire answers with that release's outcome, never with "held": the release
// hands it the key.
func TestWaitDeadlineTakesInFlightHandoff(t *testing.T) {
	tc := newTestCluster(t, 1)
	_, lead := tc.leader()
	ctx := context.Background()
	a, err := lead.Acquire(ctx, AcquireArgs{Key: "k", Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	woken, proceed := make(chan struct{}, 1), make(chan struct{})
	claimed, letRelease := make(chan struct{}, 1), make(chan struct{})
	var wokenOnce, claimedOnce, proceedOnce, releaseOnce sync.Once
	goOn := func() { proceedOnce.Do(func() { close(proceed) }) }
	release := func() { releaseOnce.Do(func() { close(letRelease) }) }
	t.Cleanup(func() { goOn(); release() }) // a failed test must not leave the hooks blocked
	lead.testHooks.Store(&hooks{
		woken: func(string) {
			wokenOnce.Do(func() { woken <- struct{}{}; <-proceed })
		},
		claimed: func(string) {
			claimedOnce.Do(func() { claimed <- struct{}{}; <-letRelease })
		},
	})
	type result struct {
		g   Grant
		err error
	}
	const wait = 300 * time.Millisecond
	start := time.Now()
	bres := make(chan result, 1)
	go func() {
		g, err := lead.Acquire(ctx, AcquireArgs{Key: "k", Holder: "b", TTL: time.Minute, Wait: wait})
		bres <- result{g, err}
	}()
	testutil.Eventually(t, 10*time.Second, func() error {
		if !lead.waiters.waiting("k") {
			return errors.New("b is not waiting yet")
		}
		return nil
	})
	rres := make(chan error, 1)
	go func() {
		_, err := lead.Release(ctx, ReleaseArgs{Key: "k", Holder: "a", Token: a.Token})
		rres <- err
	}()
	recv(t, claimed, "the release claiming b")
	lead.waiters.kick("k") // b wakes while the release is in flight
	recv(t, woken, "b waking")
	testutil.Eventually(t, 10*time.Second, func() error {
		if time.Since(start) <= wait {
			return errors.New("b's deadline has not passed yet")
		}
		return nil
	})
	goOn() // b tries again, after its deadline
	testutil.Eventually(t, 10*time.Second, func() error {
		if lead.waiters.waiting("k") {
			return errors.New("b still in line")
		}
		return nil
	})
	release()
	if err := recv(t, rres, "the release"); err != nil {
		t.Fatal(err)
	}
	b := recv(t, bres, "b's answer")
	k, _ := lead.fsm.Get("k")
	if b.err != nil {
		t.Fatalf("b was told %q, but the release handed it the key: holder %q state %v", b.err, k.Holder, k.State)
	}
	if b.g.Holder != "b" || b.g.Token != k.Token {
		t.Fatalf("b's grant %+v is not the key's state %+v", b.g, k)
	}
}

// No other holder acquires a key inside its lock-delay, not even at the
// moment the expiry is applied and before the leader's lease table heard of it.
func TestLockDelayHoldsFromTheExpiry(t *testing.T) {
	tc := newTestCluster(t, 1)
	_, lead := tc.leader()
	ctx := context.Background()
	proposed := make(chan struct{}, 1)
	bres := make(chan error, 1)
	var once sync.Once
	lead.testHooks.Store(&hooks{
		ended: func(k fsm.KeyState) {
			if k.Key != "d" || k.State != fsm.Expired {
				return
			}
			once.Do(func() {
				// The expiry is applied; the lease table has not heard yet.
				bdone := make(chan struct{})
				go func() {
					defer close(bdone)
					_, err := lead.Acquire(ctx, AcquireArgs{Key: "d", Holder: "b", TTL: time.Second})
					bres <- err
				}()
				select {
				case <-proposed: // b got past every check
				case <-bdone: // b was refused
				case <-time.After(30 * time.Second):
				}
			})
		},
		proposing: func(a AcquireArgs) {
			if a.Holder == "b" {
				proposed <- struct{}{}
			}
		},
	})
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "d", Holder: "a", TTL: 200 * time.Millisecond, LockDelay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	err := recv(t, bres, "b's acquire at the expiry")
	if !errors.Is(err, ErrLockDelay) {
		k, _ := lead.fsm.Get("d")
		t.Fatalf("b's acquire right at the expiry: %v (key now held by %q, %v); want the lock-delay refusal", err, k.Holder, k.State)
	}
}

// A node knows its place in the cluster: new before it joins, a member once
// it sees itself in the configuration, removed after that, and still removed
// after a restart with the same data dir, until it is added again. While it
// is not a member it answers ErrNotMember and names no leader.
func TestSelfMembershipSurvivesRestart(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	addr := testutil.FreeAddrs(t, 1)[0]
	tc.cfgs = append(tc.cfgs, fastConfig(t, "n4", t.TempDir(), addr))
	tc.nodes = append(tc.nodes, nil)
	tc.start(3)
	n4 := func() *Node { return tc.nodes[3] }
	awaitSelf := func(want Self) {
		t.Helper()
		testutil.Eventually(t, 15*time.Second, func() error {
			if got := n4().Self(); got != want {
				return testutil.Errorf("n4 is %v, want %v", got, want)
			}
			return nil
		})
	}
	notMember := func(stage string) {
		t.Helper()
		if _, err := n4().requireReady(); !errors.Is(err, ErrNotMember) {
			t.Fatalf("%s: n4 answers %v, want ErrNotMember", stage, err)
		}
		if id, _ := n4().Leader(); id != "" {
			t.Fatalf("%s: n4 names leader %q", stage, id)
		}
	}
	if got := n4().Self(); got != SelfNew {
		t.Fatalf("fresh n4 is %v", got)
	}
	notMember("fresh")

	if err := lead.Join(ctx, "n4", addr, "http-n4"); err != nil {
		t.Fatal(err)
	}
	awaitSelf(SelfMember)
	if err := lead.Remove(ctx, "n4"); err != nil {
		t.Fatal(err)
	}
	awaitSelf(SelfRemoved)
	notMember("removed")

	tc.stop(3)
	tc.start(3)
	if got := n4().Self(); got != SelfRemoved {
		t.Fatalf("n4 restarted after its removal is %v, want %v", got, SelfRemoved)
	}
	notMember("restarted")

	if err := lead.Join(ctx, "n4", addr, "http-n4"); err != nil { // an operator adds it back
		t.Fatal(err)
	}
	awaitSelf(SelfMember)
	if err := n4().MemberErr(); err != nil {
		t.Fatalf("n4 added back: %v", err)
	}
}

// A join the leader accepted is recorded durably at once: a node removed
// before it ever saw a configuration with itself does not announce itself
// again, not even after a restart.
func TestAcceptedJoinIsRecorded(t *testing.T) {
	for _, store := range []string{StoreBolt, StoreWAL} {
		t.Run(store, func(t *testing.T) { testAcceptedJoinIsRecorded(t, store) })
	}
}

func testAcceptedJoinIsRecorded(t *testing.T, store string) {
	addr := testutil.FreeAddrs(t, 1)[0]
	cfg := fastConfig(t, "n1", t.TempDir(), addr) // no peers: waits to be added
	cfg.Store = store
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Self(); got != SelfNew {
		n.Close()
		t.Fatalf("fresh node is %v", got)
	}
	n.RecordJoined()
	if got := n.Self(); got != SelfJoining {
		n.Close()
		t.Fatalf("after an accepted join: %v, want %v", got, SelfJoining)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got := n.Self(); got != SelfJoining {
		t.Fatalf("restarted after an accepted join: %v, want %v", got, SelfJoining)
	}
	if !errors.Is(n.MemberErr(), ErrNotMember) {
		t.Fatalf("MemberErr: %v", n.MemberErr())
	}
}
