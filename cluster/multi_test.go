package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// Multi-key acquires through a three-node cluster: all or none, refused
// naming the held key; with wait, overlapping sets in opposite orders are
// served first come, first served, without a partial hold or a deadlock.
func TestAcquireMultiThroughTheCluster(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	x, err := lead.Acquire(ctx, AcquireArgs{Key: "k2", Holder: "x", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var he *HeldError
	if _, err := lead.AcquireMulti(ctx, AcquireMultiArgs{Keys: []string{"k1", "k2"}, Holder: "m", TTL: time.Minute}); !errors.As(err, &he) || he.Key != "k2" {
		t.Fatalf("a set with a held key: %v", err)
	}
	if _, ok := lead.FSM().Get("k1"); ok {
		t.Fatal("a refused set granted a key")
	}
	got := make(chan []Grant, 2)
	wait := func(holder string, keys ...string) {
		gs, err := lead.AcquireMulti(ctx, AcquireMultiArgs{Keys: keys, Holder: holder, TTL: time.Minute, Wait: 30 * time.Second, RequestID: "rq-" + holder})
		if err != nil {
			t.Errorf("%s: %v", holder, err)
		}
		got <- gs
	}
	go wait("m1", "k1", "k2")
	testutil.Eventually(t, 5*time.Second, func() error {
		if lead.waiters.count() < 2 {
			return errors.New("m1 does not wait yet")
		}
		return nil
	})
	go wait("m2", "k2", "k1")
	testutil.Eventually(t, 5*time.Second, func() error {
		if lead.waiters.count() < 4 {
			return errors.New("m2 does not wait yet")
		}
		return nil
	})
	if k, ok := lead.FSM().Get("k1"); ok && k.State == fsm.Held {
		t.Fatalf("a waiting set holds a key: %+v", k)
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "k2", Holder: "x", Token: x.Token}); err != nil {
		t.Fatal(err)
	}
	m1 := <-got
	if len(m1) != 2 || m1[0].Holder != "m1" || m1[1].Token <= x.Token {
		t.Fatalf("first set: %+v", m1)
	}
	for _, g := range m1 {
		if v, err := lead.Verify(ctx, g.Key, g.Token, "m1"); err != nil || !v.Allow {
			t.Fatalf("verify %s: %+v %v", g.Key, v, err)
		}
		if _, err := lead.Release(ctx, ReleaseArgs{Key: g.Key, Holder: "m1", Token: g.Token}); err != nil {
			t.Fatal(err)
		}
	}
	m2 := <-got
	if len(m2) != 2 || m2[0].Holder != "m2" || m2[0].Key != "k2" || m2[0].Token <= m1[1].Token {
		t.Fatalf("second set: %+v", m2)
	}
	if again, err := lead.AcquireMulti(ctx, AcquireMultiArgs{Keys: []string{"k2", "k1"}, Holder: "m2", TTL: time.Minute, RequestID: "rq-m2"}); err != nil || again[0].Token != m2[0].Token || !again[0].Renewed {
		t.Fatalf("a retry of m2: %+v %v", again, err)
	}
}
