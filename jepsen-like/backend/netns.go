package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// The netns backend's topology, for a run with number R (1..250) of the
// harness process P:
//
//	root namespace (harness)        hub namespace fj-R-P-hub          node namespaces fj-R-P-nI
//	  fjRh 10.213.R.1/24  <-veth->  fjRhb ─┐                            fjRnI 10.213.R.(10+I)/24
//	                                       br0 (bridge) ─ fjRnIb <-veth->
//
// The bridge lives in its own hub namespace, not in the root one, so the
// host's firewall never sees the nodes' traffic: Docker sets the root
// namespace's FORWARD policy to DROP, and with br_netfilter loaded
// (bridge-nf-call-iptables=1) bridged frames would be filtered by it. A fresh
// namespace has an empty, accepting ruleset, and the backend also turns
// bridge-nf-call-iptables off inside the hub. The harness, in the root
// namespace, reaches every node through fjRh; partitions are iptables DROP
// rules inside the node namespaces, by peer address, so they never cut the
// harness off.
const (
	nsPrefix   = "fj-"
	subnetBase = "10.213."
	httpPort   = 7700
	raftPort   = 7701
	// lockPath serialises setup and stale cleanup between concurrent runs.
	lockName = "fenced-jepsen-netns.lock"
)

// Netns runs every node in its own network namespace, as root.
type Netns struct {
	cfg Config
	log hclog.Logger

	run      int
	ipt      string
	hub      string
	hostLink string
	ns       map[string]string // node id -> namespace
	ips      map[string]string // node id -> address
	c        *proccluster.Cluster
	closed   bool
	disks    *smallDisks // with Config.DiskSize
}

// NewNetns returns a netns backend; Start creates the network and launches it.
func NewNetns(cfg Config, log hclog.Logger) *Netns {
	return &Netns{cfg: cfg, log: log.Named("netns"), ns: map[string]string{}, ips: map[string]string{}}
}

// NetnsUsable reports whether the netns backend can run here, and why not.
func NetnsUsable() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("the ip command (iproute2) is missing")
	}
	if _, err := iptablesCmd(); err != nil {
		return err
	}
	return nil
}

// iptablesCmd finds an iptables-restore that works: the nft-backed default,
// else the legacy one.
func iptablesCmd() (string, error) {
	for _, c := range []string{"iptables-restore", "iptables-nft-restore", "iptables-legacy-restore"} {
		if _, err := exec.LookPath(c); err == nil {
			return c, nil
		}
	}
	return "", errors.New("iptables is missing (apt-get install iptables)")
}

// Name implements Backend.
func (b *Netns) Name() string { return "netns" }

func ipCmd(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "ip", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func inNS(ctx context.Context, ns string, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("in %s: %s: %v: %s", ns, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Start implements Backend.
func (b *Netns) Start(ctx context.Context) error {
	if err := NetnsUsable(); err != nil {
		return fmt.Errorf("netns backend: %w", err)
	}
	ipt, err := iptablesCmd()
	if err != nil {
		return err
	}
	b.ipt = ipt
	unlock, err := lockFile(filepath.Join(os.TempDir(), lockName))
	if err != nil {
		return err
	}
	err = b.setup(ctx)
	unlock()
	if err != nil {
		b.teardown()
		return err
	}
	if b.cfg.DiskSize != "" {
		d, err := mountSmallDisks(b.cfg.Dir, b.cfg.Nodes, b.cfg.DiskSize)
		if err != nil {
			b.teardown()
			return err
		}
		b.disks = d
	}
	var httpAddrs, raftAddrs []string
	for _, id := range b.ids() {
		httpAddrs = append(httpAddrs, net.JoinHostPort(b.ips[id], strconv.Itoa(httpPort)))
		raftAddrs = append(raftAddrs, net.JoinHostPort(b.ips[id], strconv.Itoa(raftPort)))
	}
	c, err := proccluster.Start(proccluster.Options{
		Nodes: b.cfg.Nodes, Dir: b.cfg.Dir, Binary: b.cfg.Binary, ExtraArgs: b.cfg.Args,
		HTTPAddrs: httpAddrs, RaftAddrs: raftAddrs,
		Wrap: func(id string) []string { return []string{"ip", "netns", "exec", b.ns[id]} },
	})
	if err != nil {
		b.teardown()
		_ = b.disks.unmount()
		return fmt.Errorf("start netns cluster: %w", err)
	}
	b.c = c
	if err := b.checkExec(); err != nil {
		return err
	}
	if _, err := b.Leader(ctx, 30*time.Second); err != nil {
		return fmt.Errorf("netns cluster: %w", err)
	}
	return nil
}

func (b *Netns) ids() []string {
	var out []string
	for i := 1; i <= b.cfg.Nodes; i++ {
		out = append(out, fmt.Sprintf("n%d", i))
	}
	return out
}

// setup removes what dead runs left behind, picks a free run number and
// builds the hub, the bridge, the node namespaces and the veth pairs.
func (b *Netns) setup(ctx context.Context) error {
	used := CleanStale(ctx, b.log)
	routes, _ := exec.CommandContext(ctx, "ip", "-4", "route").Output()
	for r := 1; r <= 250; r++ {
		if !used[r] && !strings.Contains(string(routes), fmt.Sprintf("%s%d.", subnetBase, r)) {
			b.run = r
			break
		}
	}
	if b.run == 0 {
		return errors.New("netns backend: no free run number (10.213.1-250.0/24 all in use)")
	}
	pid := os.Getpid()
	b.hub = fmt.Sprintf("%s%d-%d-hub", nsPrefix, b.run, pid)
	b.hostLink = fmt.Sprintf("fj%dh", b.run)
	for i, id := range b.ids() {
		b.ns[id] = fmt.Sprintf("%s%d-%d-%s", nsPrefix, b.run, pid, id)
		b.ips[id] = fmt.Sprintf("%s%d.%d", subnetBase, b.run, 11+i)
	}
	steps := [][]string{
		{"netns", "add", b.hub},
		{"-n", b.hub, "link", "set", "lo", "up"},
		{"-n", b.hub, "link", "add", "br0", "type", "bridge"},
		{"-n", b.hub, "link", "set", "br0", "up"},
		// The harness's leg: created in the root namespace with its peer
		// directly inside the hub, so nothing is left behind in the root
		// namespace once the hub is deleted.
		{"link", "add", b.hostLink, "type", "veth", "peer", "name", b.hostLink + "b", "netns", b.hub},
		{"-n", b.hub, "link", "set", b.hostLink + "b", "master", "br0"},
		{"-n", b.hub, "link", "set", b.hostLink + "b", "up"},
		{"addr", "add", fmt.Sprintf("%s%d.1/24", subnetBase, b.run), "dev", b.hostLink},
		{"link", "set", b.hostLink, "up"},
	}
	for i, id := range b.ids() {
		ns, link := b.ns[id], fmt.Sprintf("fj%dn%d", b.run, i+1)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", b.hub, "link", "add", link + "b", "type", "veth", "peer", "name", link, "netns", ns},
			[]string{"-n", b.hub, "link", "set", link + "b", "master", "br0"},
			[]string{"-n", b.hub, "link", "set", link + "b", "up"},
			[]string{"-n", ns, "addr", "add", b.ips[id] + "/24", "dev", link},
			[]string{"-n", ns, "link", "set", link, "up"},
		)
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return fmt.Errorf("netns setup: %w", err)
		}
	}
	// Bridged frames skip the hub's iptables: it has no rules, but this
	// keeps br_netfilter out of the picture entirely. Best effort: the
	// sysctl exists only where br_netfilter is loaded.
	_ = inNS(ctx, b.hub, "", "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=0")
	// Every node starts with an empty, accepting filter table, and we check
	// that iptables works inside the namespaces before relying on it.
	for _, id := range b.ids() {
		if err := inNS(ctx, b.ns[id], rules(nil), b.ipt); err != nil {
			return fmt.Errorf("netns setup: iptables does not work inside a namespace: %w", err)
		}
	}
	b.log.Info("network ready", "run", b.run, "subnet", fmt.Sprintf("%s%d.0/24", subnetBase, b.run), "hub", b.hub, "iptables", b.ipt)
	return nil
}

// checkExec makes sure each node's process is fenced itself and not an ip
// process that forked it: ip netns exec execs in place, so SIGKILL and
// SIGSTOP reach fenced. A wrapper that forked would make kill -9 a lie.
func (b *Netns) checkExec() error {
	want, err := filepath.EvalSymlinks(b.cfg.Binary)
	if err != nil {
		want = b.cfg.Binary
	}
	for _, n := range b.c.Nodes {
		pid := n.PID()
		// ip execs fenced right after entering the namespace; there is no
		// event to wait on, so poll /proc until the exec happened.
		err := testutil.Poll(5*time.Second, func() error {
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			if err == nil && exe == want {
				return nil
			}
			return fmt.Errorf("netns: process %d of %s runs %q, not fenced (%q): signals would not reach fenced", pid, n.ID, exe, want)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// rules returns an iptables-restore input that replaces the filter table
// with accepting policies and the given rules.
func rules(lines []string) string {
	var sb strings.Builder
	sb.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for _, l := range lines {
		sb.WriteString(l + "\n")
	}
	sb.WriteString("COMMIT\n")
	return sb.String()
}

// CanPartition implements Backend: Start refuses to run without iptables.
func (b *Netns) CanPartition() error { return nil }

// Partition implements Backend. "n cannot hear m" drops m's packets twice:
// on n's INPUT by source and on m's OUTPUT by destination. Each node's table
// is replaced whole, so the grudge replaces any earlier one.
func (b *Netns) Partition(ctx context.Context, g Grudge) error {
	per := map[string][]string{}
	for n, peers := range g {
		for _, m := range peers {
			if b.ips[n] == "" || b.ips[m] == "" {
				return fmt.Errorf("partition: unknown node in %s x %s", n, m)
			}
			per[n] = append(per[n], fmt.Sprintf("-A INPUT -s %s/32 -j DROP", b.ips[m]))
			per[m] = append(per[m], fmt.Sprintf("-A OUTPUT -d %s/32 -j DROP", b.ips[n]))
		}
	}
	var errs []error
	for _, id := range b.ids() {
		if err := inNS(ctx, b.ns[id], rules(per[id]), b.ipt); err != nil {
			errs = append(errs, err)
		}
	}
	b.log.Debug("partition installed", "grudge", g.String())
	return errors.Join(errs...)
}

// Heal implements Backend.
func (b *Netns) Heal(ctx context.Context) error { return b.Partition(ctx, nil) }

// Nodes implements Backend.
func (b *Netns) Nodes() []string { return b.ids() }

// Endpoints implements Backend.
func (b *Netns) Endpoints() []string { return b.c.Endpoints() }

// Endpoint implements Backend.
func (b *Netns) Endpoint(id string) string {
	if n := b.c.Node(id); n != nil {
		return n.HTTPAddr
	}
	return ""
}

func (b *Netns) node(id string) (*proccluster.Node, error) {
	if n := b.c.Node(id); n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("no node %q", id)
}

// Kill implements Backend.
func (b *Netns) Kill(_ context.Context, id string) error {
	n, err := b.node(id)
	if err != nil {
		return err
	}
	b.c.Kill(n)
	return nil
}

// Stop implements Backend. ip netns exec execs fenced in place, so SIGTERM
// reaches fenced itself.
func (b *Netns) Stop(_ context.Context, id string) error {
	n, err := b.node(id)
	if err != nil {
		return err
	}
	b.c.Terminate(n)
	return nil
}

// Restart implements Backend.
func (b *Netns) Restart(_ context.Context, id string) error {
	n, err := b.node(id)
	if err != nil {
		return err
	}
	if n.Running() {
		return nil
	}
	return b.c.StartNode(n)
}

// Pause implements Backend.
func (b *Netns) Pause(_ context.Context, id string) error {
	n, err := b.node(id)
	if err != nil {
		return err
	}
	return b.c.Pause(n)
}

// Resume implements Backend.
func (b *Netns) Resume(_ context.Context, id string) error {
	n, err := b.node(id)
	if err != nil {
		return err
	}
	return b.c.Resume(n)
}

// Leader implements Backend.
func (b *Netns) Leader(ctx context.Context, timeout time.Duration) (string, error) {
	return leaderOf(ctx, b.cfg, b.ids(), b.Endpoint, func(id string) bool {
		n := b.c.Node(id)
		return n != nil && n.Running() && !n.Paused()
	}, timeout)
}

// Running implements Backend.
func (b *Netns) Running(id string) bool {
	n := b.c.Node(id)
	return n != nil && n.Running()
}

// LogPaths implements Backend.
func (b *Netns) LogPaths() map[string]string {
	out := map[string]string{}
	for _, n := range b.c.Nodes {
		out[n.ID] = n.LogPath
	}
	return out
}

// Close implements Backend: stop the nodes, then delete the namespaces
// (which deletes their veths and the bridge with them).
func (b *Netns) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if b.c != nil {
		b.c.Stop()
	}
	return errors.Join(b.disks.unmount(), b.teardown())
}

// CanFillDisk implements DiskFiller.
func (b *Netns) CanFillDisk() error {
	if b.disks == nil {
		return fmt.Errorf("%w: the nodes' data dirs are not on small disks of their own (DiskSize)", ErrUnsupported)
	}
	return nil
}

// FillDisk implements DiskFiller.
func (b *Netns) FillDisk(_ context.Context, id string) error {
	n, err := b.node(id)
	if err != nil {
		return err
	}
	return fillDir(n.DataDir)
}

// FreeDisk implements DiskFiller.
func (b *Netns) FreeDisk(_ context.Context, id string) error {
	n, err := b.node(id)
	if err != nil {
		return err
	}
	return freeDir(n.DataDir)
}

func (b *Netns) teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, id := range b.ids() {
		if ns := b.ns[id]; ns != "" {
			if err := deleteNS(ctx, ns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if b.hub != "" {
		if err := deleteNS(ctx, b.hub); err != nil {
			errs = append(errs, err)
		}
	}
	// The kernel destroys a deleted namespace, and the veth pair with a leg in
	// it, asynchronously: the host link can vanish between the check and the
	// delete. Only a link that is still there is a failure.
	if b.hostLink != "" && linkExists(b.hostLink) {
		if err := ipCmd(ctx, "link", "del", b.hostLink); err != nil && linkExists(b.hostLink) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// deleteNS kills whatever still runs in a namespace, then deletes it.
func deleteNS(ctx context.Context, ns string) error {
	if out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if err := ipCmd(ctx, "netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
		return err
	}
	return nil
}

var nsName = regexp.MustCompile(`^fj-(\d+)-(\d+)-(hub|n\d+)$`)
var hostLinkName = regexp.MustCompile(`^fj(\d+)h$`)

// CleanStale deletes the namespaces and host links of runs whose harness
// process is gone (a harness killed with -9 cannot clean up after itself),
// and returns the run numbers that live runs are using.
func CleanStale(ctx context.Context, log hclog.Logger) map[int]bool {
	used := map[int]bool{}
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return used
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		m := nsName.FindStringSubmatch(fields[0])
		if m == nil {
			continue
		}
		run, _ := strconv.Atoi(m[1])
		pid, _ := strconv.Atoi(m[2])
		if alive(pid) {
			used[run] = true
			continue
		}
		log.Info("removing stale namespace of a dead run", "namespace", fields[0], "pid", pid)
		if err := deleteNS(ctx, fields[0]); err != nil {
			log.Warn("stale namespace not removed", "namespace", fields[0], "error", err)
		}
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		if m := hostLinkName.FindStringSubmatch(l.Name()); m != nil {
			if run, _ := strconv.Atoi(m[1]); !used[run] {
				log.Info("removing stale host link", "link", l.Name())
				_ = ipCmd(ctx, "link", "del", l.Name())
			}
		}
	}
	return used
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// lockFile takes an exclusive flock on path and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netns lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("netns lock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
