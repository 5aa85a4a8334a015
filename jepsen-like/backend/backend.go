// Package backend runs a fenced cluster for the chaos suite and hurts it: one
// interface, with a backend of processes on loopback (local), one with every
// node in its own Linux network namespace (netns), where partitions are
// iptables rules, and one of the compose cluster's containers (docker), where
// partitions are iptables rules in each container's network namespace.
package backend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/fenced/fenced/client"
)

// ErrUnsupported is returned by a backend that cannot inject a fault (local
// processes share one network stack: they cannot be partitioned).
var ErrUnsupported = errors.New("fault not supported by this backend")

// Grudge says, for each node, the set of nodes it cannot hear. A complete
// partition is a symmetric grudge.
type Grudge map[string][]string

// String renders a grudge deterministically, for logs and the fault timeline.
func (g Grudge) String() string {
	ids := make([]string, 0, len(g))
	for id := range g {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var parts []string
	for _, id := range ids {
		if len(g[id]) == 0 {
			continue
		}
		peers := append([]string(nil), g[id]...)
		sort.Strings(peers)
		parts = append(parts, id+" x "+strings.Join(peers, ","))
	}
	return strings.Join(parts, "; ")
}

// Config configures a cluster of any backend.
type Config struct {
	// Nodes is the cluster size (3 or 5).
	Nodes int
	// Binary is the fenced binary to run.
	Binary string
	// Dir holds the nodes' data dirs and logs.
	Dir string
	// Args are extra fenced flags for every node (timeouts, snapshots).
	Args []string
	// DiskSize, when set (say "256M"), puts each node's data dir on an ext4
	// file system of that size of its own (a loop device; root only), for
	// the disk nemesis (local and netns backends).
	DiskSize string
	// Image is the fenced image the docker backend runs; when empty it
	// builds one from this module (and removes it at Close).
	Image string
	// Token is the bearer token (an admin's) of the backend's own calls,
	// the status reads that find the leader, when the nodes run with
	// authentication; "" without.
	Token string
}

// AuthOptions returns the client options that present token as a bearer
// token, or none for "". The harness's clusters serve plain http on
// loopback or in their own namespaces, so the token travels in the clear,
// as fenced warns it then does.
func AuthOptions(token string) []client.Option {
	if token == "" {
		return nil
	}
	return []client.Option{client.WithBearerToken(token), client.WithInsecureCredentials()}
}

// Backend is a running fenced cluster the nemeses can hurt.
type Backend interface {
	// Name is "local", "netns" or "docker".
	Name() string
	// Start launches the cluster and returns once a leader is ready.
	Start(ctx context.Context) error
	// Nodes returns the node ids, n1..nN.
	Nodes() []string
	// Endpoints returns every node's HTTP address as the harness reaches it.
	Endpoints() []string
	// Endpoint returns one node's HTTP address.
	Endpoint(id string) string
	// Kill sends SIGKILL to a node's fenced process and waits for its end.
	Kill(ctx context.Context, id string) error
	// Stop sends SIGTERM to a node's fenced process, a graceful shutdown
	// (a leader hands leadership over first), and waits for its end.
	Stop(ctx context.Context, id string) error
	// Restart starts a killed or stopped node again on its data dir.
	Restart(ctx context.Context, id string) error
	// Pause stops a node with SIGSTOP; Resume continues it with SIGCONT.
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// CanPartition reports why the backend cannot partition nodes, or nil.
	CanPartition() error
	// Partition installs a grudge, replacing any earlier one.
	Partition(ctx context.Context, g Grudge) error
	// Heal removes every partition.
	Heal(ctx context.Context) error
	// Leader returns the id of the node that reports itself the ready
	// leader, waiting up to timeout.
	Leader(ctx context.Context, timeout time.Duration) (string, error)
	// Running reports whether a node's process is up (paused counts).
	Running(id string) bool
	// LogPaths returns each node's log file.
	LogPaths() map[string]string
	// Close stops every node and removes what the backend created.
	Close() error
}

// leaderOf asks every reachable node (with cfg's token) for its status and returns the node
// that reports itself the ready leader, polling until timeout.
func leaderOf(ctx context.Context, cfg Config, ids []string, endpoint func(string) string, up func(string) bool, timeout time.Duration) (string, error) {
	cl := client.New(nil, append([]client.Option{client.WithHTTPClient(&http.Client{Timeout: time.Second})}, AuthOptions(cfg.Token)...)...)
	deadline := time.Now().Add(timeout)
	var last error = errors.New("no node answered")
	for {
		for _, id := range ids {
			if !up(id) {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.NodeStatus(sctx, "http://"+endpoint(id))
			cancel()
			if err != nil {
				last = err
				continue
			}
			if st.Ready && st.LeaderID == id {
				return id, nil
			}
		}
		if !time.Now().Before(deadline) {
			return "", fmt.Errorf("no ready leader within %v: %w", timeout, last)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
