package cluster

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// A retried request whose grant ended and was replaced gets grant_ended, not
// a second grant, from any leader; every replica holds the same history of
// retired request ids (the log clock is the leaders' append time, carried in
// the entries), also a replica restarted from its snapshot and log.
func TestRequestIDRetryAcrossLeadersAndRestart(t *testing.T) {
	tc := newTestClusterWith(t, 3, func(c *Config) { c.SnapshotThreshold = 4 })
	ctx := context.Background()
	_, lead := tc.leader()
	first, err := lead.Acquire(ctx, AcquireArgs{Key: "k", Holder: "h1", TTL: time.Minute, RequestID: "R"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "k", Holder: "h1", Token: first.Token}); err != nil {
		t.Fatal(err)
	}
	other, err := lead.Acquire(ctx, AcquireArgs{Key: "k", Holder: "h2", TTL: time.Minute, RequestID: "S"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "k", Holder: "h2", Token: other.Token}); err != nil {
		t.Fatal(err)
	}
	retry := func(n *Node, who string) {
		t.Helper()
		g, err := n.Acquire(ctx, AcquireArgs{Key: "k", Holder: "h1", TTL: time.Minute, RequestID: "R"})
		if !errors.Is(err, fsm.ErrGrantEnded) {
			t.Fatalf("retry of R through %s after its grant %v ended and %v was granted: %+v, err %v", who, first.Token, other.Token, g, err)
		}
	}
	retry(lead, "the leader")
	same := func() error {
		var want *fsm.Image
		for _, n := range tc.nodes {
			img := n.fsm.Image()
			if len(img.Retired) != 1 || img.Clock == 0 {
				return fmt.Errorf("%s: clock %d, retired %+v", n.cfg.ID, img.Clock, img.Retired)
			}
			if want == nil {
				want = img
			} else if img.Clock != want.Clock || !reflect.DeepEqual(img.Retired, want.Retired) {
				return fmt.Errorf("%s: clock %d %+v, %s: clock %d %+v", n.cfg.ID, img.Clock, img.Retired, tc.nodes[0].cfg.ID, want.Clock, want.Retired)
			}
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, same)

	// Another leader, then a restarted follower.
	if err := lead.TransferLeadership(""); err != nil {
		t.Fatal(err)
	}
	li, lead := tc.leader()
	retry(lead, "a new leader")
	fi := (li + 1) % len(tc.nodes)
	tc.stop(fi)
	tc.start(fi)
	testutil.Eventually(t, 10*time.Second, same)
}
