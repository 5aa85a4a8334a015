// Package docker tests the fenced image and docker-compose.yml: the image is
// built once per test binary, each test brings up its own compose project
// (three or five containers), hurts it with docker kill, docker start and
// docker-compose restart, and always takes it down with its volumes.
//
// The tests skip, saying why, when no Docker engine answers or docker-compose
// is missing, and with -short.
package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/jepsen-like/backend"
)

// The uid and gid the image runs as.
const imageUser = "65532:65532"

var (
	root string

	dockerOnce sync.Once
	dockerSkip string

	imageOnce sync.Once
	image     string
	imageErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	if root, err = proccluster.ModuleRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// What a killed earlier run left behind goes first; what this one
	// starts goes down before its -timeout ends it, when no test's cleanup
	// would run.
	log := hclog.New(&hclog.LoggerOptions{Name: "docker-test", Level: hclog.Info})
	backend.CleanStaleDocker(context.Background(), log)
	if d := testTimeout(); d > 0 {
		margin := min(max(d/10, 10*time.Second), time.Minute, d/2)
		time.AfterFunc(d-margin, func() {
			log.Warn("the test binary's -timeout is near: taking down what it started in Docker", "timeout", d)
			ctx, cancel := context.WithTimeout(context.Background(), margin)
			defer cancel()
			backend.CleanOwnDocker(ctx, log)
		})
	}
	code := m.Run()
	if image != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if out, err := exec.CommandContext(ctx, "docker", "rmi", "-f", image).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "docker rmi %s: %v\n%s", image, err, out)
		}
		cancel()
	}
	os.Exit(code)
}

// testTimeout is the test binary's -timeout; 0 when none.
func testTimeout() time.Duration {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return 0
	}
	d, _ := f.Value.(flag.Getter).Get().(time.Duration)
	return d
}

// requireDocker skips the test when no Docker engine answers or
// docker-compose is missing.
func requireDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds an image and runs containers; skipped with -short")
	}
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
			dockerSkip = fmt.Sprintf("no Docker engine answers (docker info: %v: %s)", err, oneLine(out))
			return
		}
		if out, err := exec.CommandContext(ctx, "docker-compose", "version").CombinedOutput(); err != nil {
			dockerSkip = fmt.Sprintf("docker-compose is missing (docker-compose version: %v: %s)", err, oneLine(out))
		}
	})
	if dockerSkip != "" {
		t.Skip(dockerSkip)
	}
}

// buildImage builds the image from this tree once per test binary, under a
// tag of its own that TestMain removes.
func buildImage(t *testing.T) string {
	t.Helper()
	imageOnce.Do(func() {
		tag := backend.ImageTag()
		start := time.Now()
		out, err := backend.BuildImage(context.Background(), root, tag)
		if err != nil {
			imageErr = err
			return
		}
		image = tag
		t.Logf("image %s built in %v: %s", tag, time.Since(start).Round(100*time.Millisecond), oneLine([]byte(out)))
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return image
}

// project is one docker-compose project of the fenced image, with its own
// name, host ports and volumes.
type project struct {
	t        *testing.T
	name     string
	files    []string
	env      []string
	services []string
	http     map[string]string // service -> host address of its HTTP port
	started  time.Time         // when `up` was run

	mu         sync.Mutex
	containers map[string]string
}

// newProject brings up docker-compose.yml (and docker-compose.5.yml for five
// nodes) under a fresh project name with free host ports, and takes it down
// with its volumes when the test ends.
func newProject(t *testing.T, nodes int) *project {
	t.Helper()
	requireDocker(t)
	img := buildImage(t)
	p := &project{
		t:          t,
		name:       backend.ProjectName("fencedtest-"),
		files:      []string{filepath.Join(root, "docker-compose.yml")},
		containers: map[string]string{},
	}
	if nodes == 5 {
		p.files = append(p.files, filepath.Join(root, "docker-compose.5.yml"))
	}
	for i := 0; i < nodes; i++ {
		p.services = append(p.services, fmt.Sprintf("fenced%d", i+1))
	}
	p.pickPorts(img)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := p.composeOutput("logs", "--no-color", "--tail", "60")
			t.Logf("logs of compose project %s:\n%s", p.name, out)
		}
		if out, err := p.composeOutput("down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Errorf("docker-compose down -v: %v\n%s", err, out)
		}
	})
	p.started = time.Now()
	for attempt := 1; ; attempt++ {
		out, err := p.composeOutput("up", "-d")
		if err == nil {
			break
		}
		// A free port picked here can be taken by a parallel test's container
		// before this project binds it: start again on new ports.
		if attempt < 3 && strings.Contains(out, "port is already allocated") {
			t.Logf("a host port was taken meanwhile; starting again on new ports")
			_, _ = p.composeOutput("down", "-v", "--remove-orphans", "-t", "5")
			p.pickPorts(img)
			continue
		}
		t.Fatalf("docker-compose up -d: %v\n%s", err, out)
	}
	return p
}

// pickPorts gives every service a free host port for its HTTP API.
func (p *project) pickPorts(img string) {
	p.env = []string{"FENCED_IMAGE=" + img}
	p.http = map[string]string{}
	for i, addr := range testutil.FreeAddrs(p.t, len(p.services)) {
		_, port, _ := net.SplitHostPort(addr)
		p.http[p.services[i]] = addr
		p.env = append(p.env, fmt.Sprintf("FENCED%d_PORT=%s", i+1, port))
	}
}

func (p *project) composeOutput(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := []string{"-p", p.name}
	for _, f := range p.files {
		full = append(full, "-f", f)
	}
	cmd := exec.CommandContext(ctx, "docker-compose", append(full, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), p.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// compose runs docker-compose on the project and fails the test on an error.
func (p *project) compose(args ...string) string {
	p.t.Helper()
	out, err := p.composeOutput(args...)
	if err != nil {
		p.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// docker runs the docker CLI and fails the test on an error.
func (p *project) docker(args ...string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// container returns the id of a service's container.
func (p *project) container(svc string) string {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if id := p.containers[svc]; id != "" {
		return id
	}
	id := strings.TrimSpace(p.compose("ps", "-q", svc))
	if id == "" {
		p.t.Fatalf("service %s has no container", svc)
	}
	p.containers[svc] = id
	return id
}

// The node id of service fencedN is nN.
func nodeID(svc string) string { return "n" + strings.TrimPrefix(svc, "fenced") }
func service(id string) string { return "fenced" + strings.TrimPrefix(id, "n") }

func (p *project) endpoints(svcs []string) []string {
	var out []string
	for _, s := range svcs {
		out = append(out, p.http[s])
	}
	return out
}

func (p *project) client(svcs ...string) *client.Client {
	if len(svcs) == 0 {
		svcs = p.services
	}
	return client.New(p.endpoints(svcs))
}

func (p *project) status(ctx context.Context, svc string) (*client.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return client.New(nil).NodeStatus(ctx, "http://"+p.http[svc])
}

// statuses asks every service in svcs for its status.
func (p *project) statuses(ctx context.Context, svcs []string) (map[string]*client.Status, error) {
	views := map[string]*client.Status{}
	for _, s := range svcs {
		st, err := p.status(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
		views[s] = st
	}
	return views, nil
}

// waitAgreed waits until every given service answers, the leader they all
// name is among them and reports itself ready in a term above minTerm, and
// every member's HTTP address is known. It returns the leader's status.
func (p *project) waitAgreed(ctx context.Context, svcs []string, minTerm uint64, timeout time.Duration) *client.Status {
	p.t.Helper()
	var leader *client.Status
	testutil.Eventually(p.t, timeout, func() error {
		views, err := p.statuses(ctx, svcs)
		if err != nil {
			return err
		}
		lead := views[svcs[0]].LeaderID
		ls, ok := views[service(lead)]
		if lead == "" || !ok {
			return fmt.Errorf("%s names leader %q, not one of %v", svcs[0], lead, svcs)
		}
		if !ls.Ready || ls.LeaderID != ls.ID || ls.Term <= minTerm {
			return fmt.Errorf("%s is not a ready leader in a term above %d: %+v", lead, minTerm, ls)
		}
		for s, st := range views {
			if st.LeaderID != lead || st.Term != ls.Term {
				return fmt.Errorf("%s sees leader %q term %d, %s sees %q term %d", s, st.LeaderID, st.Term, lead, lead, ls.Term)
			}
		}
		for _, m := range ls.Members {
			if m.HTTPAddr == "" {
				return fmt.Errorf("member %s has no HTTP address yet", m.ID)
			}
		}
		leader = ls
		return nil
	})
	return leader
}

// waitHealthy waits until Docker reports every container healthy: the
// image's HEALTHCHECK (fencectl health) passes inside each of them.
func (p *project) waitHealthy(timeout time.Duration) {
	p.t.Helper()
	testutil.Eventually(p.t, timeout, func() error {
		for _, s := range p.services {
			out, err := exec.Command("docker", "inspect", "-f", "{{.State.Health.Status}}", p.container(s)).CombinedOutput()
			if err != nil {
				return fmt.Errorf("docker inspect %s: %v: %s", s, err, oneLine(out))
			}
			if h := strings.TrimSpace(string(out)); h != "healthy" {
				return fmt.Errorf("%s is %s", s, h)
			}
		}
		return nil
	})
}

// TestComposeKillLeader kills the leader's container with SIGKILL, acquires
// through another node, and starts the container again.
func TestComposeKillLeader(t *testing.T) {
	t.Parallel()
	p := newProject(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lead := p.waitAgreed(ctx, p.services, 0, 90*time.Second)
	t.Logf("cluster ready %v after up; leader %s, term %d", time.Since(p.started).Round(10*time.Millisecond), lead.ID, lead.Term)

	cl := p.client()
	g1, err := cl.Acquire(ctx, client.AcquireRequest{Key: "deploy", Holder: "a", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Release(ctx, client.ReleaseRequest{Key: "deploy", Holder: "a", Token: g1.Token}); err != nil {
		t.Fatal(err)
	}
	held, err := cl.Acquire(ctx, client.AcquireRequest{Key: "held", Holder: "a", TTL: "2m"})
	if err != nil {
		t.Fatal(err)
	}

	dead := service(lead.ID)
	var survivors []string
	for _, s := range p.services {
		if s != dead {
			survivors = append(survivors, s)
		}
	}
	p.docker("kill", "-s", "KILL", p.container(dead))
	killed := time.Now()
	next := p.waitAgreed(ctx, survivors, lead.Term, 30*time.Second)
	t.Logf("killed leader %s (%s); %s leads in term %d after %v", lead.ID, dead, next.ID, next.Term, time.Since(killed).Round(10*time.Millisecond))
	if state := p.docker("inspect", "-f", "{{.State.Status}}", p.container(dead)); state != "exited" {
		t.Fatalf("the killed container is %s; restart: unless-stopped must not restart a killed container", state)
	}

	sc := p.client(survivors...)
	g2, err := sc.Acquire(ctx, client.AcquireRequest{Key: "deploy", Holder: "b", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token <= g1.Token || g2.Epoch <= g1.Epoch {
		t.Fatalf("grant after killing the leader: %s (epoch %d); before: %s (epoch %d)", g2.Token, g2.Epoch, g1.Token, g1.Epoch)
	}
	if v, err := sc.Verify(ctx, "held", held.Token.String(), "a"); err != nil || !v.Allow {
		t.Fatalf("a grant acknowledged before the kill is lost: %+v %v", v, err)
	}

	p.docker("start", p.container(dead))
	started := time.Now()
	// The restarted node rejoins: it follows the same leader in the same
	// term and has applied everything the leader had applied.
	testutil.Eventually(t, 60*time.Second, func() error {
		ls, err := p.status(ctx, service(next.ID))
		if err != nil {
			return err
		}
		ns, err := p.status(ctx, dead)
		if err != nil {
			return fmt.Errorf("restarted %s: %w", dead, err)
		}
		if ns.LeaderID != ls.LeaderID || ns.Term != ls.Term {
			return fmt.Errorf("restarted %s sees leader %q term %d; %s sees %q term %d", dead, ns.LeaderID, ns.Term, ls.ID, ls.LeaderID, ls.Term)
		}
		if ns.AppliedIndex < ls.AppliedIndex {
			return fmt.Errorf("restarted %s applied %d, leader %d", dead, ns.AppliedIndex, ls.AppliedIndex)
		}
		return nil
	})
	t.Logf("restarted %s converged %v after docker start", dead, time.Since(started).Round(10*time.Millisecond))

	one := p.client(dead)
	if v, err := one.Verify(ctx, "deploy", g2.Token.String(), "b"); err != nil || !v.Allow {
		t.Fatalf("verify of the current grant through the restarted node: %+v %v", v, err)
	}
	if v, err := one.Verify(ctx, "deploy", g1.Token.String(), ""); err != nil || v.Allow || v.Reason != "superseded" {
		t.Fatalf("verify of the superseded grant through the restarted node: %+v %v", v, err)
	}
}

// TestComposeRestartKeepsData restarts every container: the state lives in
// the named volumes, so tokens keep growing and live grants stay held.
func TestComposeRestartKeepsData(t *testing.T) {
	t.Parallel()
	p := newProject(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lead := p.waitAgreed(ctx, p.services, 0, 90*time.Second)
	for _, s := range p.services {
		if u := p.docker("inspect", "-f", "{{.Config.User}}", p.container(s)); u != imageUser {
			t.Fatalf("%s runs as %q, want %s", s, u, imageUser)
		}
	}
	p.waitHealthy(90 * time.Second)
	t.Logf("all containers healthy %v after up", time.Since(p.started).Round(10*time.Millisecond))

	cl := p.client()
	g1, err := cl.Acquire(ctx, client.AcquireRequest{Key: "orders", Holder: "a", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Release(ctx, client.ReleaseRequest{Key: "orders", Holder: "a", Token: g1.Token}); err != nil {
		t.Fatal(err)
	}
	held, err := cl.Acquire(ctx, client.AcquireRequest{Key: "held", Holder: "a", TTL: "5m"})
	if err != nil {
		t.Fatal(err)
	}

	restarted := time.Now()
	p.compose("restart", "-t", "10")
	after := p.waitAgreed(ctx, p.services, lead.Term, 90*time.Second)
	t.Logf("cluster ready %v after docker-compose restart; leader %s, term %d", time.Since(restarted).Round(10*time.Millisecond), after.ID, after.Term)

	cl = p.client()
	g2, err := cl.Acquire(ctx, client.AcquireRequest{Key: "orders", Holder: "b", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token <= g1.Token || g2.Epoch <= g1.Epoch {
		t.Fatalf("grant after restarting every node: %s (epoch %d); before: %s (epoch %d)", g2.Token, g2.Epoch, g1.Token, g1.Epoch)
	}
	if _, err := cl.Acquire(ctx, client.AcquireRequest{Key: "held", Holder: "c", TTL: "30s"}); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("acquire of a key held across the restart: %v, want held", err)
	}
	if v, err := cl.Verify(ctx, "held", held.Token.String(), "a"); err != nil || !v.Allow {
		t.Fatalf("verify of the grant held across the restart: %+v %v", v, err)
	}
}

// TestCompose5Nodes brings up the five-node variant: five voters agree on a
// leader, and a grant made through one node verifies through another.
func TestCompose5Nodes(t *testing.T) {
	t.Parallel()
	p := newProject(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lead := p.waitAgreed(ctx, p.services, 0, 90*time.Second)
	t.Logf("5-node cluster ready %v after up; leader %s", time.Since(p.started).Round(10*time.Millisecond), lead.ID)
	voters := 0
	for _, m := range lead.Members {
		if m.Voter {
			voters++
		}
	}
	if voters != 5 || len(lead.Members) != 5 {
		t.Fatalf("members: %+v, want 5 voters", lead.Members)
	}
	g, err := p.client("fenced5").Acquire(ctx, client.AcquireRequest{Key: "five", Holder: "a", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := p.client("fenced1").Verify(ctx, "five", g.Token.String(), "a"); err != nil || !v.Allow {
		t.Fatalf("verify through fenced1 of a grant made through fenced5: %+v %v", v, err)
	}

	// fencectl inside a container sees every member ready, at the addresses
	// the members advertise on the compose network.
	var h struct {
		Leader  string `json:"leader"`
		Members []struct {
			ID     string `json:"id"`
			Health string `json:"health"`
		} `json:"members"`
	}
	out := p.docker("exec", p.container("fenced3"), "/fencectl", "status", "-o", "json")
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("fencectl status -o json in fenced3: %v\n%s", err, out)
	}
	if h.Leader == "" || len(h.Members) != 5 {
		t.Fatalf("fencectl status in fenced3: %s", out)
	}
	for _, m := range h.Members {
		if m.Health != "ready" {
			t.Fatalf("fencectl status in fenced3: %s is %s\n%s", m.ID, m.Health, out)
		}
	}

	// fencectl on the host works through the published ports.
	fencectl, err := proccluster.Fencectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, fencectl, "selftest", "--endpoints", strings.Join(p.endpoints(p.services), ","))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fencectl selftest from the host: %v\n%s", err, out)
	}
}

func oneLine(b []byte) string {
	return strings.Join(strings.Fields(string(bytes.TrimSpace(b))), " ")
}
