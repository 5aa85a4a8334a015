package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/metrics"
)

// With a quorum in touch, verifies rest on the heartbeats and take no round
// of their own; cut off from every follower, the leader stops allowing
// within renewWindow of the last heartbeat a quorum accepted, long before a
// newer leader could serve.
func TestVerifiesRestOnRecentQuorum(t *testing.T) {
	tc, li, lead, g := contactCluster(t, "v")
	ctx := context.Background()
	fast := metrics.VerifyConfirms.WithLabelValues("recent_quorum")
	slow := metrics.VerifyConfirms.WithLabelValues("round")
	beforeFast, beforeSlow := promtest.ToFloat64(fast), promtest.ToFloat64(slow)
	for i := 0; i < 20; i++ {
		v, err := lead.Verify(ctx, "v", g.Token, "a")
		if err != nil || !v.Allow {
			t.Fatalf("verify %d: %+v, %v", i, v, err)
		}
	}
	if _, err := lead.VerifyBatch(ctx, []VerifyCheck{{Key: "v", Token: g.Token}}); err != nil {
		t.Fatal(err)
	}
	byContact, byRound := promtest.ToFloat64(fast)-beforeFast, promtest.ToFloat64(slow)-beforeSlow
	if byContact < 11 || byContact+byRound != 21 {
		t.Fatalf("of 21 verifies %v rested on the recent quorum contact and %v took a round", byContact, byRound)
	}

	tc.stopFollowers(li)
	cut := time.Now()
	for time.Since(cut) < 2*takeoverWait {
		asked := time.Now()
		vctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		v, err := lead.Verify(vctx, "v", g.Token, "a")
		cancel()
		if (err == nil || v.Allow) && asked.Sub(cut) > renewWindow {
			t.Fatalf("a verify asked %v after the followers stopped answered %+v, %v", asked.Sub(cut), v, err)
		}
	}
}

// A verify reads the state first and checks the quorum contact after: a
// leader that stalls between the two (SIGSTOP, a long collection) while it
// loses its quorum must not answer from the read, since a newer leader may
// have served by then. The hook holds the verify after its read until the
// contact is older than renewWindow; checking only before the read lets it
// through.
func TestVerifyChecksContactAfterItsRead(t *testing.T) {
	tc, li, lead, g := contactCluster(t, "v")
	ctx := context.Background()
	testutil.Eventually(t, 5*time.Second, func() error {
		if !recentQuorum(lead.r()) {
			return errors.New("no recent quorum contact yet")
		}
		return nil
	})
	held := false
	lead.testHooks.Store(&hooks{readOnContact: func() {
		if held {
			return
		}
		held = true
		tc.stopFollowers(li)
		testutil.Eventually(t, 5*time.Second, func() error {
			if recentQuorum(lead.r()) {
				return errors.New("the quorum contact is still recent")
			}
			return nil
		})
	}})
	vctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := lead.Verify(vctx, "v", g.Token, "a")
	if !held {
		t.Fatal("the verify never read on the quorum contact")
	}
	if err == nil || v.Allow {
		t.Fatalf("a verify whose read outlived the leader's quorum contact answered %+v, %v", v, err)
	}
}

// With VerifyByRound every verify takes a confirmation round of its own.
func TestVerifyByRoundTakesRounds(t *testing.T) {
	tc := newTestClusterWith(t, 3, func(c *Config) { c.VerifyConfirm = VerifyByRound })
	defer tc.closeAll()
	ctx := context.Background()
	_, lead := tc.leader()
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "v", Holder: "a", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fast := metrics.VerifyConfirms.WithLabelValues("recent_quorum")
	slow := metrics.VerifyConfirms.WithLabelValues("round")
	beforeFast, beforeSlow := promtest.ToFloat64(fast), promtest.ToFloat64(slow)
	for i := 0; i < 5; i++ {
		if v, err := lead.Verify(ctx, "v", g.Token, "a"); err != nil || !v.Allow {
			t.Fatalf("verify %d: %+v, %v", i, v, err)
		}
	}
	if byContact, byRound := promtest.ToFloat64(fast)-beforeFast, promtest.ToFloat64(slow)-beforeSlow; byContact != 0 || byRound != 5 {
		t.Fatalf("with rounds configured, %v verifies rested on the contact and %v took a round", byContact, byRound)
	}
}

// A mode that is neither contact nor round is refused before anything starts.
func TestVerifyConfirmValidated(t *testing.T) {
	err := (&Config{ID: "n", DataDir: t.TempDir(), RaftBind: "127.0.0.1:0", VerifyConfirm: "lease"}).validate()
	if !errors.Is(err, ErrBadRequest) {
		t.Fatalf("VerifyConfirm lease: %v", err)
	}
}
