package cluster

import (
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenced/fenced/metrics"
	"github.com/fenced/fenced/tlsutil"
)

// A bound address gives back its id and address whatever bytes they hold;
// any other address is not taken for one.
func TestBoundAddrRoundTrips(t *testing.T) {
	for _, tt := range []struct{ id, addr string }{
		{"n1", "10.0.0.1:7701"},
		{"fenced-0", "fenced-0.fenced.default.svc:7701"},
		{"", "127.0.0.1:1"},
		{"a\x00b", "\x003\x00x"},
		{"12", "[::1]:7701"},
	} {
		id, addr, ok := unbindAddr(boundAddr(raft.ServerID(tt.id), raft.ServerAddress(tt.addr)))
		if !ok || id != tt.id || addr != tt.addr {
			t.Errorf("bound (%q, %q) came back as (%q, %q, %v)", tt.id, tt.addr, id, addr, ok)
		}
	}
	for _, a := range []string{"127.0.0.1:7701", "", "\x00", "\x00x\x00n1a:1", "\x009\x00n1:1", "\x00-1\x00n1", "\x0001\x00n1:1"} {
		if id, addr, ok := unbindAddr(raft.ServerAddress(a)); ok || addr != a || id != "" {
			t.Errorf("%q was taken for a bound address (%q, %q)", a, id, addr)
		}
	}
}

// pkiLayers makes a development PKI of nodes n1, n2 and n3 and returns the
// peer TLS configurations of each.
func pkiLayers(t testing.TB) map[string][2]*tls.Config {
	t.Helper()
	p, err := tlsutil.WriteDevPKI(filepath.Join(t.TempDir(), "tls"), tlsutil.DevOptions{Nodes: []string{"n1", "n2", "n3"}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]*tls.Config{}
	for id, nf := range p.Nodes {
		s, err := tlsutil.Load(nf.Peer)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = [2]*tls.Config{tlsutil.PeerServerConfig(s, ""), tlsutil.PeerClientConfig(s, "")}
	}
	return out
}

// layer starts a stream layer with the server and client configurations
// of cfg, logging into logs.
func layer(t testing.TB, cfg [2]*tls.Config, logs *syncBuffer, opts ...StreamOption) *StreamLayer {
	t.Helper()
	opts = append(opts, WithStreamLogger(hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})))
	l, err := NewStreamLayer("127.0.0.1:0", "", cfg[0], cfg[1], opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Dialing server S, a node takes only a certificate that names S: the right
// id passes, another node's certificate is refused (counted, and logged with
// both ids), and so is an address without an id.
func TestDialRefusesACertificateOfAnotherServer(t *testing.T) {
	cfgs := pkiLayers(t)
	var logs syncBuffer
	srv := echoLayer(t, cfgs["n1"][0], cfgs["n1"][1])
	dialer := layer(t, cfgs["n2"], &logs)
	addr := raft.ServerAddress(srv.Addr().String())

	c, err := dialer.Dial(boundAddr("n1", addr), 5*time.Second)
	if err != nil {
		t.Fatalf("dialing n1 at n1's address: %v", err)
	}
	if err := echo(c, "hello"); err != nil {
		t.Fatal(err)
	}
	c.Close()

	before := promtest.ToFloat64(metrics.RaftPeerRefusals.WithLabelValues("dial"))
	_, err = dialer.Dial(boundAddr("n3", addr), 5*time.Second)
	if !errors.Is(err, ErrPeerIdentity) || !strings.Contains(err.Error(), `"n3"`) || !strings.Contains(err.Error(), `"n1"`) {
		t.Fatalf("dialing n3 at n1's address: %v; want ErrPeerIdentity naming n3 and n1", err)
	}
	if got := promtest.ToFloat64(metrics.RaftPeerRefusals.WithLabelValues("dial")) - before; got != 1 {
		t.Errorf("fenced_raft_peer_refusals_total{side=dial} rose by %v, want 1", got)
	}
	if l := logs.String(); !strings.Contains(l, "refused a raft connection") || !strings.Contains(l, "server-id=n3") || !strings.Contains(l, "certificate=n1") {
		t.Errorf("no log line names both ids:\n%s", l)
	}

	if _, err := dialer.Dial(addr, 5*time.Second); !errors.Is(err, ErrPeerIdentity) {
		t.Fatalf("dialing an address without a server id: %v; want ErrPeerIdentity", err)
	}
}

// A certificate may name the server id as a subject alternative name
// rather than its CN, as on the HTTP API's forwarding path.
func TestDialTakesTheServerIDAsASAN(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	p, err := tlsutil.WriteDevPKI(dir, tlsutil.DevOptions{Nodes: []string{"n1"}})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := tlsutil.LoadCA(p.CA, p.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.IssueFiles(dir, "host-a", tlsutil.Leaf{CommonName: "host-a.example", OU: []string{tlsutil.DefaultPeerOU},
		DNSNames: []string{"host-a.example", "n9"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	f.CA = p.CA
	s, err := tlsutil.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	n1, err := tlsutil.Load(p.Nodes["n1"].Peer)
	if err != nil {
		t.Fatal(err)
	}
	srv := echoLayer(t, tlsutil.PeerServerConfig(s, ""), tlsutil.PeerClientConfig(s, ""))
	dialer := layer(t, [2]*tls.Config{tlsutil.PeerServerConfig(n1, ""), tlsutil.PeerClientConfig(n1, "")}, &syncBuffer{})
	c, err := dialer.Dial(boundAddr("n9", raft.ServerAddress(srv.Addr().String())), 5*time.Second)
	if err != nil {
		t.Fatalf("dialing n9, whose certificate names it as a DNS name: %v", err)
	}
	c.Close()
}

// acceptOne dials the listener l with dialer, bound to id, and returns the
// connection l accepted.
func acceptOne(t testing.TB, l, dialer *StreamLayer, id string) net.Conn {
	t.Helper()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(got)
			return
		}
		got <- c
	}()
	c, err := dialer.Dial(boundAddr(raft.ServerID(id), raft.ServerAddress(l.Addr().String())), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	select {
	case a, ok := <-got:
		if !ok {
			t.Fatal("accept failed")
		}
		t.Cleanup(func() { a.Close() })
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("nothing accepted")
	}
	return nil
}

// An accepted connection carries RPCs only from the server its certificate
// names: n2's connection passes RPCs from n2 and refuses RPCs from n3
// (counted, and logged with both ids); a connection without a verified
// certificate passes nothing; without TLS there is nothing to check.
func TestCheckRPCRefusesASenderTheCertificateDoesNotName(t *testing.T) {
	cfgs := pkiLayers(t)
	var logs syncBuffer
	l := layer(t, cfgs["n1"], &logs)
	conn := acceptOne(t, l, layer(t, cfgs["n2"], &syncBuffer{}), "n1")

	if err := l.CheckRPC(conn, raft.RPCHeader{ID: []byte("n2")}); err != nil {
		t.Fatalf("n2's RPC on n2's connection: %v", err)
	}
	before := promtest.ToFloat64(metrics.RaftPeerRefusals.WithLabelValues("rpc"))
	for _, id := range []string{"n3", "", "n1"} {
		err := l.CheckRPC(conn, raft.RPCHeader{ID: []byte(id)})
		if !errors.Is(err, ErrPeerIdentity) || !strings.Contains(err.Error(), `"n2"`) {
			t.Errorf("an RPC from %q on n2's connection: %v; want ErrPeerIdentity naming n2", id, err)
		}
	}
	if got := promtest.ToFloat64(metrics.RaftPeerRefusals.WithLabelValues("rpc")) - before; got != 3 {
		t.Errorf("fenced_raft_peer_refusals_total{side=rpc} rose by %v, want 3", got)
	}
	if s := logs.String(); !strings.Contains(s, "dropped a raft connection") || !strings.Contains(s, "sender=n3") || !strings.Contains(s, "certificate=n2") {
		t.Errorf("no log line names both ids:\n%s", s)
	}

	plainA, plainB := net.Pipe()
	defer plainA.Close()
	defer plainB.Close()
	if err := l.CheckRPC(plainA, raft.RPCHeader{ID: []byte("n2")}); !errors.Is(err, ErrPeerIdentity) {
		t.Errorf("an RPC on a connection without a certificate: %v; want ErrPeerIdentity", err)
	}
	plain, err := NewStreamLayer("127.0.0.1:0", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.CheckRPC(plainA, raft.RPCHeader{ID: []byte("anyone")}); err != nil {
		t.Errorf("without TLS: %v", err)
	}
}

// transportOf starts a network transport on a stream layer with the
// configurations of cfg, checking RPCs as a node does; it answers every
// AppendEntries with success and reports the senders it heard.
func transportOf(t *testing.T, cfg [2]*tls.Config) (boundTransport, <-chan string) {
	t.Helper()
	l := layer(t, cfg, &syncBuffer{})
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: l, MaxPool: 2, Timeout: 5 * time.Second,
		Logger: hclog.NewNullLogger(), CheckRPC: l.CheckRPC})
	t.Cleanup(func() { nt.Close() })
	heard := make(chan string, 16)
	go func() {
		for rpc := range nt.Consumer() {
			heard <- string(rpc.Command.(*raft.AppendEntriesRequest).ID)
			rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
		}
	}()
	return boundTransport{nt}, heard
}

// Both directions through real network transports: n2 reaches n1 and is
// heard as n2; n2 dialing "n3" at n1's address is refused before it sends;
// an AppendEntries from n2's transport that claims to come from n3 is
// dropped before n1's raft sees it.
func TestTransportsBindConnectionsToServerIDs(t *testing.T) {
	cfgs := pkiLayers(t)
	n1, heard := transportOf(t, cfgs["n1"])
	n2, _ := transportOf(t, cfgs["n2"])
	entries := func(from string) *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(from), Addr: []byte(n2.LocalAddr())},
			Term: 1, PrevLogEntry: 1, Entries: []*raft.Log{{Index: 2, Term: 1}}}
	}
	if err := n2.AppendEntries("n1", n1.LocalAddr(), entries("n2"), &raft.AppendEntriesResponse{}); err != nil {
		t.Fatalf("n2 to n1: %v", err)
	}
	if got := <-heard; got != "n2" {
		t.Fatalf("n1 heard %q", got)
	}
	if err := n2.AppendEntries("n3", n1.LocalAddr(), entries("n2"), &raft.AppendEntriesResponse{}); !errors.Is(err, ErrPeerIdentity) {
		t.Fatalf("n2 to n3 at n1's address: %v; want ErrPeerIdentity", err)
	}
	if err := n2.AppendEntries("n1", n1.LocalAddr(), entries("n3"), &raft.AppendEntriesResponse{}); err == nil {
		t.Fatal("an AppendEntries from n3 on n2's connection was answered")
	}
	if err := n2.AppendEntries("n1", n1.LocalAddr(), entries("n2"), &raft.AppendEntriesResponse{}); err != nil {
		t.Fatalf("n2 to n1 after a dropped connection: %v", err)
	}
	if got := <-heard; got != "n2" {
		t.Fatalf("n1 heard %q", got)
	}
	select {
	case got := <-heard:
		t.Fatalf("n1 heard %q as well", got)
	default:
	}
}
