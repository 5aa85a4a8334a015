package cluster

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// Ended keys are reclaimed on every replica once the retention passed, also
// after a change of leader; a held key and a key under lock-delay are kept;
// a reclaimed key's next grant is higher than any it had, and a retry of its
// last request id is still refused.
func TestReclaimEndedKeys(t *testing.T) {
	tc := newTestClusterWith(t, 3, func(c *Config) { c.KeyRetention = time.Second; c.SnapshotThreshold = 16 })
	ctx := context.Background()
	_, lead := tc.leader()
	last := map[string]fence.Token{}
	for i := 0; i < 40; i++ {
		key := fmt.Sprintf("job-%d", i)
		g, err := lead.Acquire(ctx, AcquireArgs{Key: key, Holder: "h", TTL: time.Minute, RequestID: "r-" + key})
		if err != nil {
			t.Fatal(err)
		}
		last[key] = g.Token
		if _, err := lead.Release(ctx, ReleaseArgs{Key: key, Holder: "h", Token: g.Token}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "held", Holder: "h", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "delayed", Holder: "h", TTL: 50 * time.Millisecond, LockDelay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	onlyLive := func() error {
		for _, n := range tc.nodes {
			if l := n.fsm.Len(); l != 2 {
				return fmt.Errorf("%s holds %d keys", n.cfg.ID, l)
			}
		}
		return nil
	}
	testutil.Eventually(t, 30*time.Second, onlyLive)
	for _, k := range []string{"held", "delayed"} {
		if _, ok := lead.fsm.Get(k); !ok {
			t.Fatalf("%s was reclaimed", k)
		}
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "job-0", Holder: "h", TTL: time.Minute, RequestID: "r-job-0"}); !errors.Is(err, fsm.ErrGrantEnded) {
		t.Fatalf("retry of a reclaimed key's request: %v", err)
	}

	// A new leader reclaims what ends under it, too.
	if err := lead.TransferLeadership(""); err != nil {
		t.Fatal(err)
	}
	_, lead = tc.leader()
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "job-1", Holder: "h2", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if g.Token <= last["job-1"] {
		t.Fatalf("grant after reclamation %v, before %v", g.Token, last["job-1"])
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "job-1", Holder: "h2", Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, onlyLive)
	same := func() error {
		want := tc.nodes[0].fsm.Image()
		for _, n := range tc.nodes[1:] {
			img := n.fsm.Image()
			if !reflect.DeepEqual(sortedKeys(img), sortedKeys(want)) || img.Floor != want.Floor || !reflect.DeepEqual(img.Retired, want.Retired) {
				return fmt.Errorf("%s differs from %s", n.cfg.ID, tc.nodes[0].cfg.ID)
			}
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, same)
}

// The leader never proposes a key someone waits for, nor one under a
// lock-delay; it drops a key granted again since it ended.
func TestReclaimableSkipsWaitersAndLockDelay(t *testing.T) {
	tc := newTestCluster(t, 1)
	ctx := context.Background()
	_, n := tc.leader()
	end := func(key string, delay time.Duration) endedKey {
		g, err := n.Acquire(ctx, AcquireArgs{Key: key, Holder: "h", TTL: 20 * time.Millisecond, LockDelay: delay})
		if err != nil {
			t.Fatal(err)
		}
		if delay == 0 {
			if _, err := n.Release(ctx, ReleaseArgs{Key: key, Holder: "h", Token: g.Token}); err != nil {
				t.Fatal(err)
			}
		}
		testutil.Eventually(t, 10*time.Second, func() error {
			if k, _ := n.fsm.Get(key); k.State == fsm.Held {
				return errors.New("still held")
			}
			return nil
		})
		return endedKey{key: key, token: g.Token}
	}
	free, waited, delayed, again := end("free", 0), end("waited", 0), end("delayed", time.Hour), end("again", 0)
	w := n.waiters.join(AcquireArgs{Key: "waited", Holder: "w"})
	defer n.waiters.leave("waited", w)
	if _, err := n.Acquire(ctx, AcquireArgs{Key: "again", Holder: "h2", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	cands, kept, gone := n.reclaimable([]endedKey{free, waited, delayed, again})
	if len(cands) != 1 || cands[0].key != "free" || len(kept) != 2 || kept[0].key != "waited" || kept[1].key != "delayed" ||
		len(gone) != 1 || gone[0].key != "again" {
		t.Fatalf("candidates %+v, kept back %+v, gone %+v", cands, kept, gone)
	}
}

// Batches are bounded by count and by bytes, and never empty.
func TestReclaimBatchBounds(t *testing.T) {
	many := make([]endedKey, 3*fsm.MaxReclaimBatch)
	for i := range many {
		many[i] = endedKey{key: "k"}
	}
	if b := nextReclaimBatch(many); len(b) != fsm.MaxReclaimBatch {
		t.Fatalf("batch of %d keys", len(b))
	}
	long := make([]endedKey, 1000)
	for i := range long {
		long[i] = endedKey{key: string(make([]byte, 256))}
	}
	b := nextReclaimBatch(long)
	if len(b) == 0 || len(b)*266 > maxReclaimBytes+266 {
		t.Fatalf("batch of %d long keys", len(b))
	}
}

func sortedKeys(img *fsm.Image) []fsm.KeyState {
	sort.Slice(img.Keys, func(i, j int) bool { return img.Keys[i].Key < img.Keys[j].Key })
	return img.Keys
}

// Backups taken before and after a key was reclaimed restore, and every
// grant after the restore is higher than every grant the key ever had.
func TestReclaimBackupRestore(t *testing.T) {
	tc := newTestClusterWith(t, 1, func(c *Config) { c.KeyRetention = time.Second })
	ctx := context.Background()
	_, n := tc.leader()
	cycle := func(key string) fence.Token {
		t.Helper()
		g, err := n.Acquire(ctx, AcquireArgs{Key: key, Holder: "h", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Release(ctx, ReleaseArgs{Key: key, Holder: "h", Token: g.Token}); err != nil {
			t.Fatal(err)
		}
		return g.Token
	}
	gone := func(key string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, func() error {
			if _, ok := n.fsm.Get(key); ok {
				return fmt.Errorf("%s not reclaimed yet", key)
			}
			return nil
		})
	}
	if _, err := n.Acquire(ctx, AcquireArgs{Key: "held", Holder: "h", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	first := cycle("a")
	before, _, err := n.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone("a")
	highest := cycle("a")
	if highest <= first {
		t.Fatalf("grant after reclamation %v, before %v", highest, first)
	}
	gone("a")
	after, _, err := n.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"before": before, "after": after} {
		if _, err := n.Restore(ctx, b, RestoreOptions{}); err != nil {
			t.Fatalf("restore of the backup %s the reclamation: %v", name, err)
		}
		_, n = tc.leader()
		g := cycle("a")
		if g <= highest {
			t.Fatalf("after restoring the backup %s the reclamation: grant %v, highest before %v", name, g, highest)
		}
		highest = g
	}
}

// A new leader lists the keys that ended before its takeover at its first
// scan (those still ended when it lists them), keeps the ends recorded
// since, and nothing is due before the retention passed from the moment it
// learned of them. Due keys stay listed until forgotten.
func TestReclaimerScanAndDue(t *testing.T) {
	var rc reclaimer
	rc.ended(fsm.KeyState{Key: "before-activation", Token: 1}) // not leading: ignored
	rc.activate(7)
	rc.ended(fsm.KeyState{Key: "since", Holder: "a/1", Token: 2})
	state := map[string]fsm.KeyState{
		"inherited": {Key: "inherited", Holder: "b/1", Token: 3, State: fsm.Expired},
		"regranted": {Key: "regranted", Holder: "b/2", Token: 5, State: fsm.Held},
	}
	get := func(k string) (fsm.KeyState, bool) { ks, ok := state[k]; return ks, ok }
	rc.scan(7, func() []fsm.ReclaimKey {
		return []fsm.ReclaimKey{{Key: "inherited", Token: 3}, {Key: "regranted", Token: 4}, {Key: "since", Token: 1}}
	}, get)
	rc.scan(7, func() []fsm.ReclaimKey { t.Fatal("scanned twice"); return nil }, get)
	if due := rc.takeDue(7, time.Now().Add(-time.Hour)); len(due) != 0 {
		t.Fatalf("due before the retention: %+v", due)
	}
	if due := rc.takeDue(8, time.Now()); due != nil {
		t.Fatalf("another generation took %+v", due)
	}
	due := rc.takeDue(7, time.Now())
	if len(due) != 2 || due[0].key != "since" || due[0].token != 2 || due[1].key != "inherited" {
		t.Fatalf("due: %+v", due)
	}
	if rc.endedBy("a") != 1 || rc.endedBy("b") != 1 {
		t.Fatalf("per identity: a %d, b %d", rc.endedBy("a"), rc.endedBy("b"))
	}
	rc.forget(7, due[1:])
	if again := rc.takeDue(7, time.Now()); len(again) != 1 || again[0].key != "since" {
		t.Fatalf("after forgetting one: %+v", again)
	}
	rc.granted(fsm.KeyState{Key: "since", Holder: "a/1", Token: 6})
	if rc.pending() != 0 || rc.endedBy("a") != 0 {
		t.Fatalf("a key granted again stays listed: %d", rc.pending())
	}
	rc.deactivate()
	rc.ended(fsm.KeyState{Key: "after", Token: 4})
	if due := rc.takeDue(0, time.Now()); len(due) != 0 {
		t.Fatalf("inactive reclaimer holds %+v", due)
	}
}
