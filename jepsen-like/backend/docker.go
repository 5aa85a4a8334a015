package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/internal/freeport"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// The docker backend runs the compose cluster of the fenced image
// (docker-compose.yml, plus docker-compose.5.yml for five nodes) under a
// compose project of its own, fencedjepsen-PID-RANDOM, with free host ports,
// and an override file it generates: every service gets `restart: "no"`, so
// Docker never restarts a killed node behind the harness's back, and the
// harness's fenced flags as its command. Node nN is the service fencedN; the
// harness reaches it through its published port 127.0.0.1:FENCEDN_PORT.
//
// Faults are Docker operations: docker kill -s KILL (crash), docker start
// (restart), docker stop (SIGTERM), docker pause/unpause (the cgroup freezer).
// A partition replaces the filter table inside each container's network
// namespace (nsenter -t PID -n iptables-restore), by peer address: the rules
// drop container-to-container traffic only, so the host still reaches every
// node through its published port, as a client on its side would.
const dockerPrefix = "fencedjepsen-"

// Docker runs the nodes as the containers of a compose project.
type Docker struct {
	cfg Config
	log hclog.Logger

	root     string
	project  string
	files    []string
	env      []string
	ports    map[string]string // node id -> host port of its HTTP API
	image    string
	ownImage bool
	ipt      string
	partErr  error

	mu         sync.Mutex
	containers map[string]string // node id -> container id
	down       map[string]bool
	paused     map[string]bool
	grudge     Grudge
	up         bool
	closed     bool
}

// NewDocker returns a docker backend; Start brings the compose project up.
func NewDocker(cfg Config, log hclog.Logger) *Docker {
	return &Docker{cfg: cfg, log: log.Named("docker"), ports: map[string]string{},
		containers: map[string]string{}, down: map[string]bool{}, paused: map[string]bool{}}
}

// DockerUsable reports whether the docker backend can run here, and why not:
// a Docker engine must answer and docker-compose must be installed.
func DockerUsable() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Errorf("no Docker engine answers (docker info: %v: %s)", err, oneLine(out))
	}
	if out, err := exec.CommandContext(ctx, "docker-compose", "version").CombinedOutput(); err != nil {
		return fmt.Errorf("docker-compose is missing (docker-compose version: %v: %s)", err, oneLine(out))
	}
	return nil
}

// dockerCanPartition reports whether iptables rules can be installed in a
// container's network namespace from here: that takes root, nsenter and
// iptables on the host (the image has no iptables of its own).
func dockerCanPartition() (string, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("not root: nsenter into a container's network namespace needs root")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return "", errors.New("nsenter (util-linux) is missing")
	}
	return iptablesCmd()
}

// Name implements Backend.
func (d *Docker) Name() string { return "docker" }

func (d *Docker) ids() []string {
	var out []string
	for i := 1; i <= d.cfg.Nodes; i++ {
		out = append(out, fmt.Sprintf("n%d", i))
	}
	return out
}

// service is the compose service of node nN.
func service(id string) string { return "fenced" + strings.TrimPrefix(id, "n") }

// Start implements Backend.
func (d *Docker) Start(ctx context.Context) error {
	if err := DockerUsable(); err != nil {
		return fmt.Errorf("docker backend: %w", err)
	}
	root, err := proccluster.ModuleRoot()
	if err != nil {
		return err
	}
	d.root = root
	CleanStaleDocker(ctx, d.log)
	d.project = fmt.Sprintf("%s%d-%s", dockerPrefix, os.Getpid(), randHex(3))
	d.image = d.cfg.Image
	if d.image == "" {
		tag := fmt.Sprintf("fenced:jepsen-%d-%s", os.Getpid(), randHex(3))
		began := time.Now()
		if _, err := BuildImage(ctx, root, tag); err != nil {
			return err
		}
		d.image, d.ownImage = tag, true
		d.log.Info("image built", "image", tag, "took", time.Since(began).Round(100*time.Millisecond))
	}
	args, dropped := KnownFlags(d.imageHelp(ctx), d.cfg.Args)
	if len(dropped) > 0 {
		d.log.Warn("this fenced image does not know these flags: not passed", "flags", dropped)
	}
	if err := os.MkdirAll(d.cfg.Dir, 0o755); err != nil {
		return err
	}
	override := filepath.Join(d.cfg.Dir, "docker-compose.jepsen.yml")
	if err := os.WriteFile(override, []byte(composeOverride(d.ids(), args)), 0o644); err != nil {
		return err
	}
	d.files = []string{filepath.Join(root, "docker-compose.yml")}
	if d.cfg.Nodes == 5 {
		d.files = append(d.files, filepath.Join(root, "docker-compose.5.yml"))
	} else if d.cfg.Nodes != 3 {
		return fmt.Errorf("docker backend: the compose cluster has 3 or 5 nodes, not %d", d.cfg.Nodes)
	}
	d.files = append(d.files, override)
	ports, err := freePorts(d.cfg.Nodes)
	if err != nil {
		return err
	}
	d.env = []string{"FENCED_IMAGE=" + d.image}
	for i, id := range d.ids() {
		d.ports[id] = ports[i]
		d.env = append(d.env, fmt.Sprintf("FENCED%d_PORT=%s", i+1, ports[i]))
	}
	d.up = true
	if _, err := d.compose(ctx, 3*time.Minute, "up", "-d"); err != nil {
		return err
	}
	for _, id := range d.ids() {
		out, err := d.compose(ctx, time.Minute, "ps", "-q", service(id))
		if err != nil {
			return err
		}
		if out == "" {
			return fmt.Errorf("docker backend: service %s has no container", service(id))
		}
		d.containers[id] = out
	}
	d.log.Info("compose project up", "project", d.project, "image", d.image, "ports", d.ports)
	// Every container starts with an empty, accepting filter table, and we
	// check that iptables works inside the containers before relying on it.
	if d.ipt, d.partErr = dockerCanPartition(); d.partErr == nil {
		if err := d.install(ctx); err != nil {
			d.partErr = fmt.Errorf("iptables does not work inside the containers: %w", err)
		}
	}
	if d.partErr != nil {
		d.log.Warn("partitions unavailable", "error", d.partErr)
	}
	if _, err := d.Leader(ctx, time.Minute); err != nil {
		return fmt.Errorf("docker cluster: %w", err)
	}
	return nil
}

// BuildImage builds the fenced image of the module at root under tag, with
// scripts/docker-build.sh, and returns what the script printed.
func BuildImage(ctx context.Context, root, tag string) (string, error) {
	ctxDir, err := os.MkdirTemp("", "fenced-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(ctxDir)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(bctx, filepath.Join(root, "scripts", "docker-build.sh"), tag)
	cmd.Dir = root
	path := os.Getenv("PATH")
	if _, err := exec.LookPath("go"); err != nil {
		path = filepath.Join(build.Default.GOROOT, "bin") + string(os.PathListSeparator) + path
	}
	cmd.Env = append(os.Environ(), "FENCED_DOCKER_CONTEXT="+ctxDir, "PATH="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build image %s: %v\n%s", tag, err, out)
	}
	return string(out), nil
}

// imageHelp returns fenced --help of the image, to pass only the flags it
// knows.
func (d *Docker) imageHelp(ctx context.Context) string {
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, _ := exec.CommandContext(hctx, "docker", "run", "--rm", "--network", "none", d.image, "--help").CombinedOutput()
	return string(out)
}

// KnownFlags keeps the flags of args (each "--flag value" or "--flag=value")
// that a fenced --help output names, and returns the others apart, so a
// harness newer than the fenced it tests still runs it.
func KnownFlags(help string, args []string) (kept, dropped []string) {
	if help == "" {
		return args, nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			kept = append(kept, a)
			continue
		}
		name, _, hasValue := strings.Cut(a, "=")
		group := []string{a}
		if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			group = append(group, args[i+1])
			i++
		}
		if regexp.MustCompile(`(?m)^\s*(-\w, )?` + regexp.QuoteMeta(name) + `[\s=\[]`).MatchString(help) {
			kept = append(kept, group...)
		} else {
			dropped = append(dropped, name)
		}
	}
	return kept, dropped
}

// composeOverride is the generated compose file: no restart policy, and the
// harness's flags as every node's command.
func composeOverride(ids, args []string) string {
	cmd, _ := json.Marshal(args)
	if args == nil {
		cmd = []byte("[]")
	}
	var sb strings.Builder
	sb.WriteString("# Generated by the chaos suite: Docker must never restart a node behind its back,\n# and every node runs with the suite's fenced flags.\nservices:\n")
	for _, id := range ids {
		fmt.Fprintf(&sb, "  %s:\n    restart: \"no\"\n    command: %s\n", service(id), cmd)
	}
	return sb.String()
}

func (d *Docker) compose(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	full := []string{"-p", d.project}
	for _, f := range d.files {
		full = append(full, "-f", f)
	}
	cmd := exec.CommandContext(cctx, "docker-compose", append(full, args...)...)
	cmd.Dir = d.root
	cmd.Env = append(os.Environ(), d.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker-compose %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func dockerCmd(ctx context.Context, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, "docker", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, oneLine(out))
	}
	return strings.TrimSpace(string(out)), nil
}

func (d *Docker) container(id string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.containers[id]; c != "" {
		return c, nil
	}
	return "", fmt.Errorf("no node %q", id)
}

// Project is the compose project's name.
func (d *Docker) Project() string { return d.project }

// Container returns the id of a node's container, or "".
func (d *Docker) Container(id string) string {
	c, _ := d.container(id)
	return c
}

// Nodes implements Backend.
func (d *Docker) Nodes() []string { return d.ids() }

// Endpoints implements Backend.
func (d *Docker) Endpoints() []string {
	var out []string
	for _, id := range d.ids() {
		out = append(out, d.Endpoint(id))
	}
	return out
}

// Endpoint implements Backend: the node's published port on loopback.
func (d *Docker) Endpoint(id string) string {
	if p := d.ports[id]; p != "" {
		return net.JoinHostPort("127.0.0.1", p)
	}
	return ""
}

func (d *Docker) set(id string, down, paused bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down[id], d.paused[id] = down, paused
}

// Kill implements Backend: SIGKILL, which also ends a paused container. The
// container stays down: its restart policy is "no".
func (d *Docker) Kill(ctx context.Context, id string) error {
	c, err := d.container(id)
	if err != nil {
		return err
	}
	if _, err := dockerCmd(ctx, "kill", "-s", "KILL", c); err != nil && d.Running(id) {
		return err
	}
	d.set(id, true, false)
	// docker kill returns once the signal is sent; wait for the end.
	return testutil.Poll(20*time.Second, func() error {
		if d.Running(id) {
			return fmt.Errorf("container of %s still running after docker kill", id)
		}
		return nil
	})
}

// Stop implements Backend: docker stop sends SIGTERM to fenced (the
// container's first process) and waits for it to exit, killing it only
// after 15 s, the compose file's stop_grace_period.
func (d *Docker) Stop(ctx context.Context, id string) error {
	c, err := d.container(id)
	if err != nil {
		return err
	}
	if _, err := dockerCmd(ctx, "stop", "-t", "15", c); err != nil {
		return err
	}
	d.set(id, true, false)
	return nil
}

// Restart implements Backend: docker start. The container has a new process
// and network namespace, without rules, and maybe a new address: the
// current grudge is installed again, everywhere.
func (d *Docker) Restart(ctx context.Context, id string) error {
	c, err := d.container(id)
	if err != nil {
		return err
	}
	if d.Running(id) {
		return nil
	}
	if _, err := dockerCmd(ctx, "start", c); err != nil {
		return err
	}
	d.set(id, false, false)
	d.mu.Lock()
	partitioned := len(d.grudge) > 0
	d.mu.Unlock()
	if partitioned && d.partErr == nil {
		return d.install(ctx)
	}
	return nil
}

// Pause implements Backend: docker pause freezes every process of the
// container (the cgroup freezer), which to its peers is a SIGSTOP.
func (d *Docker) Pause(ctx context.Context, id string) error {
	c, err := d.container(id)
	if err != nil {
		return err
	}
	if _, err := dockerCmd(ctx, "pause", c); err != nil {
		return err
	}
	d.set(id, false, true)
	return nil
}

// Resume implements Backend.
func (d *Docker) Resume(ctx context.Context, id string) error {
	c, err := d.container(id)
	if err != nil {
		return err
	}
	if _, err := dockerCmd(ctx, "unpause", c); err != nil {
		return err
	}
	d.set(id, false, false)
	return nil
}

// CanPartition implements Backend.
func (d *Docker) CanPartition() error {
	if d.partErr != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, d.partErr)
	}
	return nil
}

// Partition implements Backend. "n cannot hear m" drops m's packets on n's
// INPUT by source and n's packets on m's OUTPUT by destination, in the
// containers' own network namespaces. Each container's filter table is
// replaced whole, so the grudge replaces any earlier one; a container that
// is down gets it when it starts again.
func (d *Docker) Partition(ctx context.Context, g Grudge) error {
	if err := d.CanPartition(); err != nil {
		return err
	}
	for n, peers := range g {
		for _, m := range append([]string{n}, peers...) {
			if d.ports[m] == "" {
				return fmt.Errorf("partition: unknown node %s", m)
			}
		}
	}
	d.mu.Lock()
	d.grudge = g
	d.mu.Unlock()
	err := d.install(ctx)
	d.log.Debug("partition installed", "grudge", g.String())
	return err
}

// Heal implements Backend.
func (d *Docker) Heal(ctx context.Context) error {
	if d.CanPartition() != nil {
		return nil
	}
	return d.Partition(ctx, nil)
}

// netInfo is a running container's process id and address.
type netInfo struct{ pid, ip string }

func (d *Docker) netInfo(ctx context.Context, id string) (netInfo, bool) {
	c, err := d.container(id)
	if err != nil {
		return netInfo{}, false
	}
	out, err := dockerCmd(ctx, "inspect", "-f", "{{.State.Pid}} {{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", c)
	if err != nil {
		return netInfo{}, false
	}
	pid, ip, _ := strings.Cut(out, " ")
	if pid == "" || pid == "0" || ip == "" {
		return netInfo{}, false
	}
	return netInfo{pid: pid, ip: ip}, true
}

// install writes the current grudge into every running container, reading
// the process ids and addresses afresh (a restarted container has new ones).
func (d *Docker) install(ctx context.Context) error {
	d.mu.Lock()
	g := d.grudge
	d.mu.Unlock()
	info := map[string]netInfo{}
	for _, id := range d.ids() {
		if ni, ok := d.netInfo(ctx, id); ok {
			info[id] = ni
		}
	}
	per := map[string][]string{}
	for n, peers := range g {
		for _, m := range peers {
			// A node that is down has no address: its rules come when it
			// starts again, which installs the grudge anew.
			if ip := info[m].ip; ip != "" {
				per[n] = append(per[n], fmt.Sprintf("-A INPUT -s %s/32 -j DROP", ip))
			}
			if ip := info[n].ip; ip != "" {
				per[m] = append(per[m], fmt.Sprintf("-A OUTPUT -d %s/32 -j DROP", ip))
			}
		}
	}
	var errs []error
	for _, id := range d.ids() {
		ni, ok := info[id]
		if !ok {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(cctx, "nsenter", "-t", ni.pid, "-n", d.ipt)
		cmd.Stdin = strings.NewReader(rules(per[id]))
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("iptables in %s (pid %s): %v: %s", id, ni.pid, err, oneLine(out)))
		}
	}
	return errors.Join(errs...)
}

// Leader implements Backend.
func (d *Docker) Leader(ctx context.Context, timeout time.Duration) (string, error) {
	return leaderOf(ctx, d.cfg, d.ids(), d.Endpoint, func(id string) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return !d.down[id] && !d.paused[id]
	}, timeout)
}

// Running implements Backend: Docker's view (a paused container runs).
func (d *Docker) Running(id string) bool {
	c, err := d.container(id)
	if err != nil {
		return false
	}
	out, err := dockerCmd(context.Background(), "inspect", "-f", "{{.State.Running}}", c)
	return err == nil && out == "true"
}

// LogPaths implements Backend: each container's log (every start of it)
// as docker logs shows it now, written next to the data.
func (d *Docker) LogPaths() map[string]string {
	out := map[string]string{}
	for _, id := range d.ids() {
		c, err := d.container(id)
		if err != nil {
			continue
		}
		path := filepath.Join(d.cfg.Dir, id+".log")
		f, err := os.Create(path)
		if err != nil {
			d.log.Warn("node log", "node", id, "error", err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "docker", "logs", c)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Run(); err != nil {
			d.log.Warn("docker logs", "node", id, "error", err)
		}
		cancel()
		f.Close()
		out[id] = path
	}
	return out
}

// Close implements Backend: the project goes down with its volumes, and the
// image too when the backend built it.
func (d *Docker) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	var paused []string
	for id, p := range d.paused {
		if p {
			paused = append(paused, id)
		}
	}
	d.mu.Unlock()
	ctx := context.Background()
	var errs []error
	for _, id := range paused {
		_ = d.Resume(ctx, id)
	}
	if d.up {
		if _, err := d.compose(ctx, 3*time.Minute, "down", "-v", "--remove-orphans", "-t", "1"); err != nil {
			errs = append(errs, err)
		}
	}
	if d.ownImage {
		if _, err := dockerCmd(ctx, "rmi", "-f", d.image); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// The names of what test processes start in Docker carry the process's
// pid, so that what a process left behind can be told from what a live one
// uses: compose projects named by ProjectName (the docker backend's, the
// docker package's tests'), and images tagged fenced:jepsen-PID-… or
// fenced:test-PID-….
var (
	staleProject = regexp.MustCompile(`^(?:` + dockerPrefix + `|fencedtest-|fenceddns-)(\d+)-[0-9a-f]+[_-]`)
	staleImage   = regexp.MustCompile(`^fenced:(?:jepsen|test)-(\d+)-[0-9a-f]+$`)
)

// ProjectName returns a compose project name of this process, starting
// with prefix ("fencedtest-", "fenceddns-"): CleanStaleDocker and
// CleanOwnDocker recognise it.
func ProjectName(prefix string) string {
	return fmt.Sprintf("%s%d-%s", prefix, os.Getpid(), randHex(3))
}

// ImageTag returns an image tag of this process (fenced:test-PID-…).
func ImageTag() string { return fmt.Sprintf("fenced:test-%d-%s", os.Getpid(), randHex(3)) }

// CleanStaleDocker removes the containers, networks, volumes and images of
// docker backend runs whose harness process is gone (one killed with -9
// cannot take its project down).
func CleanStaleDocker(ctx context.Context, log hclog.Logger) {
	cleanDocker(ctx, log, func(pid int) bool { return !alive(pid) })
}

// CleanOwnDocker removes what this process started in Docker: a test
// binary does it just before its -timeout ends it, since the cleanups of
// its tests will not run then.
func CleanOwnDocker(ctx context.Context, log hclog.Logger) {
	self := os.Getpid()
	cleanDocker(ctx, log, func(pid int) bool { return pid == self })
}

func cleanDocker(ctx context.Context, log hclog.Logger, gone func(pid int) bool) {
	dead := func(name string, re *regexp.Regexp) bool {
		m := re.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		return gone(pid)
	}
	list := func(args ...string) []string {
		out, err := dockerCmd(ctx, args...)
		if err != nil {
			return nil
		}
		return strings.Fields(out)
	}
	for _, c := range list("ps", "-a", "--format", "{{.Names}}") {
		if dead(c, staleProject) {
			log.Info("removing a container of a dead run", "container", c)
			_, _ = dockerCmd(ctx, "rm", "-f", "-v", c)
		}
	}
	for _, n := range list("network", "ls", "--format", "{{.Name}}") {
		if dead(n, staleProject) {
			log.Info("removing a network of a dead run", "network", n)
			_, _ = dockerCmd(ctx, "network", "rm", n)
		}
	}
	for _, v := range list("volume", "ls", "-q") {
		if dead(v, staleProject) {
			log.Info("removing a volume of a dead run", "volume", v)
			_, _ = dockerCmd(ctx, "volume", "rm", "-f", v)
		}
	}
	for _, i := range list("images", "--format", "{{.Repository}}:{{.Tag}}", "fenced") {
		if dead(i, staleImage) {
			log.Info("removing an image of a dead run", "image", i)
			_, _ = dockerCmd(ctx, "rmi", "-f", i)
		}
	}
}

// freePorts returns n host ports that were free a moment ago
// (freeport.Addrs: below the ephemeral range).
func freePorts(n int) ([]string, error) {
	addrs, err := freeport.Addrs(n)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		_, out[i], _ = net.SplitHostPort(a)
	}
	return out, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func oneLine(b []byte) string {
	return strings.Join(strings.Fields(string(b)), " ")
}
