package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// One client cycling one key keeps one entry in the leader's list of ended
// keys (its latest end), not one per end.
func TestReclaimerOneEntryPerKey(t *testing.T) {
	var rc reclaimer
	rc.activate(1)
	for i := 1; i <= 10_000; i++ {
		rc.ended(fsm.KeyState{Key: "cycled", Holder: "c", Token: fence.Token(i), State: fsm.Released})
	}
	if n := rc.pending(); n != 1 {
		t.Fatalf("one key ended 10,000 times: %d entries", n)
	}
	due := rc.takeDue(1, time.Now())
	if len(due) != 1 || due[0].token != 10_000 {
		t.Fatalf("due: %+v, want the latest end only", due)
	}
}

// The same through a node: acquire and release one key many times.
func TestReclaimQueueStaysAtOneForACycledKey(t *testing.T) {
	tc := newTestClusterWith(t, 1, func(c *Config) { c.KeyRetention = time.Hour })
	_, n := tc.leader()
	ctx := context.Background()
	for i := 0; i < 300; i++ {
		g, err := n.Acquire(ctx, AcquireArgs{Key: "cycled", Holder: "c", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Release(ctx, ReleaseArgs{Key: "cycled", Holder: "c", Token: g.Token}); err != nil {
			t.Fatal(err)
		}
	}
	if p := n.reclaim.pending(); p != 1 {
		t.Fatalf("one key cycled 300 times: %d entries queued for reclamation", p)
	}
}
