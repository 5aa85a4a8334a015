package docker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/jepsen-like/backend"
	"github.com/fenced/fenced/jepsen-like/nemesis"
	"github.com/fenced/fenced/jepsen-like/runner"
)

// TestComposeJepsen runs the chaos suite's short schedule (every fault once,
// fixed seed) against the compose cluster through the docker backend, and
// requires every checker to pass. It is not parallel: it runs alone, before
// the other tests of the package, so the other clusters do not slow it down.
func TestComposeJepsen(t *testing.T) {
	requireDocker(t)
	img := buildImage(t)
	dir, err := os.MkdirTemp("", "fenced-jepsen-docker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("artefacts kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	var out bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Name: "jepsen", Level: hclog.Warn, Output: os.Stderr})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	res, err := runner.Run(ctx, runner.Config{Schedule: "short", Seed: 1, Nodes: 3, Backend: "docker", Image: img, Results: dir}, &out, log)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	if !regexp.MustCompile(`(?m)^\d+ passed, \d+ failed$`).MatchString(out.String()) {
		t.Errorf("no 'N passed, N failed' line in the report")
	}
	if res.Failed > 0 {
		t.Fatalf("%d checkers failed", res.Failed)
	}
	if len(res.Skipped) > 0 {
		t.Logf("skipped: %v", res.Skipped)
	}
	if want := len(nemesis.All) - len(res.Skipped); res.Faults < want {
		t.Fatalf("%d faults recorded, want at least %d (every supported nemesis once)", res.Faults, want)
	}
	if res.Ops < 1000 {
		t.Fatalf("only %d operations recorded: the workload barely ran", res.Ops)
	}
	for i := 1; i <= 3; i++ {
		data, err := os.ReadFile(filepath.Join(dir, "nodes", fmt.Sprintf("n%d.log", i)))
		if err != nil || !bytes.Contains(data, []byte("fenced started")) {
			t.Fatalf("node log n%d not copied from the container: %v", i, err)
		}
	}
}

// TestDockerBackend checks the docker backend's operations against the
// compose cluster: a partition really cuts the leader off (the others elect
// a new leader) while the harness still reaches it; a container started
// again under a partition gets the grudge back, with its peers' current
// addresses; SIGTERM hands leadership over; kill -9 works on a paused
// container and nothing restarts it; Close leaves nothing of the project.
func TestDockerBackend(t *testing.T) {
	t.Parallel()
	requireDocker(t)
	img := buildImage(t)
	b := backend.NewDocker(backend.Config{Nodes: 3, Dir: t.TempDir(), Image: img,
		Args: []string{"--heartbeat-timeout", "500ms", "--election-timeout", "500ms", "--log-level", "debug"}}, hclog.NewNullLogger())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	closed := false
	t.Cleanup(func() {
		if !closed {
			b.Close()
		}
	})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	project := b.Project()
	for _, id := range b.Nodes() {
		if p := inspect(t, b.Container(id), "{{.HostConfig.RestartPolicy.Name}}"); p != "no" {
			t.Fatalf("%s has restart policy %q: Docker would restart a killed node behind the harness's back", id, p)
		}
		if args := inspect(t, b.Container(id), "{{json .Args}}"); !strings.Contains(args, `"--election-timeout","500ms"`) {
			t.Fatalf("%s runs fenced with %s, without the harness's flags", id, args)
		}
	}
	old, err := b.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, id := range b.Nodes() {
		if id != old {
			rest = append(rest, id)
		}
	}
	cl := client.New(nil)
	if err := b.CanPartition(); err != nil {
		t.Logf("partitions not checked: %v", err)
	} else {
		g := backend.Grudge{old: rest}
		for _, id := range rest {
			g[id] = []string{old}
		}
		if err := b.Partition(ctx, g); err != nil {
			t.Fatal(err)
		}
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
		if _, err := cl.NodeStatus(ctx, "http://"+b.Endpoint(old)); err != nil {
			t.Fatalf("harness cut off from %s: %v", old, err)
		}
		// Killed and started again under the grudge: new process, new
		// namespace, the rules come back, naming the current addresses.
		r := rest[0]
		if err := b.Kill(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := b.Restart(ctx, r); err != nil {
			t.Fatal(err)
		}
		if rules := iptables(t, b.Container(r)); !strings.Contains(rules, "-A INPUT -s "+ip(t, b.Container(old))+"/32 -j DROP") {
			t.Fatalf("restarted %s lacks the grudge against %s:\n%s", r, old, rules)
		}
		if rules := iptables(t, b.Container(old)); !strings.Contains(rules, "-A INPUT -s "+ip(t, b.Container(r))+"/32 -j DROP") {
			t.Fatalf("%s's rules do not name the restarted %s's address:\n%s", old, r, rules)
		}
		if err := b.Heal(ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range b.Nodes() {
			if rules := iptables(t, b.Container(id)); strings.Contains(rules, "DROP") {
				t.Fatalf("%s keeps rules after the heal:\n%s", id, rules)
			}
		}
	}

	// SIGTERM of the leader: it hands leadership over before it exits.
	lead, err := b.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before, err := cl.NodeStatus(ctx, "http://"+b.Endpoint(lead))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx, lead); err != nil {
		t.Fatal(err)
	}
	if b.Running(lead) {
		t.Fatalf("%s still runs after Stop", lead)
	}
	next, err := b.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := cl.NodeStatus(ctx, "http://"+b.Endpoint(next)); err != nil || st.Term <= before.Term {
		t.Fatalf("after stopping leader %s (term %d): %+v %v", lead, before.Term, st, err)
	}
	if err := b.Restart(ctx, lead); err != nil {
		t.Fatal(err)
	}

	// kill -9 of a paused container; nothing restarts it.
	victim := rest[len(rest)-1]
	if err := b.Pause(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if !b.Running(victim) {
		t.Fatalf("paused %s does not count as running", victim)
	}
	if err := b.Kill(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if b.Running(victim) {
		t.Fatalf("%s runs after kill -9", victim)
	}
	if _, err := b.Leader(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if state := inspect(t, b.Container(victim), "{{.State.Status}}"); state != "exited" {
		t.Fatalf("killed %s is %s", victim, state)
	}
	if err := b.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	logs := b.LogPaths()
	data, err := os.ReadFile(logs[lead])
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("fenced started")); n < 2 {
		t.Fatalf("log of %s shows %d starts, want at least 2 (docker logs keeps every start)", lead, n)
	}
	if !bytes.Contains(data, []byte("leadership transfer")) {
		t.Fatalf("log of %s shows no leadership transfer at SIGTERM", lead)
	}

	closed = true
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, what := range [][]string{
		{"ps", "-aq", "--filter", "label=com.docker.compose.project=" + project},
		{"volume", "ls", "-q", "--filter", "label=com.docker.compose.project=" + project},
		{"network", "ls", "-q", "--filter", "label=com.docker.compose.project=" + project},
	} {
		if out, err := exec.Command("docker", what...).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Fatalf("docker %s after Close: %v %s", strings.Join(what, " "), err, out)
		}
	}
}

func inspect(t *testing.T, container, format string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", format, container).CombinedOutput()
	if err != nil {
		t.Fatalf("docker inspect %s: %v: %s", container, err, out)
	}
	return strings.TrimSpace(string(out))
}

func ip(t *testing.T, container string) string {
	return inspect(t, container, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}")
}

// iptables lists the filter table inside a container's network namespace.
func iptables(t *testing.T, container string) string {
	t.Helper()
	pid := inspect(t, container, "{{.State.Pid}}")
	out, err := exec.Command("nsenter", "-t", pid, "-n", "iptables", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -S in %s: %v: %s", container, err, out)
	}
	return string(out)
}
