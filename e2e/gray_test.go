package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// endpointsFirst lists first's address, then every other node's.
func endpointsFirst(c *proccluster.Cluster, first *proccluster.Node) []string {
	out := []string{first.HTTPAddr}
	for _, n := range c.Nodes {
		if n != first {
			out = append(out, n.HTTPAddr)
		}
	}
	return out
}

// aFollower returns a running node that is not lead.
func aFollower(c *proccluster.Cluster, lead *proccluster.Node) *proccluster.Node {
	for _, n := range c.Nodes {
		if n != lead {
			return n
		}
	}
	return nil
}

// TestGrayFrozenFollowerListedFirst: with one follower frozen by SIGSTOP and
// listed first, fencectl status, acquire, verify and key succeed through the
// two healthy nodes, within their --timeout; the acquire abandoned on the
// frozen node does not become a second grant when it wakes.
func TestGrayFrozenFollowerListedFirst(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lead, err := c.Leader(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	frozen := aFollower(c, lead)
	eps := endpointsFirst(c, frozen)
	probe := startProbe(ctx, eps)
	if err := c.Pause(frozen); err != nil {
		t.Fatal(err)
	}
	frozenAt := probe.freeze()
	resumed := false
	defer func() {
		if !resumed {
			_ = c.Resume(frozen)
		}
	}()

	run := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := fencectl(t, eps, append([]string{"--timeout", "10s"}, args...)...)
		if code != 0 {
			t.Fatalf("fencectl %q with %s frozen and listed first: exit %d\nstdout: %s\nstderr: %s", args, frozen.ID, code, stdout, stderr)
		}
		return stdout
	}
	run("status")
	var g client.Grant
	if err := json.Unmarshal([]byte(run("acquire", "pz", "--holder", "q", "--ttl", "1m", "-o", "json")), &g); err != nil {
		t.Fatal(err)
	}
	run("verify", "pz", g.Token.String(), "--holder", "q")
	run("key", "pz")
	gap, firstOK := probe.stop()
	t.Logf("follower %s frozen and listed first: longest time without a served acquire+release %v; first served %v after the freeze",
		frozen.ID, gap.Round(time.Millisecond), firstOK.Sub(frozenAt).Round(time.Millisecond))

	// q releases; when the frozen node wakes, the acquire that may have
	// queued in its socket is the same request (same request id): it
	// cannot grant pz again.
	if code, stdout, stderr := fencectl(t, eps, "--timeout", "10s", "release", "pz", g.Token.String(), "--holder", "q"); code != 0 {
		t.Fatalf("release: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := c.Resume(frozen); err != nil {
		t.Fatal(err)
	}
	resumed = true
	one := client.New([]string{frozen.HTTPAddr})
	testutil.Eventually(t, 20*time.Second, func() error {
		_, err := one.Key(ctx, "pz")
		return err
	})
	ki, err := c.Client().Key(ctx, "pz")
	if err != nil {
		t.Fatal(err)
	}
	if ki.State == "held" {
		t.Fatalf("pz is held again after the frozen node woke: %+v (the released grant was %s)", ki, g.Token)
	}
}

// TestGrayFrozenLeaderKeepsLock: fencectl lock KEY --ttl 30s -- CMD keeps its
// lock, and CMD runs to its end, while the leader is frozen for 28 s: the
// lease is renewed through the new leader. The test also measures how long
// a client of all three nodes went without service while the leader was
// frozen.
//
// FENCED_E2E_RAFT_TIMEOUT sets the nodes' heartbeat and election timeouts
// (500ms by default here, 1s in fenced), to measure with other values.
func TestGrayFrozenLeaderKeepsLock(t *testing.T) {
	var extra []string
	if d := os.Getenv("FENCED_E2E_RAFT_TIMEOUT"); d != "" {
		extra = []string{"--heartbeat-timeout", d, "--election-timeout", d}
	}
	c := proccluster.StartTest(t, proccluster.Options{Nodes: 3, ExtraArgs: extra})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lead, err := c.Leader(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	eps := endpointsFirst(c, lead)
	_, bin, err := proccluster.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	// COMMAND outlives the freeze by a few seconds, then exits 0.
	cmd := exec.CommandContext(ctx, bin, "--endpoints", strings.Join(eps, ","), "lock", "gl", "--holder", "locker", "--ttl", "30s",
		"--shell", "--", "sleep 40")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	cl := client.New(eps)
	testutil.Eventually(t, 20*time.Second, func() error {
		ki, err := cl.Key(ctx, "gl")
		if err != nil {
			return err
		}
		if ki.State != "held" || ki.Holder != "locker" {
			return fmt.Errorf("gl: %+v", ki)
		}
		return nil
	})

	probe := startProbe(ctx, eps)
	if err := c.Pause(lead); err != nil {
		t.Fatal(err)
	}
	frozenAt := probe.freeze()
	select { // the scenario: the leader stays frozen for 28 s
	case <-time.After(28 * time.Second):
	case err := <-done:
		t.Fatalf("fencectl lock ended while the leader was frozen: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	if err := c.Resume(lead); err != nil {
		t.Fatal(err)
	}
	gap, firstOK := probe.stop()
	t.Logf("leader %s frozen 28s (raft timeouts %q): longest time without a served acquire+release %v; first served %v after the freeze",
		lead.ID, os.Getenv("FENCED_E2E_RAFT_TIMEOUT"), gap.Round(time.Millisecond), firstOK.Sub(frozenAt).Round(time.Millisecond))

	if err := <-done; err != nil {
		t.Fatalf("fencectl lock with the leader frozen 28s: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	if strings.Contains(errb.String(), "lost") {
		t.Fatalf("fencectl lock reported a loss: %s", errb.String())
	}
}

// probe acquires and releases a key through every endpoint in a loop and
// measures the longest time between two served requests.
type probe struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	last    time.Time
	gap     time.Duration
	frozen  time.Time
	firstOK time.Time // the first success after frozen
}

func startProbe(ctx context.Context, eps []string) *probe {
	ctx, cancel := context.WithCancel(ctx)
	p := &probe{cancel: cancel, last: time.Now()}
	cl := client.New(eps)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			g, err := cl.Acquire(rctx, client.AcquireRequest{Key: "probe", Holder: "probe", TTL: "5s"})
			if err == nil {
				_, err = cl.Release(rctx, client.ReleaseRequest{Key: "probe", Holder: "probe", Token: g.Token})
			}
			rcancel()
			if err != nil {
				continue
			}
			now := time.Now()
			p.mu.Lock()
			p.gap = max(p.gap, now.Sub(p.last))
			p.last = now
			if !p.frozen.IsZero() && p.firstOK.IsZero() {
				p.firstOK = now
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// freeze records the moment the fault began and returns it.
func (p *probe) freeze() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = time.Now()
	return p.frozen
}

// stop ends the probe and returns the longest gap between served requests
// and the first success after the fault began.
func (p *probe) stop() (time.Duration, time.Time) {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gap, p.firstOK
}
