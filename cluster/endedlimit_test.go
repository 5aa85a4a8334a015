package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenced/fenced/internal/testutil"
)

// An identity that keeps acquiring new key names is refused once it has
// as many ended keys as it may; it may still take its ended keys again,
// and other identities are not held back.
func TestEndedKeysCountAgainstTheirIdentity(t *testing.T) {
	const limit = 5
	tc := newTestClusterWith(t, 1, func(c *Config) {
		c.KeyRetention = time.Hour
		c.Limits.MaxEndedKeysPerIdentity = limit
	})
	_, n := tc.leader()
	ctx := context.Background()
	cycle := func(key, holder string) error {
		g, err := n.Acquire(ctx, AcquireArgs{Key: key, Holder: holder, TTL: time.Minute, Value: "v"})
		if err != nil {
			return err
		}
		_, err = n.Release(ctx, ReleaseArgs{Key: key, Holder: holder, Token: g.Token})
		return err
	}
	for i := 0; i < limit; i++ {
		if err := cycle(fmt.Sprintf("new/%d", i), fmt.Sprintf("team-a/w%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if got := n.reclaim.endedBy("team-a"); got != limit {
			return fmt.Errorf("team-a has %d ended keys listed", got)
		}
		return nil
	})
	err := cycle("new/next", "team-a/other")
	var le *LimitError
	if !errors.Is(err, ErrTooManyEndedKeys) || !errors.As(err, &le) || le.Limit != limit {
		t.Fatalf("a new key over the limit: %v", err)
	}
	if _, ok := n.fsm.Get("new/next"); ok {
		t.Fatal("the refused key was granted")
	}
	if err := cycle("new/0", "team-a/w9"); err != nil {
		t.Fatalf("an ended key of its own, taken again: %v", err)
	}
	if err := cycle("new/b", "team-b/w1"); err != nil {
		t.Fatalf("another identity: %v", err)
	}
	// With authentication the client identity is what counts.
	if _, err := n.Acquire(ctx, AcquireArgs{Key: "new/c", Holder: "elsewhere/h", Owner: "team-a", TTL: time.Minute}); !errors.Is(err, ErrTooManyEndedKeys) {
		t.Fatalf("acquire on behalf of team-a: %v", err)
	}
}
