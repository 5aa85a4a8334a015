package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/client/roundlease"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// roundOf polls until owner gets the role (an election may be under way)
// and returns its lease.
func roundOf(t *testing.T, f *roundlease.Fenced, key string) roundlease.Lease {
	t.Helper()
	var l roundlease.Lease
	testutil.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		l, err = f.Acquire(ctx, key)
		return err
	})
	return l
}

// TestRoundsAcrossLeaderKill proves the seam's three properties against a
// real three-node cluster whose leader is killed mid-way: the Round is
// stable while the same owner renews (across the failover), strictly higher
// whenever the role changes hands, and monotone per key over every caller;
// and any failure is an error with the zero Lease (fail closed).
func TestRoundLeaseRoundsAcrossLeaderKill(t *testing.T) {
	c := proccluster.StartTest(t, proccluster.Options{Nodes: 3})
	newOwner := func(name string) *roundlease.Fenced {
		return roundlease.New(client.New(c.Endpoints()), name, roundlease.Options{TTL: 2 * time.Second})
	}
	a, b := newOwner("alice"), newOwner("bob")
	const key = "roles/primary"

	// Stable while alice renews: the keepalive renews every third of the
	// TTL; wait past several TTLs' worth of renewals.
	la := roundOf(t, a, key)
	if la.Round == 0 || la.Owner != "alice" || la.Key != key {
		t.Fatalf("alice's lease %+v", la)
	}
	start := time.Now()
	testutil.Eventually(t, 30*time.Second, func() error {
		l, err := a.Acquire(context.Background(), key)
		if err != nil || l != la {
			t.Fatalf("alice renewing: %+v, %v; want %+v", l, err, la)
		}
		if time.Since(start) < 3*time.Second {
			return errors.New("renewing")
		}
		return nil
	})

	// Fail closed: bob cannot take the role while alice holds it.
	if l, err := b.Acquire(context.Background(), key); err == nil || !errors.Is(err, roundlease.ErrNotHeld) || !errors.Is(err, client.ErrHeld) || l != (roundlease.Lease{}) {
		t.Fatalf("bob while alice holds: %+v, %v; want ErrNotHeld (held) and the zero Lease", l, err)
	}

	// Kill the leader: alice's Round survives the failover (her grant is
	// replicated and her keepalive reaches the new leader), or, if her lease
	// lapsed meanwhile, her new Round is higher. Never lower.
	lead, err := c.Leader(context.Background(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(lead)
	la2 := roundOf(t, a, key)
	if la2.Round < la.Round {
		t.Fatalf("after the leader kill alice's Round went down: %d < %d", la2.Round, la.Round)
	}
	if la2.Round == la.Round {
		t.Logf("alice kept round %d across the failover", la.Round)
	} else {
		t.Logf("alice's lease lapsed in the failover: round %d -> %d", la.Round, la2.Round)
	}

	// The role changes hands, back and forth: each holder's Round is
	// strictly higher than every earlier one.
	rounds := []uint64{la2.Round}
	owners := []*roundlease.Fenced{b, a, b}
	names := map[*roundlease.Fenced]string{a: "alice", b: "bob"}
	prev := a
	var lb roundlease.Lease
	for _, next := range owners {
		if err := prev.Release(context.Background(), key); err != nil {
			t.Fatalf("%s release: %v", names[prev], err)
		}
		l := roundOf(t, next, key)
		if l.Round <= rounds[len(rounds)-1] {
			t.Fatalf("the role went to %s with round %d, not above %d (rounds %v)", names[next], l.Round, rounds[len(rounds)-1], rounds)
		}
		rounds = append(rounds, l.Round)
		prev, lb = next, l
	}

	// bob's grant ends behind his adapter's back (as when his keepalive is
	// cut off): the next holder's Round is higher.
	direct := client.New(c.Endpoints())
	if _, err := direct.Release(context.Background(), client.ReleaseRequest{Key: key, Holder: "bob", Token: fence.Token(lb.Round)}); err != nil {
		t.Fatal(err)
	}
	l := roundOf(t, a, key)
	if l.Round <= rounds[len(rounds)-1] {
		t.Fatalf("after bob stopped, alice got round %d, not above %d", l.Round, rounds[len(rounds)-1])
	}
	// bob's adapter learns its lease is gone (its next renewal is refused)
	// and fails closed.
	testutil.Eventually(t, 10*time.Second, func() error {
		if l, err := b.Acquire(context.Background(), key); err == nil || l != (roundlease.Lease{}) {
			return fmt.Errorf("bob after losing the role: %+v, %v; want an error and the zero Lease", l, err)
		}
		return nil
	})

	// No cluster at all: an error, never a Lease.
	for _, n := range c.Nodes {
		c.Kill(n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if l, err := newOwner("carol").Acquire(ctx, "roles/other"); err == nil || l != (roundlease.Lease{}) {
		t.Fatalf("with every node down: %+v, %v; want an error", l, err)
	}
}
