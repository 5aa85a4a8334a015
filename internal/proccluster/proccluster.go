// Package proccluster runs real fenced processes on loopback for tests: it
// builds the binaries once, starts a cluster, and hurts its nodes (kill -9,
// SIGSTOP/SIGCONT, restart).
package proccluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/freeport"
)

// Build compiles ./cmd/fenced and ./cmd/fencectl of the module into dir and
// returns the paths of fenced and fencectl.
func Build(dir string) (fenced, fencectl string, err error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", "", err
	}
	fenced, fencectl = filepath.Join(dir, "fenced"), filepath.Join(dir, "fencectl")
	for bin, pkg := range map[string]string{fenced: "./cmd/fenced", fencectl: "./cmd/fencectl"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return fenced, fencectl, nil
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{}
)

// binary builds one command of the module once per test process, with the
// build tags given.
func binary(pkg, name string, tags ...string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[name]; ok {
		return p, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	if buildDir == "" {
		// One directory per checkout, reused by every test process, so test
		// runs do not leave a copy of the binaries behind each.
		sum := sha256.Sum256([]byte(root))
		buildDir = filepath.Join(os.TempDir(), "fenced-test-bin-"+hex.EncodeToString(sum[:6]))
		if err := os.MkdirAll(buildDir, 0o700); err != nil {
			return "", err
		}
	}
	out := filepath.Join(buildDir, name)
	// Test packages run in parallel: each builds to a name of its own and
	// renames it into place, which never disturbs a binary already running.
	tmp, err := os.CreateTemp(buildDir, name+".build-")
	if err != nil {
		return "", err
	}
	_ = tmp.Close()
	args := []string{"build", "-o", tmp.Name()}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, msg)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		_ = os.Remove(tmp.Name())
		return "", err
	}
	built[name] = out
	return out, nil
}

// Fenced builds the fenced daemon once per test process and returns its path.
func Fenced() (string, error) { return binary("./cmd/fenced", "fenced") }

// FencedChaos builds the fenced daemon with -tags chaos: with the flags that
// make a node apply entries unsafely, for the chaos suite's positive
// controls only.
func FencedChaos() (string, error) { return binary("./cmd/fenced", "fenced-chaos", "chaos") }

// Fencectl builds the fencectl CLI once per test process and returns its path.
func Fencectl() (string, error) { return binary("./cmd/fencectl", "fencectl") }

// Binaries builds both binaries once per test process and returns their paths.
func Binaries() (fenced, fencectl string, err error) {
	if fenced, err = Fenced(); err != nil {
		return "", "", err
	}
	fencectl, err = Fencectl()
	return fenced, fencectl, err
}

// ModuleRoot finds the directory holding go.mod, from this source file.
func ModuleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate source")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found")
		}
		dir = parent
	}
}

// Options configure a cluster.
type Options struct {
	Nodes int
	// Dir holds each node's data dir and log file.
	Dir string
	// Binary is the fenced binary; Binaries() when empty.
	Binary string
	// ExtraArgs are appended to every node's command line.
	ExtraArgs []string
	// Env is added to every node's environment.
	Env []string
	// HTTPAddrs and RaftAddrs, when set, give node i its addresses instead
	// of free loopback ports (for nodes that live in their own network
	// namespace with their own IP address).
	HTTPAddrs []string
	RaftAddrs []string
	// Wrap, when set, returns a command prefix for a node: the node runs as
	// prefix... fenced args..., for example ip netns exec NS. The prefix
	// must exec fenced in place (not fork it), so that signals sent to the
	// process reach fenced itself.
	Wrap func(id string) []string
	// NodeArgs, when set, returns arguments for one node only (its own
	// certificates), appended after ExtraArgs.
	NodeArgs func(id string) []string
	// Secure says the nodes serve their API over TLS: clients use https.
	Secure bool
	// ClientOptions are given to every client Client and Leader make (TLS
	// and credentials).
	ClientOptions []client.Option
}

// Node is one fenced process.
type Node struct {
	ID       string
	HTTPAddr string
	RaftAddr string
	DataDir  string
	LogPath  string
	args     []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	paused  bool
	logFile *os.File
}

// Cluster is a set of fenced processes on loopback.
type Cluster struct {
	opts  Options
	bin   string
	Nodes []*Node
}

// Start launches a new cluster whose nodes bootstrap with the same --peers.
func Start(opts Options) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = Fenced(); err != nil {
			return nil, err
		}
	}
	addrs, err := nodeAddrs(opts)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, bin: bin}
	var peers []string
	for i := 0; i < opts.Nodes; i++ {
		id := fmt.Sprintf("n%d", i+1)
		n := &Node{ID: id, HTTPAddr: addrs[2*i], RaftAddr: addrs[2*i+1], DataDir: filepath.Join(opts.Dir, id), LogPath: filepath.Join(opts.Dir, id+".log")}
		c.Nodes = append(c.Nodes, n)
		peers = append(peers, id+"="+n.RaftAddr)
	}
	for _, n := range c.Nodes {
		n.args = append([]string{"--id", n.ID, "--data-dir", n.DataDir, "--http-addr", n.HTTPAddr, "--raft-addr", n.RaftAddr,
			"--peers", strings.Join(peers, ","), "--heartbeat-timeout", "500ms", "--election-timeout", "500ms", "--log-level", "debug"},
			opts.ExtraArgs...)
		n.args = append(n.args, c.nodeArgs(n.ID)...)
		if err := c.StartNode(n); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// NewNode prepares a node that is not in the initial --peers, on free
// loopback ports, with the cluster's options and args appended to its command
// line (--join ADDR, typically: a node with neither --peers nor --join would
// start a cluster of its own). It is added to c.Nodes but not started: start
// it with StartNode. Tests use it to add members to a running cluster.
func (c *Cluster) NewNode(id string, args ...string) (*Node, error) {
	if c.Node(id) != nil {
		return nil, fmt.Errorf("proccluster: node %s exists", id)
	}
	addrs, err := freeport.Addrs(2)
	if err != nil {
		return nil, err
	}
	n := &Node{ID: id, HTTPAddr: addrs[0], RaftAddr: addrs[1], DataDir: filepath.Join(c.opts.Dir, id), LogPath: filepath.Join(c.opts.Dir, id+".log")}
	n.args = append(append([]string{"--id", n.ID, "--data-dir", n.DataDir, "--http-addr", n.HTTPAddr, "--raft-addr", n.RaftAddr,
		"--heartbeat-timeout", "500ms", "--election-timeout", "500ms", "--log-level", "debug"},
		c.opts.ExtraArgs...), append(c.nodeArgs(id), args...)...)
	c.Nodes = append(c.Nodes, n)
	return n, nil
}

// AddNode is NewNode followed by StartNode.
func (c *Cluster) AddNode(id string, args ...string) (*Node, error) {
	n, err := c.NewNode(id, args...)
	if err != nil {
		return nil, err
	}
	return n, c.StartNode(n)
}

// Endpoints returns every node's HTTP address.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.HTTPAddr)
	}
	return out
}

// Client returns an API client of every node.
func (c *Cluster) Client() *client.Client { return client.New(c.Endpoints(), c.opts.ClientOptions...) }

// StartNode (re)starts a node's process with its data dir intact.
func (c *Cluster) StartNode(n *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("node %s is running", n.ID)
	}
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	name, args := c.bin, n.args
	if c.opts.Wrap != nil {
		if prefix := c.opts.Wrap(n.ID); len(prefix) > 0 {
			name, args = prefix[0], append(append(append([]string(nil), prefix[1:]...), c.bin), n.args...)
		}
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), c.opts.Env...)
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(exited)
	}()
	n.cmd, n.exited, n.logFile, n.paused = cmd, exited, f, false
	return nil
}

// Kill sends SIGKILL and waits for the process to end.
func (c *Cluster) Kill(n *Node) { c.signalAndWait(n, syscall.SIGKILL) }

// Terminate sends SIGTERM (graceful shutdown) and waits.
func (c *Cluster) Terminate(n *Node) { c.signalAndWait(n, syscall.SIGTERM) }

func (c *Cluster) signalAndWait(n *Node, sig syscall.Signal) {
	n.mu.Lock()
	cmd, exited, paused := n.cmd, n.exited, n.paused
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	n.mu.Lock()
	n.cmd, n.paused = nil, false
	n.mu.Unlock()
}

// Pause stops the process with SIGSTOP.
// It returns once the process is stopped, not merely signalled.
func (c *Cluster) Pause(n *Node) error {
	if err := c.signal(n, syscall.SIGSTOP, true); err != nil {
		return err
	}
	n.mu.Lock()
	pid := n.cmd.Process.Pid
	n.mu.Unlock()
	return WaitStopped(pid, 10*time.Second)
}

// Resume continues a paused process with SIGCONT.
func (c *Cluster) Resume(n *Node) error { return c.signal(n, syscall.SIGCONT, false) }

func (c *Cluster) signal(n *Node, sig syscall.Signal, paused bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("node %s is not running", n.ID)
	}
	n.paused = paused
	return n.cmd.Process.Signal(sig)
}

// PID returns the process id of the node's running process, or 0.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Paused reports whether the node was stopped with Pause and not resumed.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && n.paused
}

// Running reports whether the node's process is running (paused counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Stop kills every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		c.Kill(n)
	}
}

// Leader returns the running, unpaused node that reports itself as the ready
// leader, waiting up to timeout.
func (c *Cluster) Leader(ctx context.Context, timeout time.Duration) (*Node, error) {
	deadline := time.Now().Add(timeout)
	cl := c.Client()
	for {
		for _, n := range c.Nodes {
			n.mu.Lock()
			up := n.cmd != nil && !n.paused
			n.mu.Unlock()
			if !up {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.NodeStatus(sctx, c.URL(n))
			cancel()
			if err == nil && st.Ready && st.LeaderID == n.ID {
				return n, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.New("no ready leader")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Node returns the node with an id.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Logs returns the tail of every node's log, for a failing test's report.
func (c *Cluster) Logs(tail int) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		data, _ := os.ReadFile(n.LogPath)
		lines := strings.Split(string(data), "\n")
		if len(lines) > tail {
			lines = lines[len(lines)-tail:]
		}
		fmt.Fprintf(&b, "==== %s ====\n%s\n", n.ID, strings.Join(lines, "\n"))
	}
	return b.String()
}

// nodeAddrs returns http, raft, http, raft, ... for every node: the ones the
// options give, or free loopback ports.
func nodeAddrs(opts Options) ([]string, error) {
	if len(opts.HTTPAddrs) == 0 && len(opts.RaftAddrs) == 0 {
		return freeport.Addrs(2 * opts.Nodes)
	}
	if len(opts.HTTPAddrs) != opts.Nodes || len(opts.RaftAddrs) != opts.Nodes {
		return nil, fmt.Errorf("proccluster: %d nodes need %d HTTP and raft addresses, got %d and %d",
			opts.Nodes, opts.Nodes, len(opts.HTTPAddrs), len(opts.RaftAddrs))
	}
	out := make([]string, 0, 2*opts.Nodes)
	for i := 0; i < opts.Nodes; i++ {
		out = append(out, opts.HTTPAddrs[i], opts.RaftAddrs[i])
	}
	return out, nil
}
