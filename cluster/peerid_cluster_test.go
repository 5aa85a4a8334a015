package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/tlsutil"
)

// dnsStandIn maps the Raft addresses of a cluster (stable names, as a
// StatefulSet's pods have) to the loopback addresses the nodes listen on, as
// DNS maps names to IPs; point makes a name answer with another's address.
type dnsStandIn struct {
	mu sync.Mutex
	m  map[string]string
}

func (d *dnsStandIn) resolve(addr string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.m[addr]; ok {
		return a
	}
	return addr
}

func (d *dnsStandIn) point(name, to string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.m[name] = d.m[to]
}

// syncBuffer collects the log lines of every node.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// raftName is the Raft address of node id in the name-addressed clusters of
// these tests.
func raftName(id string) string { return id + ".fenced.test:7701" }

// newNamedTLSCluster starts size nodes with mutual TLS on Raft (certificates
// of a development PKI) whose Raft addresses are names that dns resolves.
// Every node logs into logs.
func newNamedTLSCluster(t *testing.T, size int, dns *dnsStandIn, logs *syncBuffer, mod func(*Config)) *testCluster {
	t.Helper()
	var ids []string
	for i := 1; i <= size; i++ {
		ids = append(ids, fmt.Sprintf("n%d", i))
	}
	pki, err := tlsutil.WriteDevPKI(filepath.Join(t.TempDir(), "tls"), tlsutil.DevOptions{Nodes: ids})
	if err != nil {
		t.Fatal(err)
	}
	binds := testutil.FreeAddrs(t, size)
	dns.m = map[string]string{}
	var peers []Peer
	for i, id := range ids {
		dns.m[raftName(id)] = binds[i]
		peers = append(peers, Peer{ID: id, Addr: raftName(id)})
	}
	level := hclog.Warn
	if os.Getenv("FENCED_TEST_LOG") != "" {
		level = hclog.Debug
	}
	tc := &testCluster{t: t}
	base := t.TempDir()
	for i, id := range ids {
		cfg := fastConfig(t, id, filepath.Join(base, id), binds[i])
		cfg.Peers = peers
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: level, Output: logs})
		store, err := tlsutil.Load(pki.Nodes[id].Peer)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RaftServerTLS = tlsutil.PeerServerConfig(store, "")
		cfg.RaftClientTLS = tlsutil.PeerClientConfig(store, "")
		cfg.raftResolve = dns.resolve
		mod(&cfg)
		tc.cfgs = append(tc.cfgs, cfg)
		tc.nodes = append(tc.nodes, nil)
		tc.start(i)
	}
	t.Cleanup(func() {
		tc.closeAll()
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	return tc
}

// impostorScene is a 5-node cluster in which whoever controls DNS has
// pointed the name of a stopped member, Z, at a running follower, F; then two
// more members stop, leaving the leader and F: two of five, no quorum.
type impostorScene struct {
	tc       *testCluster
	logs     *syncBuffer
	lead     *Node
	f, z     string // the follower that answers at Z's name, and Z
	acquired error  // the acquire tried with only the leader and F running
}

func playImpostor(t *testing.T, mod func(*Config)) impostorScene {
	dns := &dnsStandIn{}
	logs := &syncBuffer{}
	tc := newNamedTLSCluster(t, 5, dns, logs, mod)
	li, lead := tc.leader()
	var others []int
	for i := range tc.nodes {
		if i != li {
			others = append(others, i)
		}
	}
	fi, zi := others[0], others[1]
	s := impostorScene{tc: tc, logs: logs, lead: lead, f: tc.cfgs[fi].ID, z: tc.cfgs[zi].ID}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "before", Holder: "h", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}

	// Z's name now answers with F's address; Z stops, so the leader's
	// connections to it close and the next ones are dialed by name.
	dns.point(raftName(s.z), raftName(s.f))
	tc.stop(zi)
	// Four of five members run: the cluster must keep serving.
	if _, err := lead.Acquire(ctx, AcquireArgs{Key: "four", Holder: "h", TTL: time.Minute}); err != nil {
		t.Fatalf("with four of five members running, an acquire failed: %v", err)
	}
	for _, i := range others[2:] {
		tc.stop(i)
	}
	actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer acancel()
	_, s.acquired = lead.Acquire(actx, AcquireArgs{Key: "two", Holder: "h", TTL: time.Minute})
	return s
}

// With peer TLS, a node that dials a member's name and reaches another
// member refuses the connection: a DNS attacker cannot make one member count
// twice in the votes and commits of the cluster. The cluster keeps serving
// while a quorum of real members runs; with two of five running, nothing
// commits.
func TestRaftRefusesAMemberAnsweringAtAnotherMembersName(t *testing.T) {
	s := playImpostor(t, func(*Config) {})
	if s.acquired == nil {
		t.Fatalf("an acquire committed with two of five members running: %s, answering at %s's name, counted as %s", s.f, s.z, s.z)
	}
	if s.lead.FSM().Len() == 0 {
		t.Fatal("the leader lost its state")
	}
	if _, ok := s.lead.FSM().Get("two"); ok {
		t.Fatal("the acquire made with two of five members running was applied")
	}
	want := fmt.Sprintf("server-id=%s", s.z)
	testutil.Eventually(t, 10*time.Second, func() error {
		for _, line := range strings.Split(s.logs.String(), "\n") {
			if strings.Contains(line, "refused a raft connection") && strings.Contains(line, want) && strings.Contains(line, "certificate="+s.f) {
				return nil
			}
		}
		return errors.New("no log line says the leader refused the connection at " + s.z + "'s name that " + s.f + " answered")
	})
}

// The positive control of the test above: with the server ids unchecked (as
// before they were), the follower answering at the stopped member's name
// counts twice, and an acquire commits with two of five members running.
func TestRaftCountsAMemberTwiceWithoutIDChecks(t *testing.T) {
	s := playImpostor(t, func(c *Config) { c.raftSkipIDCheck = true })
	if s.acquired != nil {
		t.Fatalf("without the checks, the acquire failed (%v): the scene no longer shows the hole", s.acquired)
	}
	t.Logf("without the checks, an acquire committed with two of five members running: %s, answering at %s's name, counted as %s", s.f, s.z, s.z)
}
