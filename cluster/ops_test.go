package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// churn grants and releases keys; it returns the highest token per key.
func churn(t *testing.T, n *Node, keys, rounds int) map[string]fence.Token {
	t.Helper()
	ctx := context.Background()
	high := map[string]fence.Token{}
	for r := 0; r < rounds; r++ {
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("k%d", k)
			g, err := n.Acquire(ctx, AcquireArgs{Key: key, Holder: fmt.Sprintf("h%d", r), TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			high[key] = g.Token
			if _, err := n.Release(ctx, ReleaseArgs{Key: key, Holder: g.Holder, Token: g.Token}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return high
}

func checkAbove(t *testing.T, n *Node, high map[string]fence.Token) {
	t.Helper()
	ctx := context.Background()
	for key, h := range high {
		g, err := n.Acquire(ctx, AcquireArgs{Key: key, Holder: "after-restore", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if g.Token <= h {
			t.Fatalf("key %s: token %d after restore is not above %d issued before", key, g.Token, h)
		}
	}
}

// An in-place restore rewinds every key's counter to the backup, yet every
// new token is above every token issued before, including after the backup.
func TestRestoreInPlace(t *testing.T) {
	for _, store := range []string{StoreBolt, StoreWAL} {
		t.Run(store, func(t *testing.T) { testRestoreInPlace(t, store) })
	}
}

func testRestoreInPlace(t *testing.T, store string) {
	tc := newTestClusterWith(t, 3, func(c *Config) { c.Store = store })
	ctx := context.Background()
	_, lead := tc.leader()
	churn(t, lead, 4, 3)
	held, err := lead.Acquire(ctx, AcquireArgs{Key: "held", Holder: "x", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	backup, meta, err := lead.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Keys != 5 || meta.ClusterID == "" || meta.SHA256 == "" {
		t.Fatalf("meta %+v", meta)
	}
	high := churn(t, lead, 4, 5) // issued after the backup
	res, err := lead.Restore(ctx, backup, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.SameCluster || res.NewFloor <= res.OldFloor || res.Expired != 1 {
		t.Fatalf("restore %+v", res)
	}
	_, lead = tc.leader()
	checkAbove(t, lead, high)
	// A grant live in the backup is restored as expired: the old cluster may
	// have superseded it after the backup.
	if v, err := lead.Verify(ctx, "held", held.Token, ""); err != nil || v.Allow || v.Reason != ReasonExpired {
		t.Fatalf("verify of a grant live at backup time: %+v %v", v, err)
	}
	// Followers got the restored state too.
	testutil.Eventually(t, 10*time.Second, func() error {
		for _, n := range tc.nodes {
			if n.fsm.Floor() != res.NewFloor {
				return fmt.Errorf("%s floor %d", n.cfg.ID, n.fsm.Floor())
			}
		}
		return nil
	})
}

// Restoring into a brand-new cluster, whose terms start again at 1, still
// gives tokens above every token of the old cluster.
func TestRestoreIntoNewCluster(t *testing.T) {
	old := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := old.leader()
	// Raise the old cluster's term with a few elections.
	for i := 0; i < 2; i++ {
		if err := lead.TransferLeadership(""); err != nil {
			t.Fatal(err)
		}
		_, lead = old.leader()
	}
	churn(t, lead, 3, 2)
	backup, _, err := lead.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	high := churn(t, lead, 3, 2)

	fresh := newTestCluster(t, 1)
	_, nl := fresh.leader()
	res, err := nl.Restore(ctx, backup, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.SameCluster || res.Attested < DefaultRestoreMargin {
		t.Fatalf("restore into another cluster: %+v", res)
	}
	_, nl = fresh.leader()
	checkAbove(t, nl, high)
	if _, err := nl.Restore(ctx, []byte("not a backup"), RestoreOptions{}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("garbage restore: %v", err)
	}
	corrupt := append([]byte(nil), backup...)
	corrupt[len(corrupt)/2] ^= 1
	if _, err := nl.Restore(ctx, corrupt, RestoreOptions{}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("corrupt restore: %v", err)
	}
}

func TestReadGrantsReplaysTheAuditTrail(t *testing.T) {
	tc := newTestCluster(t, 1)
	_, lead := tc.leader()
	high := churn(t, lead, 2, 50) // past the snapshot threshold
	dir := tc.cfgs[0].DataDir
	tc.stop(0)
	last := map[string]fence.Token{}
	n := 0
	err := ReadGrants(dir, func(r GrantRecord) error {
		if r.Token <= last[r.Key] {
			return fmt.Errorf("key %s: token %d after %d", r.Key, r.Token, last[r.Key])
		}
		last[r.Key] = r.Token
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, h := range high {
		if last[k] != h {
			t.Fatalf("key %s: last grant read %d, issued %d", k, last[k], h)
		}
	}
	if n < 2 {
		t.Fatalf("%d records", n)
	}
}

func TestTransferLeadershipToNamedNode(t *testing.T) {
	tc := newTestCluster(t, 3)
	li, lead := tc.leader()
	target := tc.cfgs[(li+1)%3].ID
	if err := lead.TransferLeadership(target); err != nil {
		t.Fatal(err)
	}
	_, nl := tc.leader()
	if nl.cfg.ID != target {
		t.Fatalf("leader %s, want %s", nl.cfg.ID, target)
	}
	if err := nl.TransferLeadership("nope"); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("transfer to unknown: %v", err)
	}
}

func TestLockDelayAfterExpiryOnly(t *testing.T) {
	tc := newTestCluster(t, 1)
	ctx := context.Background()
	_, lead := tc.leader()
	const delay = 1500 * time.Millisecond
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "d", Holder: "a", TTL: 200 * time.Millisecond, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() error {
		if k, _ := lead.fsm.Get("d"); k.State != fsm.Expired {
			return errors.New("not expired yet")
		}
		return nil
	})
	_, err = lead.Acquire(ctx, AcquireArgs{Key: "d", Holder: "b", TTL: time.Second})
	var lde *LockDelayError
	if !errors.As(err, &lde) || lde.RetryAfter <= 0 {
		t.Fatalf("acquire inside the lock-delay: %v", err)
	}
	start := time.Now()
	g2, err := lead.Acquire(ctx, AcquireArgs{Key: "d", Holder: "b", TTL: time.Second, Wait: 5 * time.Second})
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("waiting acquire: %+v %v", g2, err)
	}
	if time.Since(start)+lde.RetryAfter < delay/2 {
		t.Fatalf("granted too soon")
	}
	// After a clean release there is no delay.
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "d", Holder: "b", Token: g2.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "d", Holder: "c", TTL: time.Second}); err != nil {
		t.Fatalf("acquire after a release: %v", err)
	}
}

// Membership changes under a running acquire load: add a fourth node, hand
// leadership to it, remove one of the first three. No acknowledged grant is
// lost and each key's tokens strictly increase in grant order.
func TestMembershipChangesUnderLoad(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()

	type ack struct {
		key      string
		tok      fence.Token
		from, to time.Time
	}
	acks := make(chan ack, 100000)
	var live atomic.Pointer[[]*Node] // the workers' view of the running nodes
	setLive := func() {
		var ns []*Node
		for _, n := range tc.nodes {
			if n != nil {
				ns = append(ns, n)
			}
		}
		live.Store(&ns)
	}
	setLive()
	stop := make(chan struct{})
	done := make(chan struct{})
	const workers = 4
	for w := 0; w < workers; w++ {
		go func(w int) {
			defer func() { done <- struct{}{} }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("m%d", i%3)
				from := time.Now()
				var g Grant
				var err error
				for _, n := range *live.Load() { // whichever node leads now
					if n.Ready() {
						g, err = n.Acquire(ctx, AcquireArgs{Key: key, Holder: fmt.Sprintf("w%d", w), TTL: time.Minute, RequestID: fmt.Sprintf("w%d-%d", w, i)})
						if err == nil {
							if !g.Renewed { // a renewal is the same grant again
								acks <- ack{key, g.Token, from, time.Now()}
							}
							_, _ = n.Release(ctx, ReleaseArgs{Key: key, Holder: g.Holder, Token: g.Token})
						}
						break
					}
				}
				time.Sleep(time.Millisecond) // pacing, not synchronization
			}
		}(w)
	}

	// A fourth node joins.
	addr := testutil.FreeAddrs(t, 1)[0]
	cfg := fastConfig(t, "n4", t.TempDir(), addr)
	tc.cfgs = append(tc.cfgs, cfg)
	tc.nodes = append(tc.nodes, nil)
	tc.start(3)
	setLive()
	if err := lead.Join(ctx, "n4", addr, "http-n4"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if tc.nodes[3].fsm.Applied() < lead.fsm.Applied() {
			return errors.New("n4 catching up")
		}
		return nil
	})
	if err := lead.TransferLeadership("n4"); err != nil {
		t.Fatal(err)
	}
	_, lead = tc.leader()
	if lead.cfg.ID != "n4" {
		t.Fatalf("leader %s", lead.cfg.ID)
	}
	if err := lead.Remove(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	n1 := tc.nodes[0]
	tc.nodes[0] = nil
	setLive()
	_ = n1.Close()
	testutil.Eventually(t, 10*time.Second, func() error {
		if v := lead.Voters(); v != 3 {
			return fmt.Errorf("%d voters", v)
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // let the load run on the new configuration
	close(stop)
	for w := 0; w < workers; w++ {
		<-done
	}
	close(acks)

	byKey := map[string][]ack{}
	for a := range acks {
		byKey[a.key] = append(byKey[a.key], a)
	}
	if len(byKey) == 0 {
		t.Fatal("no grant acknowledged")
	}
	for key, as := range byKey {
		seen := map[fence.Token]bool{}
		for _, a := range as {
			if seen[a.tok] {
				t.Fatalf("key %s: token %d granted twice", key, a.tok)
			}
			seen[a.tok] = true
			// Grant order is real-time order: a grant acknowledged before
			// another began has the lower token.
			for _, b := range as {
				if a.to.Before(b.from) && a.tok >= b.tok {
					t.Fatalf("key %s: token %d acknowledged before %d was asked for, but not lower", key, a.tok, b.tok)
				}
			}
		}
		k, ok, err := lead.Key(ctx, key)
		if err != nil || !ok {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.tok > k.Token {
				t.Fatalf("key %s: acknowledged token %d lost (high-water %d)", key, a.tok, k.Token)
			}
		}
	}
}

// The WAL store keeps grants across a full restart like bolt does, and a data
// dir is never opened with the other kind of store (it would start empty).
func TestWALStore(t *testing.T) {
	tc := newTestClusterWith(t, 3, func(c *Config) { c.Store = StoreWAL })
	_, lead := tc.leader()
	high := churn(t, lead, 3, 30) // past the snapshot threshold
	tc.closeAll()
	for i := range tc.nodes {
		tc.start(i)
	}
	_, lead = tc.leader()
	checkAbove(t, lead, high)
	tc.stop(0)
	cfg := tc.cfgs[0]
	cfg.Store = StoreBolt
	if _, err := New(cfg); !errors.Is(err, ErrStoreMismatch) {
		t.Fatalf("opening a wal data dir as bolt: %v", err)
	}
	n := 0
	if err := ReadGrants(cfg.DataDir, func(GrantRecord) error { n++; return nil }); err != nil || n == 0 {
		t.Fatalf("audit trail of a wal node: %d records, %v", n, err)
	}
}
