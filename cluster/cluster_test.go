package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// testCluster is a cluster of in-process nodes on real TCP loopback sockets.
type testCluster struct {
	t     testing.TB
	cfgs  []Config
	nodes []*Node
}

// fastConfig is a node for tests: timeouts short enough for quick failovers,
// long enough that a loaded machine running the race detector does not lose
// its leader to a late heartbeat.
func fastConfig(_ testing.TB, id, dir, addr string) Config {
	level := hclog.Warn
	if os.Getenv("FENCED_TEST_LOG") != "" {
		level = hclog.Debug
	}
	return Config{
		ID: id, DataDir: dir, RaftBind: addr, HTTPAdvertise: "http-" + id,
		HeartbeatTimeout: 800 * time.Millisecond, ElectionTimeout: 800 * time.Millisecond,
		LeaderLeaseTimeout: 400 * time.Millisecond, SnapshotThreshold: 64, TrailingLogs: 16,
		SnapshotInterval: 200 * time.Millisecond,
		Logger:           hclog.New(&hclog.LoggerOptions{Name: id, Level: level}),
	}
}

func newTestCluster(t testing.TB, size int) *testCluster {
	t.Helper()
	return newTestClusterWith(t, size, func(*Config) {})
}

func (tc *testCluster) start(i int) {
	tc.t.Helper()
	n, err := New(tc.cfgs[i])
	if err != nil {
		tc.t.Fatalf("start %s: %v", tc.cfgs[i].ID, err)
	}
	tc.nodes[i] = n
}

// closeTimeout bounds a node's Close in tests: a close that hangs is a bug to
// report by name, not a test binary that runs into its global timeout.
const closeTimeout = time.Minute

func (tc *testCluster) stop(i int) {
	n := tc.nodes[i]
	if n == nil {
		return
	}
	tc.nodes[i] = nil
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.Close()
	}()
	select {
	case <-done:
	case <-time.After(closeTimeout):
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		tc.t.Errorf("node %s did not close within %v; goroutines:\n%s", n.cfg.ID, closeTimeout, buf)
	}
}

func (tc *testCluster) closeAll() {
	for i := range tc.nodes {
		tc.stop(i)
	}
}

// leader waits for exactly one ready leader among the running nodes.
func (tc *testCluster) leader() (int, *Node) {
	tc.t.Helper()
	idx := -1
	testutil.Eventually(tc.t, 15*time.Second, func() error {
		idx = -1
		for i, n := range tc.nodes {
			if n != nil && n.Ready() {
				if idx >= 0 {
					return errors.New("two ready leaders")
				}
				idx = i
			}
		}
		if idx < 0 {
			return errors.New("no ready leader")
		}
		return nil
	})
	return idx, tc.nodes[idx]
}

func (tc *testCluster) follower() *Node {
	li, _ := tc.leader()
	for i, n := range tc.nodes {
		if i != li && n != nil {
			return n
		}
	}
	tc.t.Fatal("no follower")
	return nil
}

func TestClusterFailoverRaisesEpoch(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	li, lead := tc.leader()
	g1, err := lead.Acquire(ctx, AcquireArgs{Key: "db", Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if g1.Token.Epoch() != lead.r().CurrentTerm() || g1.Token.Seq() != 1 {
		t.Fatalf("first grant %d (epoch %d seq %d), term %d", g1.Token, g1.Token.Epoch(), g1.Token.Seq(), lead.r().CurrentTerm())
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "db", Holder: "a", Token: g1.Token}); err != nil {
		t.Fatal(err)
	}

	tc.stop(li)
	_, lead2 := tc.leader()
	g2, err := lead2.Acquire(ctx, AcquireArgs{Key: "db", Holder: "b", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token <= g1.Token || g2.Token.Epoch() != lead2.r().CurrentTerm() || g2.Token.Epoch() <= g1.Token.Epoch() {
		t.Fatalf("after failover: token %d (epoch %d), before %d (epoch %d), term %d", g2.Token, g2.Token.Epoch(), g1.Token, g1.Token.Epoch(), lead2.r().CurrentTerm())
	}

	// The superseded token is refused; a follower never answers from its
	// own state.
	v, err := lead2.Verify(ctx, "db", g1.Token, "")
	if err != nil || v.Allow || v.Reason != ReasonSuperseded {
		t.Fatalf("verify of superseded token: %+v %v", v, err)
	}
	if v, err := lead2.Verify(ctx, "db", g2.Token, "b"); err != nil || !v.Allow {
		t.Fatalf("verify of current token: %+v %v", v, err)
	}
	if v, err := tc.follower().Verify(ctx, "db", g2.Token, ""); !errors.Is(err, ErrNotLeader) || v.Allow || v.Reason != ReasonUnavailable {
		t.Fatalf("follower verify: %+v %v", v, err)
	}
}

func TestClusterGrantSurvivesFullRestart(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	var last Grant
	for i := 0; i < 100; i++ { // past the snapshot threshold: restart goes through a snapshot
		g, err := lead.Acquire(ctx, AcquireArgs{Key: fmt.Sprintf("k%d", i%10), Holder: fmt.Sprintf("h%d", i), TTL: time.Minute})
		if err != nil && !errors.Is(err, fsm.ErrHeld) {
			t.Fatal(err)
		}
		if err == nil {
			last = g
			if _, err := lead.Release(ctx, ReleaseArgs{Key: g.Key, Holder: g.Holder, Token: g.Token}); err != nil {
				t.Fatal(err)
			}
		}
	}
	held, err := lead.Acquire(ctx, AcquireArgs{Key: "held", Holder: "keeper", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tc.closeAll()
	for i := range tc.nodes {
		tc.start(i)
	}
	_, lead = tc.leader()
	k, ok, err := lead.Key(ctx, "held")
	if err != nil || !ok || k.Token != held.Token || k.State != fsm.Held || k.Deadline.IsZero() {
		t.Fatalf("held grant after restart: %+v %v %v", k, ok, err)
	}
	if v, err := lead.Verify(ctx, "held", held.Token, "keeper"); err != nil || !v.Allow {
		t.Fatalf("held grant not allowed after restart: %+v %v", v, err)
	}
	g, err := lead.Acquire(ctx, AcquireArgs{Key: last.Key, Holder: "new", TTL: time.Minute})
	if err != nil || g.Token <= last.Token {
		t.Fatalf("grant after restart %d not above %d: %v", g.Token, last.Token, err)
	}
}

func TestLeaseExpiresAndIsReArmedOnFailover(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	li, lead := tc.leader()
	const ttl = 2 * time.Second
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "job", Holder: "a", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	tc.stop(li)
	_, lead2 := tc.leader()
	// The new leader re-armed the lease when it applied its takeover, some
	// time before it was found ready (how long depends on the machine's
	// load): a full TTL is counted from that takeover.
	lead2.takeovers.mu.Lock()
	took := lead2.takeovers.recs[len(lead2.takeovers.recs)-1].at
	lead2.takeovers.mu.Unlock()
	// Re-armed for a full TTL: still live right after the election.
	v, err := lead2.Verify(ctx, "job", g.Token, "a")
	if err != nil || !v.Allow || v.Deadline.Before(took.Add(ttl-time.Millisecond)) {
		t.Fatalf("lease not re-armed for a full TTL after the takeover at %v: %+v %v", took, v, err)
	}
	// Another holder waiting gets the key once the lease expires.
	g2, err := lead2.Acquire(ctx, AcquireArgs{Key: "job", Holder: "b", TTL: ttl, Wait: 10 * time.Second})
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("waiting acquire: %+v %v", g2, err)
	}
	if ended := time.Now(); ended.Before(v.Deadline) {
		t.Fatalf("lease ended early: %v before the deadline the new leader gave", v.Deadline.Sub(ended))
	}
	if v, _ := lead2.Verify(ctx, "job", g.Token, ""); v.Allow || v.Reason != ReasonSuperseded {
		t.Fatalf("old token: %+v", v)
	}
}

func TestRenewAndKeepalive(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "r", Holder: "a", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "r2", Holder: "a", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if _, _, err := lead.Renew(ctx, "r", "a", g.Token); err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
		ls, err := lead.Keepalive(ctx, "a", nil)
		if err != nil || len(ls) != 2 {
			t.Fatalf("keepalive: %v %v", ls, err)
		}
		time.Sleep(400 * time.Millisecond) // lease time passing is the point here
	}
	if _, _, err := lead.Renew(ctx, "r", "b", g.Token); !errors.Is(err, fsm.ErrNotHolder) {
		t.Fatalf("renew by other holder: %v", err)
	}
	if _, _, err := lead.Renew(ctx, "r", "a", g.Token+1); !errors.Is(err, fsm.ErrStaleToken) {
		t.Fatalf("renew of wrong token: %v", err)
	}
	if _, _, err := tc.follower().Renew(ctx, "r", "a", g.Token); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("renew on follower: %v", err)
	}
}

func TestWaitersServedInOrder(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "q", Holder: "first", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	for _, h := range []string{"w1", "w2", "w3"} {
		go func(h string) {
			g, err := lead.Acquire(ctx, AcquireArgs{Key: "q", Holder: h, TTL: time.Minute, Wait: 20 * time.Second})
			if err != nil {
				order <- "error:" + err.Error()
				return
			}
			order <- h
			_, _ = lead.Release(ctx, ReleaseArgs{Key: "q", Holder: h, Token: g.Token})
		}(h)
		testutil.Eventually(t, 5*time.Second, func() error {
			if lead.waiters.count() < int(h[1]-'0') {
				return errors.New("not queued yet")
			}
			return nil
		})
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "q", Holder: "barger", TTL: time.Minute}); !errors.Is(err, fsm.ErrHeld) {
		t.Fatalf("a non-waiting newcomer jumped the queue: %v", err)
	}
	if _, err := lead.Release(ctx, ReleaseArgs{Key: "q", Holder: "first", Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"w1", "w2", "w3"} {
		if got := <-order; got != want {
			t.Fatalf("served %s, want %s", got, want)
		}
	}
}

func TestSeqExhaustionStartsNewTerm(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d-nodes", size), func(t *testing.T) {
			tc := newTestClusterWith(t, size, func(c *Config) { c.MaxSeq = 2 })
			ctx := context.Background()
			_, lead := tc.leader()
			var last Grant
			for i := 0; i < 2; i++ {
				g, err := lead.Acquire(ctx, AcquireArgs{Key: "x", Holder: "h", TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := lead.Release(ctx, ReleaseArgs{Key: "x", Holder: "h", Token: g.Token}); err != nil {
					t.Fatal(err)
				}
				last = g
			}
			if _, err := lead.Acquire(ctx, AcquireArgs{Key: "x", Holder: "h", TTL: time.Minute}); !errors.Is(err, fsm.ErrSeqExhausted) {
				t.Fatalf("third grant in a term: %v", err)
			}
			testutil.Eventually(t, 20*time.Second, func() error {
				_, lead := tc.leader()
				g, err := lead.Acquire(ctx, AcquireArgs{Key: "x", Holder: "h", TTL: time.Minute})
				if err != nil {
					return err
				}
				if g.Token <= last.Token || g.Token.Epoch() <= last.Token.Epoch() || g.Token.Seq() != 1 {
					return fmt.Errorf("grant %d after %d", g.Token, last.Token)
				}
				return nil
			})
		})
	}
}

func newTestClusterWith(t testing.TB, size int, mod func(*Config)) *testCluster {
	addrs := testutil.FreeAddrs(t, size)
	var peers []Peer
	for i, a := range addrs {
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), Addr: a})
	}
	tc := &testCluster{t: t}
	base := t.TempDir()
	for i, p := range peers {
		cfg := fastConfig(t, p.ID, filepath.Join(base, p.ID), p.Addr)
		cfg.Peers = peers
		mod(&cfg)
		tc.cfgs = append(tc.cfgs, cfg)
		tc.nodes = append(tc.nodes, nil)
		tc.start(i)
	}
	t.Cleanup(tc.closeAll)
	return tc
}

// A leader re-elected after a restart, already known to the cluster, commits
// no command of its own but the barrier; reads must still not wait forever
// for an applied index that raft's own entries never move.
func TestReadsAfterRestartOfKnownLeader(t *testing.T) {
	tc := newTestCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, lead := tc.leader()
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "k", Holder: "h", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		tc.stop(0)
		tc.start(0)
		_, lead = tc.leader()
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		v, err := lead.Verify(rctx, "k", g.Token, "h")
		rcancel()
		if err != nil || !v.Allow {
			t.Fatalf("restart %d: verify = %+v, %v", i, v, err)
		}
	}
}

// An acquire of a key another holder has is refused without a log entry, with
// or without waiting, and the holder's own retry still goes through the log.
func TestHeldRefusalWritesNoEntry(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	_, lead := tc.leader()
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "h", Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before := lead.Status().LastIndex
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "h", Holder: "b", TTL: time.Minute}); !errors.Is(err, fsm.ErrHeld) {
		t.Fatalf("acquire of a held key: %v", err)
	}
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "h", Holder: "b", TTL: time.Minute, Wait: 100 * time.Millisecond}); !errors.Is(err, fsm.ErrHeld) {
		t.Fatalf("waiting acquire of a held key: %v", err)
	}
	if after := lead.Status().LastIndex; after != before {
		t.Fatalf("refusals wrote %d log entries", after-before)
	}
	again, err := lead.Acquire(ctx, AcquireArgs{Key: "h", Holder: "a", TTL: time.Minute})
	if err != nil || again.Token != g.Token || !again.Renewed {
		t.Fatalf("holder's retry: %+v %v", again, err)
	}
	if lead.Status().LastIndex == before {
		t.Fatal("the holder's retry did not go through the log")
	}
}
