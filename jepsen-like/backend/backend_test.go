package backend

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

func TestGrudgeString(t *testing.T) {
	g := Grudge{"n2": {"n3", "n1"}, "n1": {"n2"}, "n3": nil}
	if s := g.String(); s != "n1 x n2; n2 x n1,n3" {
		t.Fatalf("got %q", s)
	}
}

func TestRules(t *testing.T) {
	r := rules([]string{"-A INPUT -s 10.213.1.12/32 -j DROP"})
	if !strings.HasPrefix(r, "*filter\n") || !strings.Contains(r, ":INPUT ACCEPT") || !strings.HasSuffix(r, "-j DROP\nCOMMIT\n") {
		t.Fatalf("rules:\n%s", r)
	}
}

// TestNetns builds the namespaces, checks that kill -9 reaches fenced itself,
// that a partition really cuts the leader off (the others elect a new one)
// while the harness still reaches every node, and that Close leaves nothing
// behind.
func TestNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster; skipped with -short")
	}
	if err := NetnsUsable(); err != nil {
		t.Skipf("netns backend unavailable here: %v", err)
	}
	bin, err := proccluster.Fenced()
	if err != nil {
		t.Skipf("cannot build fenced: %v", err)
	}
	b := NewNetns(Config{Nodes: 3, Binary: bin, Dir: t.TempDir(),
		Args: []string{"--heartbeat-timeout", "500ms", "--election-timeout", "500ms"}}, hclog.NewNullLogger())
	ctx := context.Background()
	if err := b.Start(ctx); err != nil {
		b.Close()
		t.Fatal(err)
	}
	defer b.Close()
	for _, id := range b.Nodes() {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", b.c.Node(id).PID()))
		if !strings.HasSuffix(exe, "/fenced") {
			t.Fatalf("node %s runs %q, not fenced", id, exe)
		}
	}
	old, err := b.Leader(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, id := range b.Nodes() {
		if id != old {
			rest = append(rest, id)
		}
	}
	g := Grudge{old: rest}
	for _, id := range rest {
		g[id] = []string{old}
	}
	if err := b.Partition(ctx, g); err != nil {
		t.Fatal(err)
	}
	cl := client.New(nil)
	testutil.Eventually(t, 15*time.Second, func() error {
		for _, id := range rest {
			st, err := cl.NodeStatus(ctx, "http://"+b.Endpoint(id))
			if err != nil {
				return err
			}
			if st.Ready && st.LeaderID == id {
				return nil
			}
		}
		return fmt.Errorf("no new leader among %v", rest)
	})
	// The harness still reaches the isolated node.
	if _, err := cl.NodeStatus(ctx, "http://"+b.Endpoint(old)); err != nil {
		t.Fatalf("harness cut off from %s: %v", old, err)
	}
	if err := b.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Kill(ctx, old); err != nil {
		t.Fatal(err)
	}
	if b.Running(old) {
		t.Fatal("killed node still running")
	}
	if err := b.Restart(ctx, old); err != nil {
		t.Fatal(err)
	}
	pid := b.c.Node(old).PID()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("fenced %d survived Close", pid)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), fmt.Sprintf("-%d-", os.Getpid())) {
		t.Fatalf("namespaces left behind:\n%s", out)
	}
	if linkExists(b.hostLink) {
		t.Fatalf("host link %s left behind", b.hostLink)
	}
}

// TestCleanStale removes the namespaces of a run whose harness is dead.
func TestCleanStale(t *testing.T) {
	if err := NetnsUsable(); err != nil {
		t.Skipf("netns backend unavailable here: %v", err)
	}
	// A pid that cannot be alive: above the kernel's pid_max default range.
	dead := fmt.Sprintf("fj-250-%d-n1", 1<<30)
	if out, err := exec.Command("ip", "netns", "add", dead).CombinedOutput(); err != nil {
		t.Skipf("cannot add a namespace: %v %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", dead).Run()
	used := CleanStale(context.Background(), hclog.NewNullLogger())
	if used[250] {
		t.Fatal("a dead run's number counted as used")
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), dead) {
		t.Fatalf("stale namespace %s not removed", dead)
	}
}
