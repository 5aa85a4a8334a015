package api

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/tlsutil"
)

// followerStub is a node that is not ready and knows a leader: every
// request that needs the leader is forwarded. Only the methods below are
// called on that path.
type followerStub struct {
	Node
	leaderID, leaderAddr string
}

func (f *followerStub) Ready() bool                   { return false }
func (f *followerStub) Leader() (id, httpAddr string) { return f.leaderID, f.leaderAddr }
func (f *followerStub) Status() cluster.Status {
	return cluster.Status{ID: "n2", State: "Follower", LeaderID: f.leaderID, LeaderHTTP: f.leaderAddr}
}

// fakeLeader records what reaches it and answers every request with a grant
// no real leader made.
type fakeLeader struct {
	addr string
	mu   sync.Mutex
	seen []http.Header
}

func (f *fakeLeader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.seen = append(f.seen, r.Header.Clone())
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, client.Grant{Key: "k", Holder: "bob/w", Token: 99999999999999})
}

func (f *fakeLeader) requests() []http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]http.Header(nil), f.seen...)
}

// startFakeLeader serves f over TLS with cert, or plain HTTP when cert is
// nil.
func startFakeLeader(t *testing.T, cert *tlsutil.Store) *fakeLeader {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLeader{addr: ln.Addr().String()}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 5 * time.Second}
	if cert != nil {
		srv.TLSConfig = tlsutil.ServerConfig(cert, tls.RequestClientCert)
		go func() { _ = srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	t.Cleanup(func() { _ = srv.Close() })
	return f
}

// testPKI is a CA and a way to issue stores of it.
type testPKI struct {
	t   *testing.T
	ca  *tlsutil.CA
	dir string
	caf string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := tlsutil.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caf := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caf, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, ca: ca, dir: dir, caf: caf}
}

func (p *testPKI) store(name string, l tlsutil.Leaf) *tlsutil.Store {
	p.t.Helper()
	f, err := p.ca.IssueFiles(p.dir, name, l)
	if err != nil {
		p.t.Fatal(err)
	}
	f.CA = p.caf
	s, err := tlsutil.Load(f)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// serverLeaf is a node's HTTP certificate naming id, valid for 127.0.0.1.
func serverLeaf(id string) tlsutil.Leaf {
	return tlsutil.Leaf{CommonName: id, DNSNames: []string{id, "localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}
}

// startForwarder starts the API of a follower (n2) that knows leaderID at
// leaderAddr, with the bearer tokens of startSecureNode.
func startForwarder(t *testing.T, leaderID, leaderAddr string, o ServerOptions) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(testClientToken+" client bob\n"+testAdminToken+" admin ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	o.Tokens = tokens
	log := hclog.New(&hclog.LoggerOptions{Name: "n2", Level: hclog.Error})
	srv := httptest.NewServer(NewSecureServer(&followerStub{leaderID: leaderID, leaderAddr: leaderAddr}, log, o))
	t.Cleanup(srv.Close)
	return srv.URL
}

// tlsForward is the forwarding client of a node with the peer certificate
// peer, trusting p's CA for servers.
func tlsForward(p *testPKI, peer *tlsutil.Store) *http.Client {
	roots, err := tlsutil.Load(tlsutil.Files{CA: p.caf})
	if err != nil {
		p.t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialTLSContext: tlsutil.Dialer(roots, peer)}}
}

// TestForwardOnlyToProvenLeader points a follower at a "leader" whose TLS
// certificate is valid (same CA, right address) but names another node:
// the follower refuses to forward (503) and the listener never sees a
// request, let alone the client's bearer token. A listener whose
// certificate names the leader gets the request, authenticated by the
// follower's peer certificate and the client's identity, without the token.
func TestForwardOnlyToProvenLeader(t *testing.T) {
	p := newTestPKI(t)
	peer := p.store("n2-peer", tlsutil.Leaf{CommonName: "n2", OU: []string{tlsutil.DefaultPeerOU}, Server: true, Client: true})
	opts := func() ServerOptions {
		return ServerOptions{TLS: true, Peer: peer, Forward: tlsForward(p, peer), ForwardIdentity: true}
	}
	body := `{"key":"k","holder":"bob/w","ttl":"10s"}`

	impostor := startFakeLeader(t, p.store("n3-server", serverLeaf("n3")))
	url := startForwarder(t, "n1", impostor.addr, opts())
	status, er, _ := send(t, url, "POST", "/v1/acquire", body, testClientToken)
	if status != http.StatusServiceUnavailable {
		t.Errorf("forward to a leader whose certificate names n3: %d %s (%s), want 503", status, er.Code, er.Message)
	}
	if got := impostor.requests(); len(got) != 0 {
		t.Errorf("the impostor received %d requests (Authorization %q): a follower forwarded to a leader that did not prove its id", len(got), got[0].Get("Authorization"))
	}

	leader := startFakeLeader(t, p.store("n1-server", serverLeaf("n1")))
	url = startForwarder(t, "n1", leader.addr, opts())
	if status, er, _ := send(t, url, "POST", "/v1/acquire", body, testClientToken); status != http.StatusOK {
		t.Fatalf("forward to the proven leader: %d %s (%s)", status, er.Code, er.Message)
	}
	got := leader.requests()
	if len(got) != 1 {
		t.Fatalf("the leader received %d requests, want 1", len(got))
	}
	if a := got[0].Get("Authorization"); a != "" {
		t.Errorf("the client's credentials travelled to the leader: Authorization %q", a)
	}
	if id, err := decodeIdentity(got[0].Get(identityHeader)); err != nil || id.Name != "bob" || id.Role != RoleClient {
		t.Errorf("forwarded identity %q: %+v %v, want bob (client)", got[0].Get(identityHeader), id, err)
	}
}

// TestPlainForwardCarriesNoCredentials: without TLS a follower cannot prove
// the leader nor authenticate itself to it. With authentication on it does
// not forward at all (503 not_leader, naming the leader in the header);
// without authentication it forwards, but never a client's Authorization.
func TestPlainForwardCarriesNoCredentials(t *testing.T) {
	fake := startFakeLeader(t, nil)
	url := startForwarder(t, "n1", fake.addr, ServerOptions{})
	body := `{"key":"k","holder":"bob/w","ttl":"10s"}`
	status, er, hdr := send(t, url, "POST", "/v1/acquire", body, testClientToken)
	if status != http.StatusServiceUnavailable || er.Code != "not_leader" || hdr.Get(client.LeaderHeader) != fake.addr {
		t.Errorf("plain forward with authentication on: %d %s (%s), leader header %q; want 503 not_leader naming the leader",
			status, er.Code, er.Message, hdr.Get(client.LeaderHeader))
	}
	if got := fake.requests(); len(got) != 0 {
		t.Errorf("a plain follower forwarded %d requests (Authorization %q)", len(got), got[0].Get("Authorization"))
	}

	fake = startFakeLeader(t, nil)
	log := hclog.New(&hclog.LoggerOptions{Name: "n2", Level: hclog.Error})
	srv := httptest.NewServer(NewServer(&followerStub{leaderID: "n1", leaderAddr: fake.addr}, log))
	t.Cleanup(srv.Close)
	if status, er, _ := send(t, srv.URL, "POST", "/v1/acquire", body, testClientToken); status != http.StatusOK {
		t.Fatalf("plain forward without authentication: %d %s (%s)", status, er.Code, er.Message)
	}
	for _, h := range fake.requests() {
		if a := h.Get("Authorization"); a != "" {
			t.Errorf("a plain follower forwarded the client's Authorization %q", a)
		}
	}
}
