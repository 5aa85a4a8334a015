package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
)

// TestProclaimNeverGrantsAfresh: a leader forced out by an operator (its
// keepalive has not noticed yet) proclaims a new value. Proclaim may only
// update its own live grant: it answers ErrNotLeading and the key never
// goes to the candidate again (it used to acquire afresh and release, so
// observers saw it lead again, and a failed release left an orphan grant
// held for a TTL).
func TestProclaimNeverGrantsAfresh(t *testing.T) {
	n := startCluster(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := client.New([]string{n.url})
	e := c.NewElection("svc/leader", "n1", client.ElectionOptions{TTL: time.Minute, Value: "http://n1"})
	if err := e.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	term := e.Token()
	ch := c.Watch(ctx, client.WatchOptions{Key: "svc/leader"})
	collect(t, ch, 10*time.Second, func(evs []client.WatchEvent) bool { return hasSync(evs) })
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "svc/leader", Force: true, Token: term}); err != nil {
		t.Fatal(err)
	}
	if err := e.Proclaim(ctx, "http://n1:2"); !errors.Is(err, client.ErrNotLeading) {
		t.Fatalf("proclaim after the leadership was forced out: %v, want ErrNotLeading", err)
	}
	// A change after the proclaim marks the end of what it could have done.
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "svc/leader", Holder: "marker", TTL: "1m"}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range changes(collect(t, ch, 10*time.Second, func(evs []client.WatchEvent) bool {
		for _, ev := range evs {
			if ev.Holder == "marker" {
				return true
			}
		}
		return false
	})) {
		if ev.Type == client.WatchGranted && ev.Holder == "n1" {
			t.Fatalf("the key went to the candidate again after its leadership ended: %+v", ev)
		}
	}
}
