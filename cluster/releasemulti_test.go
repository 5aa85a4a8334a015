package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenced/fenced/fsm"
)

// A set renewed and released through the cluster: a set naming a grant
// that is not the holder's live one renews none and releases none, and
// the refusal names that key; a good set renews every lease, a lock's and
// a permit's alike, and its release ends every grant in one entry and
// wakes a waiter of one of its keys.
func TestRenewAndReleaseMultiThroughTheCluster(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	gs, err := lead.AcquireMulti(ctx, AcquireMultiArgs{Keys: []string{"k1", "k2"}, Holder: "m", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lead.Acquire(ctx, AcquireArgs{Key: "sem", Holder: "m", TTL: time.Minute, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	set := []fsm.ReleaseKey{{Key: "k1", Token: gs[0].Token}, {Key: "k2", Token: gs[1].Token}, {Key: "sem", Token: p.Token}}
	deadlines := func() []time.Time {
		var out []time.Time
		for _, k := range set {
			d, ok := lead.leases.live(k.Key, k.Token)
			if !ok {
				d, ok = lead.leases.live(permitLease(k.Key, k.Token), k.Token)
			}
			if !ok {
				t.Fatalf("%s has no live lease", k.Key)
			}
			out = append(out, d)
		}
		return out
	}

	before := deadlines()
	bad := append(append([]fsm.ReleaseKey(nil), set[:2]...), fsm.ReleaseKey{Key: "sem", Token: p.Token + 1})
	var ke *fsm.KeyError
	if _, err := lead.RenewMulti(ctx, "m", bad); !errors.As(err, &ke) || ke.Key != "sem" {
		t.Fatalf("a renewal of a set with a stale permit: %v", err)
	}
	if _, err := lead.RenewMulti(ctx, "other", set); !errors.As(err, &ke) || ke.Key != "k1" || !errors.Is(err, fsm.ErrNotHolder) {
		t.Fatalf("a renewal of another holder's set: %v", err)
	}
	for i, d := range deadlines() {
		if !d.Equal(before[i]) {
			t.Fatalf("a refused renewal moved the lease of %s", set[i].Key)
		}
	}
	ls, err := lead.RenewMulti(ctx, "m", set)
	if err != nil || len(ls) != 3 {
		t.Fatalf("renewal of the set: %v %+v", err, ls)
	}
	for i, l := range ls {
		if l.Key.Key != set[i].Key || l.Key.Token != set[i].Token || l.Deadline.Before(before[i]) {
			t.Fatalf("renewed %d: %+v (was due %v)", i, l, before[i])
		}
	}

	waited := make(chan error, 1)
	go func() {
		_, err := lead.Acquire(ctx, AcquireArgs{Key: "k2", Holder: "w", TTL: time.Minute, Wait: 30 * time.Second})
		waited <- err
	}()
	if _, err := lead.ReleaseMulti(ctx, ReleaseMultiArgs{Keys: bad, Holder: "m", RequestID: "r0"}); !errors.As(err, &ke) || ke.Key != "sem" || !errors.Is(err, fsm.ErrStaleToken) {
		t.Fatalf("a release of a set with a stale permit: %v", err)
	}
	if k, _ := lead.FSM().Get("k1"); k.State != fsm.Held {
		t.Fatalf("a refused set released k1: %+v", k)
	}
	ended, err := lead.ReleaseMulti(ctx, ReleaseMultiArgs{Keys: set, Holder: "m", RequestID: "r1"})
	if err != nil || len(ended) != 3 {
		t.Fatalf("release of the set: %v %+v", err, ended)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the waiter of k2: %v", err)
	}
	if _, ps := lead.FSM().Permits("sem"); len(ps) != 0 {
		t.Fatalf("the permit outlived its set's release: %+v", ps)
	}
	again, err := lead.ReleaseMulti(ctx, ReleaseMultiArgs{Keys: set, Holder: "m", RequestID: "r1"})
	if err != nil || again[1].Token != gs[1].Token {
		t.Fatalf("a repeat: %v %+v", err, again)
	}
	if k, _ := lead.FSM().Get("k2"); k.State != fsm.Held || k.Holder != "w" {
		t.Fatalf("a repeat ended the waiter's grant: %+v", k)
	}
}
