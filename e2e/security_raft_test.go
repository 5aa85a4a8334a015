package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/tlsutil"
)

// openFDs counts the open file descriptors of process pid.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(ents)
}

// Many TCP connections to a node's Raft port that never complete a TLS
// handshake (silent ones, and ones that send the first bytes of a
// ClientHello) are cut after the handshake timeout; meanwhile the node holds
// no more than the cap of them open, and the cluster keeps serving.
func TestRaftPortCutsStalledHandshakes(t *testing.T) {
	sc, _, ctx := startSecureLeader(t, 3*time.Minute)
	n2 := sc.Node("n2")
	before := openFDs(t, n2.PID())

	const conns = 300
	hello := []byte{0x16, 0x03, 0x01, 0x00, 0xc8, 0x01} // the start of a ClientHello
	var cut atomic.Int64
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", n2.RaftAddr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		if i%2 == 1 {
			if _, err := c.Write(hello); err != nil {
				t.Fatal(err)
			}
		}
		go func() {
			buf := make([]byte, 1)
			for {
				if _, err := c.Read(buf); err != nil {
					cut.Add(1)
					return
				}
			}
		}()
	}
	// The node accepts them all (the kernel queues the rest), but holds at
	// most the cap while they handshake; the margin is for the node's own
	// connections and files.
	bound := before + cluster.DefaultMaxHandshakes + 20
	if n := openFDs(t, n2.PID()); n > bound {
		t.Errorf("n2 holds %d open files with %d stalled handshakes (%d before; bound %d)", n, conns, before, bound)
	}
	testutil.Eventually(t, time.Minute, func() error {
		if n := cut.Load(); n < conns {
			return testutil.Errorf("n2 cut %d of %d connections that never completed a handshake", n, conns)
		}
		return nil
	})
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := openFDs(t, n2.PID()); n > before+10 {
			return testutil.Errorf("n2 holds %d open files after the stalled connections were cut (%d before)", n, before)
		}
		return nil
	})
	if _, err := sc.Client().Acquire(ctx, client.AcquireRequest{Key: "after-flood", Holder: "ops", TTL: "10s"}); err != nil {
		t.Fatalf("the cluster stopped serving: %v", err)
	}
}

// The Raft port takes only peer certificates (OU=peer): the admin and client
// certificates of the same CA do not get a connection, while a node's peer
// certificate does (the control).
func TestRaftPortRefusesClientCertificates(t *testing.T) {
	sc := startSecureCluster(t)
	addr := sc.Node("n1").RaftAddr
	try := func(f tlsutil.Files) error {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		cfg := &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true} // the server's identity is not under test
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		// With TLS 1.3 the server judges the client's certificate after the
		// client's handshake returns: a refusal arrives as an alert on the
		// first read; an accepted peer gets nothing until it sends an RPC.
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err = c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	}
	if err := try(sc.pki.Nodes["n2"].Peer); err != nil {
		t.Fatalf("a peer certificate was refused: %v", err)
	}
	for name, f := range map[string]tlsutil.Files{"admin": sc.pki.Admin, "client": sc.pki.Client} {
		if err := try(f); err == nil {
			t.Errorf("the %s certificate completed a handshake on the Raft port", name)
		}
	}
	// The peer CA also signs client certificates here: the node says so.
	if logs := sc.Logs(400); !strings.Contains(logs, "the peer CA also signs client certificates") {
		t.Error("no warning that the peer CA is also the client CA")
	}
}

// fenced refuses a peer OU that client or admin certificates carry, or none
// (which used to mean any OU on the Raft port).
func TestPeerCertOUMustNameAPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes; skipped with -short")
	}
	bin, err := proccluster.Fenced()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pki, err := tlsutil.WriteDevPKI(filepath.Join(dir, "tls"), tlsutil.DevOptions{Nodes: []string{"n1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ou := range []string{"", tlsutil.OUClient, tlsutil.OUAdmin} {
		addrs := testutil.FreeAddrs(t, 2)
		args := append([]string{"--id", "n1", "--data-dir", filepath.Join(dir, "data-"+ou), "--http-addr", addrs[0],
			"--raft-addr", addrs[1], "--peers", "n1=" + addrs[1], "--peer-cert-ou", ou}, nodeTLSArgs(pki, "n1")...)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		cancel()
		var xe *exec.ExitError
		if !errors.As(err, &xe) || xe.ExitCode() <= 0 || !strings.Contains(string(out), "--peer-cert-ou") {
			t.Errorf("--peer-cert-ou %q: fenced did not refuse to start (%v)\n%s", ou, err, tail(out, 600))
		}
	}
}

// A node whose peer certificate names another member takes no part in Raft:
// n3 runs with n2's peer certificate (as a member whose name an attacker
// pointed at n2 would look to the others). The leader refuses the
// connections it dials to n3 (the certificate does not name n3), and the
// others drop the RPCs n3 sends them (their sender, n3, is not the
// certificate's n2). n1 and n2 keep serving; n3 never receives an entry.
func TestRaftPeerMustBeTheServerItsCertificateNames(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes; skipped with -short")
	}
	dir := t.TempDir()
	pki, err := tlsutil.WriteDevPKI(filepath.Join(dir, "tls"), tlsutil.DevOptions{Nodes: []string{"n1", "n2", "n3"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := proccluster.Start(proccluster.Options{
		Nodes: 3, Dir: dir, Secure: true,
		NodeArgs: func(id string) []string {
			args := nodeTLSArgs(pki, id)
			if id == "n3" {
				n2 := pki.Nodes["n2"].Peer
				args = append(args, "--peer-tls-cert", n2.Cert, "--peer-tls-key", n2.Key)
			}
			return args
		},
		ClientOptions: []client.Option{client.WithTLS(tlsConfig(t, pki.Admin))},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Logs(60))
		}
		c.Stop()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lead, err := c.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lead.ID == "n3" {
		t.Fatal("n3, whose certificate names n2, leads the cluster")
	}
	cl := client.New([]string{c.Node("n1").HTTPAddr, c.Node("n2").HTTPAddr}, client.WithTLS(tlsConfig(t, pki.Admin)))
	if _, err := cl.Acquire(ctx, client.AcquireRequest{Key: "orders-db", Holder: "ops/worker", TTL: "1m"}); err != nil {
		t.Fatalf("n1 and n2 do not serve: %v", err)
	}

	// Both directions are refused, and say so with both ids.
	refusals := map[string]string{
		"the leader refused to dial n3": "refused a raft connection",
		"n3's RPCs were dropped":        "dropped a raft connection",
	}
	testutil.Eventually(t, time.Minute, func() error {
		logs := c.Logs(2000)
		for what, msg := range refusals {
			found := false
			for _, line := range strings.Split(logs, "\n") {
				found = found || (strings.Contains(line, msg) && strings.Contains(line, "n3") && strings.Contains(line, "certificate=n2"))
			}
			if !found {
				return fmt.Errorf("no log line says %s (%q naming n3 and certificate=n2)", what, msg)
			}
		}
		return nil
	})
	st, err := cl.NodeStatus(ctx, c.URL(lead))
	if err != nil {
		t.Fatal(err)
	}
	n3, err := cl.NodeStatus(ctx, c.URL(c.Node("n3")))
	if err != nil {
		t.Fatal(err)
	}
	if n3.LastIndex >= st.CommitIndex {
		t.Fatalf("n3 has the log up to %d, the leader committed %d: it took part in replication", n3.LastIndex, st.CommitIndex)
	}
	if data, _ := os.ReadFile(c.Node("n3").LogPath); !bytes.Contains(data, []byte("the peer certificate does not name this node's id")) {
		t.Errorf("n3 did not warn at start that its peer certificate does not name it:\n%s", tail(data, 20))
	}
}
