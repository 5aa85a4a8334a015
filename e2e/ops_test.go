package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// The operations an operator runs on a live cluster, through the real fenced
// and fencectl binaries: membership changes, leadership transfer, leaving on
// SIGTERM, backup and restore, a rolling restart under load, and the audit
// trail of a stopped node's log.

// startOpsCluster starts a cluster of real processes with extra flags and
// waits for its leader.
func startOpsCluster(t *testing.T, nodes int, extra ...string) *proccluster.Cluster {
	t.Helper()
	return proccluster.StartTest(t, proccluster.Options{Nodes: nodes, ExtraArgs: extra})
}

// fencectl runs the CLI against endpoints, with an environment cleaned of
// FENCE_* variables and stdin from /dev/null (not a terminal).
func fencectl(t *testing.T, endpoints []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	_, bin, err := proccluster.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	if endpoints != nil {
		args = append([]string{"--endpoints", strings.Join(endpoints, ",")}, args...)
	}
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("fencectl %q: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// fencectlJSON runs the CLI with -o json, requires exit 0 and decodes stdout.
func fencectlJSON(t *testing.T, endpoints []string, v any, args ...string) {
	t.Helper()
	code, stdout, stderr := fencectl(t, endpoints, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("fencectl %q: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		t.Fatalf("fencectl %q: %v\n%s", args, err, stdout)
	}
}

// membersView is what fencectl members list -o json and status -o json say.
type membersView struct {
	Leader  string `json:"leader"`
	Members []struct {
		ID     string         `json:"id"`
		Voter  bool           `json:"voter"`
		Health string         `json:"health"`
		Status *client.Status `json:"status"`
	} `json:"members"`
}

// awaitVoters waits until, asked through endpoints, the voters are exactly
// want, each of them ready, with a leader among them.
func awaitVoters(t *testing.T, endpoints []string, want ...string) membersView {
	t.Helper()
	sort.Strings(want)
	var v membersView
	testutil.Eventually(t, 30*time.Second, func() error {
		code, stdout, stderr := fencectl(t, endpoints, "members", "list", "-o", "json")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, stderr)
		}
		v = membersView{}
		if err := json.Unmarshal([]byte(stdout), &v); err != nil {
			return err
		}
		var voters []string
		for _, m := range v.Members {
			if m.Voter {
				voters = append(voters, m.ID)
				if m.Health != "ready" {
					return fmt.Errorf("%s is %s", m.ID, m.Health)
				}
			}
		}
		sort.Strings(voters)
		if strings.Join(voters, ",") != strings.Join(want, ",") || v.Leader == "" {
			return fmt.Errorf("voters %v leader %q, want voters %v", voters, v.Leader, want)
		}
		return nil
	})
	return v
}

func httpAddrs(nodes ...*proccluster.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.HTTPAddr)
	}
	return out
}

// ackedGrant is one grant a client was told of, with when it asked and when
// it heard: the real-time interval of the acquire.
type ackedGrant struct {
	key        string
	token      fence.Token
	start, end time.Time
}

// workload runs acquire/release loops from a few goroutines and records
// every acknowledged grant.
type workload struct {
	cl   *client.Client
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	acked   []ackedGrant
	unknown int
	errs    map[string]int
}

// startWorkload starts workers; worker w works on keyOf(w), with acquires
// that wait up to wait for a held key (0: no wait; a held key is tried again
// at the next tick).
func startWorkload(t *testing.T, cl *client.Client, workers int, keyOf func(w int) string, wait time.Duration) *workload {
	t.Helper()
	l := &workload{cl: cl, stop: make(chan struct{}), errs: map[string]int{}}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go l.worker(w, keyOf(w), wait)
	}
	t.Cleanup(l.halt)
	return l
}

func (l *workload) worker(w int, key string, wait time.Duration) {
	defer l.wg.Done()
	holder := fmt.Sprintf("worker-%d-%s", w, client.NewRequestID()[:6])
	var last fence.Token
	// The tick paces the load, so that the nodes, not the clients, get
	// the CPU of a small test machine.
	tick := time.NewTicker(15 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		req := client.AcquireRequest{Key: key, Holder: holder, TTL: "3s", RequestID: client.NewRequestID()}
		if wait > 0 {
			req.Wait = wait.String()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second+wait)
		start := time.Now()
		g, err := l.cl.Acquire(ctx, req)
		end := time.Now()
		cancel()
		if err != nil {
			l.fail(err)
			continue
		}
		// An acquire while still holding the key (a release that failed)
		// returns the grant already recorded, as a renewal. A renewal of a
		// grant not seen yet is the answer to a retry whose first attempt
		// made the grant: it is new to this worker.
		if g.Token != last {
			last = g.Token
			l.mu.Lock()
			l.acked = append(l.acked, ackedGrant{key: key, token: g.Token, start: start, end: end})
			l.mu.Unlock()
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		_, err = l.cl.Release(ctx, client.ReleaseRequest{Key: key, Holder: holder, Token: g.Token})
		cancel()
		if err != nil {
			l.fail(err) // the lease ends by itself within its TTL
		}
	}
}

func (l *workload) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if errors.Is(err, client.ErrUnknownOutcome) {
		l.unknown++
	}
	var ae *client.Error
	if errors.As(err, &ae) {
		l.errs[ae.Code]++
	} else {
		l.errs[oneLineErr(err)]++
	}
}

func oneLineErr(err error) string {
	s := err.Error()
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// halt stops the workers and waits for them.
func (l *workload) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *workload) grants() []ackedGrant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ackedGrant(nil), l.acked...)
}

// awaitProgress waits until n more grants are acknowledged.
func (l *workload) awaitProgress(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	base := len(l.grants())
	testutil.Eventually(t, timeout, func() error {
		if got := len(l.grants()) - base; got < n {
			return fmt.Errorf("%d grants acknowledged, want %d more (errors %v)", got, n, l.errorCounts())
		}
		return nil
	})
}

func (l *workload) errorCounts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.errs {
		out[k] = v
	}
	return out
}

// checkGrantOrder checks the acknowledged grants of each key: their tokens
// are unique, and a grant acknowledged before another was asked for has the
// lower token (tokens increase in real-time grant order).
func checkGrantOrder(t *testing.T, acked []ackedGrant) map[string]fence.Token {
	t.Helper()
	byKey := map[string][]ackedGrant{}
	for _, g := range acked {
		byKey[g.key] = append(byKey[g.key], g)
	}
	high := map[string]fence.Token{}
	for key, gs := range byKey {
		sort.Slice(gs, func(i, j int) bool { return gs[i].token < gs[j].token })
		for i := 1; i < len(gs); i++ {
			if gs[i].token == gs[i-1].token {
				t.Errorf("key %s: token %s acknowledged to two grants", key, gs[i].token)
			}
		}
		// Walk down from the highest token, keeping the earliest
		// acknowledgement of any higher token: it must not come before a
		// lower token's request.
		var minEnd time.Time
		var minTok fence.Token
		for i := len(gs) - 1; i >= 0; i-- {
			g := gs[i]
			if !minEnd.IsZero() && minEnd.Before(g.start) {
				t.Errorf("key %s: token %s was acknowledged before token %s was asked for: tokens went backwards",
					key, minTok, g.token)
			}
			if minEnd.IsZero() || g.end.Before(minEnd) {
				minEnd, minTok = g.end, g.token
			}
		}
		high[key] = gs[len(gs)-1].token
	}
	return high
}

// checkNothingLost checks that each key's high-water mark in the cluster,
// read linearizably, is at least every token acknowledged for it, and that a
// new grant of each key is higher still.
func checkNothingLost(t *testing.T, cl *client.Client, high map[string]fence.Token) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for key, tok := range high {
		ki, err := cl.Key(ctx, key)
		if err != nil {
			t.Fatalf("key %s: %v", key, err)
		}
		if ki.Token < tok {
			t.Errorf("key %s: high-water %s below the acknowledged token %s: an acknowledged grant was lost", key, ki.Token, tok)
		}
		g, err := cl.Acquire(ctx, client.AcquireRequest{Key: key, Holder: "final-check", TTL: "1s", Wait: "10s"})
		if err != nil {
			t.Fatalf("final acquire of %s: %v", key, err)
		}
		if g.Token <= tok {
			t.Errorf("key %s: new token %s not above the acknowledged %s", key, g.Token, tok)
		}
	}
}

// maxGap is the longest time between consecutive acknowledgements within
// [from, to]: how long the cluster did not grant anything.
func maxGap(acked []ackedGrant, from, to time.Time) time.Duration {
	ends := []time.Time{from, to}
	for _, g := range acked {
		if g.end.After(from) && g.end.Before(to) {
			ends = append(ends, g.end)
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	var gap time.Duration
	for i := 1; i < len(ends); i++ {
		gap = max(gap, ends[i].Sub(ends[i-1]))
	}
	return gap
}

// TestMembershipChangesUnderLoad grows a 3-node cluster to 5 and shrinks it
// to 2 while clients acquire and release: a node started with --join joins
// through a follower, fencectl members add prepares a member that then
// starts, leadership moves to a named member, the leader is removed (it hands
// leadership over first), a follower is removed, and the leader leaves on
// SIGTERM with --leave-on-terminate. No acknowledged grant is lost and tokens
// keep increasing.
func TestMembershipChangesUnderLoad(t *testing.T) {
	c := startOpsCluster(t, 3, "--leave-on-terminate")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n1, n2, n3 := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	original := httpAddrs(n1, n2, n3)
	lead, err := c.Leader(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var follower *proccluster.Node
	for _, n := range c.Nodes {
		if n != lead {
			follower = n
			break
		}
	}
	load := startWorkload(t, client.New(original), 3, func(w int) string { return fmt.Sprintf("members/w%d", w) }, 0)
	load.awaitProgress(t, 10, 20*time.Second)

	// A node started with --join naming a follower only: the follower
	// forwards the join to the leader (the new node knows no leader yet).
	n4, err := c.AddNode("n4", "--join", follower.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	awaitVoters(t, original, "n1", "n2", "n3", "n4")
	via4 := client.New([]string{n4.HTTPAddr})
	g, err := via4.Acquire(ctx, client.AcquireRequest{Key: "members/via-n4", Holder: "h4", TTL: "30s"})
	if err != nil {
		t.Fatalf("acquire through the joined node: %v", err)
	}
	if v, err := via4.Verify(ctx, "members/via-n4", g.Token.String(), "h4"); err != nil || !v.Allow {
		t.Fatalf("verify through the joined node: %+v %v", v, err)
	}
	load.awaitProgress(t, 10, 20*time.Second)

	// fencectl members add first, then the node starts: the cluster
	// expects it.
	n5, err := c.NewNode("n5", "--join", n1.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	var added struct {
		ID     string `json:"id"`
		Voters int    `json:"voters"`
		Quorum int    `json:"quorum"`
	}
	fencectlJSON(t, original, &added, "members", "add", "n5", n5.RaftAddr, "--http", n5.HTTPAddr)
	if added.ID != "n5" || added.Voters != 5 || added.Quorum != 3 {
		t.Fatalf("members add: %+v", added)
	}
	// Adding it again changes nothing; another address for n5 is refused.
	if code, _, stderr := fencectl(t, original, "members", "add", "n5", n5.RaftAddr, "--http", n5.HTTPAddr); code != 0 {
		t.Fatalf("repeated members add: exit %d: %s", code, stderr)
	}
	if code, _, stderr := fencectl(t, original, "members", "add", "n5", "127.0.0.1:1"); code != 1 || !strings.Contains(stderr, "--replace") {
		t.Fatalf("members add with another address: exit %d: %s", code, stderr)
	}
	if err := c.StartNode(n5); err != nil {
		t.Fatal(err)
	}
	awaitVoters(t, original, "n1", "n2", "n3", "n4", "n5")
	load.awaitProgress(t, 10, 20*time.Second)

	// Leadership to the newest member, by name.
	var moved struct {
		Previous string `json:"previous_leader"`
		Leader   string `json:"leader"`
		Term     uint64 `json:"term"`
	}
	fencectlJSON(t, original, &moved, "leader", "transfer", "n5")
	if moved.Leader != "n5" || moved.Previous == "n5" {
		t.Fatalf("leader transfer n5: %+v", moved)
	}
	if l, err := c.Leader(ctx, 10*time.Second); err != nil || l != n5 {
		t.Fatalf("leader after the transfer: %v %v", l, err)
	}
	load.awaitProgress(t, 10, 20*time.Second)

	// Removing the leader: it hands leadership over first.
	var removed struct {
		Leader string `json:"leader"`
		Voters int    `json:"voters"`
	}
	fencectlJSON(t, original, &removed, "members", "remove", "n5")
	if removed.Voters != 4 || removed.Leader == "" || removed.Leader == "n5" {
		t.Fatalf("members remove of the leader: %+v", removed)
	}
	c.Kill(n5)
	// A follower, and an id that is not a member.
	fencectlJSON(t, original, &removed, "members", "remove", "n4")
	if removed.Voters != 3 {
		t.Fatalf("members remove n4: %+v", removed)
	}
	c.Kill(n4)
	if code, _, stderr := fencectl(t, original, "members", "remove", "n9"); code != 1 || !strings.Contains(stderr, "not a member") {
		t.Fatalf("members remove n9: exit %d: %s", code, stderr)
	}
	awaitVoters(t, original, "n1", "n2", "n3")
	load.awaitProgress(t, 10, 20*time.Second)

	// --leave-on-terminate: SIGTERM to the leader takes it out of the
	// configuration; the other two form the cluster and keep serving.
	lead, err = c.Leader(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Terminate(lead)
	var rest []*proccluster.Node
	var restIDs []string
	for _, n := range []*proccluster.Node{n1, n2, n3} {
		if n != lead {
			rest = append(rest, n)
			restIDs = append(restIDs, n.ID)
		}
	}
	view := awaitVoters(t, httpAddrs(rest...), restIDs...)
	if len(view.Members) != 2 {
		t.Fatalf("members after leave-on-terminate: %+v", view)
	}
	for _, n := range rest {
		st, err := client.New(nil).NodeStatus(ctx, "http://"+n.HTTPAddr)
		if err != nil || len(st.Members) != 2 {
			t.Fatalf("%s's own view after %s left: %+v %v", n.ID, lead.ID, st, err)
		}
	}
	load.awaitProgress(t, 10, 20*time.Second)

	load.halt()
	acked := load.grants()
	t.Logf("%d grants acknowledged; %d unknown outcomes; errors %v", len(acked), load.unknown, load.errorCounts())
	checkNothingLost(t, client.New(httpAddrs(rest...)), checkGrantOrder(t, acked))
}

// TestBackupAndRestore saves a backup with fencectl, grants more after it,
// restores it in place and into a brand-new cluster: the next token of every
// key is higher than every token issued before, also those issued after the
// backup was taken. A damaged backup is detected offline and never restored.
func TestBackupAndRestore(t *testing.T) {
	a := startOpsCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eps := a.Endpoints()
	cl := client.New(eps)
	issued := map[string]fence.Token{} // the highest token issued per key
	grant := func(cl *client.Client, key, holder string, release bool) fence.Token {
		t.Helper()
		g, err := cl.Acquire(ctx, client.AcquireRequest{Key: key, Holder: holder, TTL: "1m"})
		if err != nil {
			t.Fatalf("acquire %s: %v", key, err)
		}
		if release {
			if _, err := cl.Release(ctx, client.ReleaseRequest{Key: key, Holder: holder, Token: g.Token}); err != nil {
				t.Fatalf("release %s: %v", key, err)
			}
		}
		issued[key] = max(issued[key], g.Token)
		return g.Token
	}
	keys := []string{"backup/a", "backup/b", "backup/c"}
	for _, k := range keys {
		grant(cl, k, "before", true)
		grant(cl, k, "before", true)
	}
	heldBefore := grant(cl, "backup/held", "holder", false) // live in the backup

	file := filepath.Join(t.TempDir(), "cluster.fenced")
	var saved struct {
		File      string `json:"file"`
		ClusterID string `json:"cluster_id"`
		Term      uint64 `json:"term"`
		Index     uint64 `json:"index"`
		Keys      int    `json:"keys"`
		Held      int    `json:"held"`
		MaxEpoch  uint64 `json:"max_epoch"`
		Epoch     uint64 `json:"epoch"`
		SHA256    string `json:"sha256"`
	}
	fencectlJSON(t, eps, &saved, "snapshot", "save", file)
	if saved.ClusterID == "" || saved.Keys != 4 || saved.Held != 1 || saved.Index == 0 || saved.Epoch == 0 ||
		saved.MaxEpoch < heldBefore.Epoch() || len(saved.SHA256) != 64 {
		t.Fatalf("snapshot save: %+v", saved)
	}
	inspected := saved
	fencectlJSON(t, nil, &inspected, "snapshot", "inspect", file)
	if inspected != saved {
		t.Fatalf("snapshot inspect %+v, save said %+v", inspected, saved)
	}
	if code, stdout, _ := fencectl(t, nil, "snapshot", "inspect", file, "--keys"); code != 0 || !strings.Contains(stdout, "backup/held") {
		t.Fatalf("snapshot inspect --keys: exit %d\n%s", code, stdout)
	}

	// The cluster goes on after the backup, in a later term: a restore
	// must stay above these tokens although the backup does not hold them.
	if _, err := cl.Transfer(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var after []fence.Token
	for _, k := range append(keys, "backup/after-only") {
		after = append(after, grant(cl, k, "after", false))
	}
	if after[0].Epoch() <= saved.Epoch {
		t.Fatalf("a grant after the transfer has epoch %d, the backup %d", after[0].Epoch(), saved.Epoch)
	}

	// Without --yes and without a terminal, nothing is restored.
	floor := func(cl *client.Client) uint64 {
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.EpochFloor
	}
	floorBefore := floor(cl)
	if code, _, stderr := fencectl(t, eps, "snapshot", "restore", file); code != 2 || !strings.Contains(stderr, "--yes") {
		t.Fatalf("restore without --yes: exit %d: %s", code, stderr)
	}
	if f := floor(cl); f != floorBefore {
		t.Fatalf("epoch floor moved from %d to %d without a restore", floorBefore, f)
	}

	// Restore in place.
	var res struct {
		SameCluster bool   `json:"same_cluster"`
		OldFloor    uint64 `json:"old_epoch_floor"`
		NewFloor    uint64 `json:"new_epoch_floor"`
		Attested    uint64 `json:"attested_epoch"`
		Expired     int    `json:"grants_expired"`
	}
	// A restore is not retried: leadership lost while it commits leaves its
	// outcome unknown, and fencectl then reads the epoch floor to say
	// whether it applied. Both documented outcomes are accepted; an
	// applied one must have raised the floor.
	code, stdout, stderr := fencectl(t, eps, "snapshot", "restore", file, "--yes", "-o", "json")
	switch {
	case code == 0:
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("restore in place: %v\n%s", err, stdout)
		}
		if !res.SameCluster || res.Expired != 1 || res.NewFloor <= res.OldFloor || res.Attested < after[0].Epoch() {
			t.Fatalf("restore in place: %+v", res)
		}
	case strings.Contains(stderr, "the restore was applied"):
		t.Logf("the restore's answer was lost, and fencectl found it applied: %s", stderr)
		if f := floor(cl); f <= floorBefore {
			t.Fatalf("fencectl says the restore applied, but the epoch floor is %d (was %d)", f, floorBefore)
		}
	default:
		t.Fatalf("restore in place: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// A token issued after the backup is not the current grant any more,
	// and the grant live in the backup came back expired.
	if v, err := cl.Verify(ctx, keys[0], after[0].String(), ""); err != nil || v.Allow {
		t.Fatalf("verify of a token issued after the backup, after the restore: %+v %v", v, err)
	}
	if v, err := cl.Verify(ctx, "backup/held", heldBefore.String(), ""); err != nil || v.Allow || v.Reason != "expired" {
		t.Fatalf("verify of the grant live in the backup: %+v %v", v, err)
	}
	checkAbove := func(cl *client.Client, where string) {
		t.Helper()
		for key, high := range issued {
			tok := grant(cl, key, "restored-"+where, true)
			if tok <= high {
				t.Errorf("%s: key %s got token %s, not above %s issued before", where, key, tok, high)
			}
		}
	}
	checkAbove(cl, "in place")

	// Into a brand-new cluster, with the default margin.
	b := startOpsCluster(t, 3)
	bcl := client.New(b.Endpoints())
	fencectlJSON(t, b.Endpoints(), &res, "snapshot", "restore", file, "--yes")
	if res.SameCluster || res.Expired != 1 || res.Attested < saved.Epoch+1<<20 {
		t.Fatalf("restore into a new cluster: %+v", res)
	}
	ks, err := bcl.Keys(ctx, "backup/", 0)
	if err != nil || len(ks) != 4 {
		t.Fatalf("keys of the new cluster: %+v %v", ks, err)
	}
	checkAbove(bcl, "new cluster")

	// A damaged backup is found offline and refused by restore before
	// anything is sent.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.fenced")
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0x40
	for _, damaged := range [][]byte{flipped, data[:len(data)-10], []byte("not a backup")} {
		if err := os.WriteFile(bad, damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := fencectl(t, nil, "snapshot", "inspect", bad)
		if code != 1 || stdout != "" || !strings.Contains(stderr, "not a sound fenced backup") {
			t.Fatalf("inspect of a damaged backup: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		floorB := floor(bcl)
		if code, _, stderr := fencectl(t, b.Endpoints(), "snapshot", "restore", bad, "--yes"); code != 1 || !strings.Contains(stderr, "not a sound fenced backup") {
			t.Fatalf("restore of a damaged backup: exit %d: %s", code, stderr)
		}
		if f := floor(bcl); f != floorB {
			t.Fatalf("a damaged backup moved the epoch floor from %d to %d", floorB, f)
		}
	}
	if code, _, stderr := fencectl(t, nil, "snapshot", "inspect", file); code != 0 {
		t.Fatalf("inspect of the sound backup: exit %d: %s", code, stderr)
	}
}

// TestRollingRestartUnderLoad restarts every node in turn with SIGTERM
// (a leader hands leadership over first), waiting until the cluster is
// healthy in between, while clients contend for keys: no acknowledged grant
// is lost, tokens are unique and increase in real-time grant order, and the
// cluster never stops granting for long.
func TestRollingRestartUnderLoad(t *testing.T) {
	// Frequent snapshots, so restarted nodes restore from one.
	c := startOpsCluster(t, 3, "--snapshot-threshold", "256", "--snapshot-interval", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := c.Client()
	load := startWorkload(t, cl, 4, func(w int) string { return fmt.Sprintf("rolling/k%d", w%2) }, 5*time.Second)
	load.awaitProgress(t, 20, 20*time.Second)

	from := time.Now()
	leaderChanged := false
	for _, n := range c.Nodes {
		lead, err := c.Leader(ctx, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		leaderChanged = leaderChanged || lead == n
		st, err := cl.NodeStatus(ctx, "http://"+lead.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.Terminate(n)
		if err := c.StartNode(n); err != nil {
			t.Fatal(err)
		}
		// Healthy: fencectl status finds a leader and every member
		// ready, and the restarted node has caught up with what was
		// committed before it stopped.
		testutil.Eventually(t, 30*time.Second, func() error {
			code, stdout, stderr := fencectl(t, c.Endpoints(), "status", "-o", "json")
			if code != 0 {
				return fmt.Errorf("status exit %d: %s", code, stderr)
			}
			var v membersView
			if err := json.Unmarshal([]byte(stdout), &v); err != nil {
				return err
			}
			for _, m := range v.Members {
				if m.Health != "ready" || m.Status == nil {
					return fmt.Errorf("%s is %s", m.ID, m.Health)
				}
				if m.ID == n.ID && m.Status.AppliedIndex < st.CommitIndex {
					return fmt.Errorf("%s applied %d, the cluster had committed %d", n.ID, m.Status.AppliedIndex, st.CommitIndex)
				}
			}
			return nil
		})
		load.awaitProgress(t, 10, 20*time.Second)
	}
	to := time.Now()
	load.halt()

	acked := load.grants()
	gap := maxGap(acked, from, to)
	t.Logf("%d grants acknowledged; longest time without a grant during the restarts %v; %d unknown outcomes; errors %v",
		len(acked), gap, load.unknown, load.errorCounts())
	if !leaderChanged {
		t.Errorf("the leader was never restarted")
	}
	if gap > 8*time.Second {
		t.Errorf("no grant for %v during the rolling restart", gap)
	}
	checkNothingLost(t, cl, checkGrantOrder(t, acked))
}

// debugRecord is one line of fencectl debug log.
type debugRecord struct {
	Key    string      `json:"key"`
	Holder string      `json:"holder"`
	Token  fence.Token `json:"token"`
	Epoch  uint64      `json:"epoch"`
	Seq    uint64      `json:"seq"`
	TTL    string      `json:"ttl"`
	Term   uint64      `json:"term"`
	Index  uint64      `json:"index"`
	Source string      `json:"source"`
}

// TestDebugLogListsAcknowledgedGrants reads the log of a leader killed with
// SIGKILL right after a load: every grant a client was told of is in it (a
// leader writes an entry to its own disk before counting it committed),
// with increasing tokens per key in log order.
func TestDebugLogListsAcknowledgedGrants(t *testing.T) {
	c := startOpsCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	load := startWorkload(t, c.Client(), 3, func(w int) string { return fmt.Sprintf("audit/k%d", w) }, 0)
	load.awaitProgress(t, 60, 30*time.Second)

	// A running node's log is locked: debug log says so.
	if code, _, stderr := fencectl(t, nil, "debug", "log", "--data-dir", c.Nodes[0].DataDir); code != 1 || !strings.Contains(stderr, "is the node stopped?") {
		t.Fatalf("debug log of a running node: exit %d: %s", code, stderr)
	}
	if code, _, stderr := fencectl(t, nil, "debug", "log", "--data-dir", t.TempDir()); code != 1 || !strings.Contains(stderr, "not the data dir") {
		t.Fatalf("debug log of an empty dir: exit %d: %s", code, stderr)
	}

	// The leader once the load is over holds every committed entry,
	// whichever node led when each was committed.
	load.halt()
	lead, err := c.Leader(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(lead)
	acked := load.grants()

	code, stdout, stderr := fencectl(t, nil, "debug", "log", "--data-dir", lead.DataDir)
	if code != 0 {
		t.Fatalf("debug log: exit %d: %s", code, stderr)
	}
	seen := map[string]map[fence.Token]bool{}
	last := map[string]fence.Token{}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	for _, line := range lines {
		var r debugRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("debug log line %q: %v", line, err)
		}
		if r.Token <= last[r.Key] {
			t.Errorf("key %s: token %s after %s in log order", r.Key, r.Token, last[r.Key])
		}
		if r.Epoch != r.Token.Epoch() || r.Seq != r.Token.Seq() || r.Holder == "" || r.Index == 0 || r.Source == "" {
			t.Errorf("debug log record %+v", r)
		}
		last[r.Key] = r.Token
		if seen[r.Key] == nil {
			seen[r.Key] = map[fence.Token]bool{}
		}
		seen[r.Key][r.Token] = true
	}
	for _, g := range acked {
		if !seen[g.key][g.token] {
			t.Errorf("acknowledged grant %s of %s is not in the leader's log", g.token, g.key)
		}
	}
	t.Logf("%d acknowledged grants, %d records in the log", len(acked), len(lines))

	code, stdout, _ = fencectl(t, nil, "debug", "log", "--data-dir", lead.DataDir, "audit/k0", "audit/k2")
	if code != 0 || strings.Contains(stdout, "audit/k1") || !strings.Contains(stdout, "audit/k0") || !strings.Contains(stdout, "audit/k2") {
		t.Fatalf("debug log of two keys: exit %d\n%s", code, stdout)
	}
}

// TestForcedReleaseAndLockDelay drives the key-hygiene commands through
// fencectl: a forced release ends another holder's grant and is logged by
// the leader, and a lock-delay keeps an expired key from a new holder until
// it has passed.
func TestForcedReleaseAndLockDelay(t *testing.T) {
	c := startOpsCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eps := c.Endpoints()
	cl := client.New(eps)

	stuck, err := cl.Acquire(ctx, client.AcquireRequest{Key: "hygiene/stuck", Holder: "gone-worker", TTL: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	var rel client.ReleaseResponse
	fencectlJSON(t, eps, &rel, "release", "--force", "hygiene/stuck")
	if rel.State != "released" || rel.Token != stuck.Token {
		t.Fatalf("forced release: %+v", rel)
	}
	if v, err := cl.Verify(ctx, "hygiene/stuck", stuck.Token.String(), "gone-worker"); err != nil || v.Allow || v.Reason != "released" {
		t.Fatalf("verify of a forced-out token: %+v %v", v, err)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		for _, n := range c.Nodes {
			data, _ := os.ReadFile(n.LogPath)
			for _, line := range strings.Split(string(data), "\n") {
				if strings.Contains(line, "forced release") && strings.Contains(line, "key=hygiene/stuck") &&
					strings.Contains(line, "holder=gone-worker") && strings.Contains(line, "[WARN]") {
					return nil
				}
			}
		}
		return errors.New("no WARN line for the forced release in any node's log")
	})

	// A grant with a lock-delay expires; the key is kept from bob until
	// the delay has passed, and a wait long enough rides it out.
	var first client.Grant
	fencectlJSON(t, eps, &first, "acquire", "hygiene/delayed", "--holder", "alice", "--ttl", "200ms", "--lock-delay", "2s")
	testutil.Eventually(t, 10*time.Second, func() error {
		ki, err := cl.Key(ctx, "hygiene/delayed")
		if err != nil || ki.State != "expired" {
			return fmt.Errorf("key %+v %v", ki, err)
		}
		return nil
	})
	expired := time.Now()
	code, stdout, stderr := fencectl(t, eps, "acquire", "hygiene/delayed", "--holder", "bob")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "lock-delay") || !strings.Contains(stderr, "retry after") {
		t.Fatalf("acquire during the lock-delay: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var second client.Grant
	fencectlJSON(t, eps, &second, "acquire", "hygiene/delayed", "--holder", "bob", "--wait", "10s")
	if second.Token <= first.Token || second.Holder != "bob" {
		t.Fatalf("grant after the lock-delay: %+v, first %+v", second, first)
	}
	// The delay started when the leader applied the expiry, a moment
	// before it was seen here.
	if waited := time.Since(expired); waited < time.Second {
		t.Fatalf("bob got the key %v after the expiry, within the 2s lock-delay", waited)
	}
	// A release is not an expiry: no delay after it.
	if _, err := cl.Release(ctx, client.ReleaseRequest{Key: "hygiene/delayed", Holder: "bob", Token: second.Token}); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := fencectl(t, eps, "acquire", "hygiene/delayed", "--holder", "carol"); code != 0 {
		t.Fatalf("acquire right after a release: exit %d: %s", code, stderr)
	}
}
