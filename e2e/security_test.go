package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/tlsutil"
)

// Bearer tokens of the secure cluster's tokens file.
const (
	clientToken = "tok-client-5f0c2a9e7d1b4c38"
	adminToken  = "tok-admin-9a41d7c2e8b0f613"
)

// secureCluster is a 3-node cluster with TLS on the API, mutual TLS between
// nodes, client certificates and bearer tokens.
type secureCluster struct {
	*proccluster.Cluster
	pki *tlsutil.DevPKI
	dir string
	// members are the endpoints of the cluster's own nodes, without the
	// nodes tests add.
	members []string
}

// startSecureLeader starts a secure cluster and waits for its leader; the
// returned context bounds the test and ends with it.
func startSecureLeader(t *testing.T, limit time.Duration) (*secureCluster, *proccluster.Node, context.Context) {
	t.Helper()
	sc := startSecureCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	lead, err := sc.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return sc, lead, ctx
}

func startSecureCluster(t *testing.T) *secureCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real processes; skipped with -short")
	}
	dir := t.TempDir()
	pki, err := tlsutil.WriteDevPKI(filepath.Join(dir, "tls"), tlsutil.DevOptions{Nodes: []string{"n1", "n2", "n3"}})
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# token role name\n"+clientToken+" client bob\n"+adminToken+" admin ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := tlsConfig(t, pki.Admin)
	c, err := proccluster.Start(proccluster.Options{
		Nodes: 3, Dir: dir, Secure: true,
		ExtraArgs:     []string{"--auth-tokens", tokens},
		NodeArgs:      func(id string) []string { return nodeTLSArgs(pki, id) },
		ClientOptions: []client.Option{client.WithTLS(admin)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Logs(40))
		}
		c.Stop()
	})
	sc := &secureCluster{Cluster: c, pki: pki, dir: dir, members: c.Endpoints()}
	// Ready when every member's API address is known: the followers have
	// announced themselves, with their peer certificates.
	cl := c.Client()
	testutil.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := cl.Status(ctx)
		if err != nil {
			return err
		}
		if len(st.Members) != 3 || st.LeaderID == "" {
			return fmt.Errorf("%d members, leader %q", len(st.Members), st.LeaderID)
		}
		for _, m := range st.Members {
			if m.HTTPAddr == "" {
				return fmt.Errorf("member %s has not announced its API address", m.ID)
			}
		}
		return nil
	})
	return sc
}

func nodeTLSArgs(pki *tlsutil.DevPKI, id string) []string {
	nf, ok := pki.Nodes[id]
	if !ok {
		return nil
	}
	return []string{"--tls-cert", nf.Server.Cert, "--tls-key", nf.Server.Key, "--tls-ca", pki.CA,
		"--peer-tls-cert", nf.Peer.Cert, "--peer-tls-key", nf.Peer.Key, "--peer-tls-ca", pki.CA}
}

func tlsConfig(t *testing.T, f tlsutil.Files) *tls.Config {
	t.Helper()
	cfg, err := tlsutil.ClientConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// httpsClient is a raw HTTPS client presenting cfg's certificate.
func httpsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// call sends one request and returns the status and the error body.
func call(t *testing.T, hc *http.Client, method, url, body string, hdr ...string) (int, client.ErrorResponse, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, client.ErrorResponse{}, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var er client.ErrorResponse
	_ = json.Unmarshal(data, &er)
	if er.Code == "" && resp.StatusCode/100 != 2 {
		er.Message = string(data)
	}
	return resp.StatusCode, er, nil
}

// state is everything a refused request must leave as it was: every key
// (without the lease time left, which runs) and the members.
func (sc *secureCluster) state(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := client.New(sc.members, client.WithTLS(tlsConfig(t, sc.pki.Admin)))
	keys, err := cl.Keys(ctx, "", 0)
	if err != nil {
		t.Fatalf("keys: %v", err)
	}
	for i := range keys {
		keys[i].LeaseRemaining = ""
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var members []string
	for _, m := range st.Members {
		members = append(members, fmt.Sprintf("%s=%s/%s/%v", m.ID, m.RaftAddr, m.HTTPAddr, m.Voter))
	}
	b, _ := json.Marshal(map[string]any{"keys": keys, "members": members})
	return string(b)
}

// TestSecureRefusals sends requests without credentials, with certificates of
// another CA, with an expired certificate, with an unknown token and with the
// wrong role, to the leader and to a follower: each is refused with 401 or
// 403 and the code of its cause, and the cluster's state is unchanged.
func TestSecureRefusals(t *testing.T) {
	sc, lead, ctx := startSecureLeader(t, 2*time.Minute)
	var fol *proccluster.Node
	for _, n := range sc.Nodes {
		if n != lead {
			fol = n
		}
	}
	// A grant of the admin's, so there is something to steal.
	ops := client.New(sc.Endpoints(), client.WithTLS(tlsConfig(t, tlsutil.Files{CA: sc.pki.CA})), client.WithBearerToken(adminToken))
	g, err := ops.Acquire(ctx, client.AcquireRequest{Key: "orders-db", Holder: "ops/worker-1", TTL: "5m"})
	if err != nil {
		t.Fatal(err)
	}

	foreign, err := tlsutil.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	realCA, err := tlsutil.LoadCA(sc.pki.CA, sc.pki.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *tlsutil.CA, l tlsutil.Leaf) tlsutil.Files {
		f, err := ca.IssueFiles(t.TempDir(), "cert", l)
		if err != nil {
			t.Fatal(err)
		}
		f.CA = sc.pki.CA
		return f
	}
	foreignAdmin := issue(foreign, tlsutil.Leaf{CommonName: "admin", OU: []string{tlsutil.OUAdmin}, Client: true})
	expiredAdmin := issue(realCA, tlsutil.Leaf{CommonName: "admin", OU: []string{tlsutil.OUAdmin}, Client: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	noRole := issue(realCA, tlsutil.Leaf{CommonName: "nobody", Client: true})

	anon := httpsClient(tlsConfig(t, tlsutil.Files{CA: sc.pki.CA}))
	clients := map[string]*http.Client{
		"anonymous":     anon,
		"foreign-ca":    httpsClient(tlsConfig(t, foreignAdmin)),
		"expired":       httpsClient(tlsConfig(t, expiredAdmin)),
		"no-role":       httpsClient(tlsConfig(t, noRole)),
		"client-cert":   httpsClient(tlsConfig(t, sc.pki.Client)),
		"client-token":  anon,
		"unknown-token": anon,
	}
	headers := map[string][]string{
		"client-token":  {"Authorization", "Bearer " + clientToken},
		"unknown-token": {"Authorization", "Bearer tok-0000000000000000000"},
	}
	forged := client.ReleaseRequest{Key: "orders-db", Force: true}
	forcedBody, _ := json.Marshal(forged)
	calls := []struct{ name, method, path, body string }{
		{"acquire", "POST", "/v1/acquire", `{"key":"orders-db","holder":"mallory","ttl":"10s"}`},
		{"steal-renew", "POST", "/v1/renew", fmt.Sprintf(`{"key":"orders-db","holder":"ops/worker-1","token":"%s"}`, g.Token)},
		{"steal-release", "POST", "/v1/release", fmt.Sprintf(`{"key":"orders-db","holder":"ops/worker-1","token":"%s"}`, g.Token)},
		{"steal-keepalive", "POST", "/v1/keepalive", `{"holder":"ops/worker-1"}`},
		{"force-release", "POST", "/v1/release", string(forcedBody)},
		{"join", "POST", "/v1/cluster/join", `{"id":"evil","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`},
		{"remove", "POST", "/v1/cluster/remove", fmt.Sprintf(`{"id":"%s"}`, fol.ID)},
		{"transfer", "POST", "/v1/cluster/transfer", `{}`},
		{"snapshot", "GET", "/v1/snapshot", ""},
		{"restore", "POST", "/v1/snapshot/restore", "FENCEDB1 not really a backup"},
	}
	// want is the status each identity gets for each operation (200s are
	// not sent: they would change the state).
	want := func(who string) (int, string) {
		switch who {
		case "anonymous", "foreign-ca", "expired", "unknown-token":
			return http.StatusUnauthorized, "unauthenticated"
		}
		return http.StatusForbidden, "forbidden"
	}
	before := sc.state(t)
	for _, n := range []*proccluster.Node{lead, fol} {
		for who, hc := range clients {
			for _, op := range calls {
				status, er, err := call(t, hc, op.method, sc.URL(n)+op.path, op.body, headers[who]...)
				if err != nil {
					t.Fatalf("%s %s via %s: %v", who, op.name, n.ID, err)
				}
				ws, wc := want(who)
				if status != ws || er.Code != wc {
					t.Errorf("%s %s via %s: %d %s (%s), want %d %s", who, op.name, n.ID, status, er.Code, er.Message, ws, wc)
				}
			}
		}
	}
	// A plaintext request to a TLS port is refused before it is read.
	status, er, err := call(t, &http.Client{Timeout: 5 * time.Second}, "POST", "http://"+lead.HTTPAddr+"/v1/acquire",
		`{"key":"plain","holder":"p","ttl":"10s"}`)
	if err == nil && status != http.StatusBadRequest {
		t.Errorf("plaintext request to the TLS port: %d %+v", status, er)
	}
	// A client that does not trust the cluster's CA never completes a
	// handshake: it sends nothing.
	_, _, err = call(t, httpsClient(tlsConfig(t, tlsutil.Files{CA: writePEM(t, foreign.CertPEM)})), "GET", sc.URL(lead)+"/v1/cluster", "")
	var verr *tls.CertificateVerificationError
	var uerr x509.UnknownAuthorityError
	if !errors.As(err, &verr) && !errors.As(err, &uerr) {
		t.Errorf("a client trusting another CA: err = %v, want a certificate verification failure", err)
	}
	if after := sc.state(t); after != before {
		t.Fatalf("refused requests changed the state:\nbefore %s\nafter  %s", before, after)
	}

	// The same credentials with the right role succeed, through a follower
	// too: the forwarded identity is the one the follower authenticated.
	fc := client.New([]string{fol.HTTPAddr}, client.WithTLS(tlsConfig(t, sc.pki.Client)))
	g2, err := fc.Acquire(ctx, client.AcquireRequest{Key: "client-key", Holder: "client/job-7", TTL: "1m"})
	if err != nil {
		t.Fatalf("client certificate through a follower: %v", err)
	}
	if _, err := fc.Renew(ctx, "client-key", "client/job-7", g2.Token); err != nil {
		t.Fatalf("renew own grant: %v", err)
	}
	ops2 := client.New([]string{fol.HTTPAddr}, client.WithTLS(tlsConfig(t, tlsutil.Files{CA: sc.pki.CA})), client.WithBearerToken(adminToken))
	if _, err := ops2.Release(ctx, client.ReleaseRequest{Key: "orders-db", Force: true}); err != nil {
		t.Fatalf("admin force-release through a follower: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		data, _ := os.ReadFile(lead.LogPath)
		if !bytes.Contains(data, []byte("forced release")) || !bytes.Contains(data, []byte(`by="ops (admin, forwarded)"`)) {
			return errors.New("the leader has not logged the forced release with the admin's identity")
		}
		return nil
	})
}

// TestHolderBinding checks that with authentication on, an identity acts
// only as its own holders: bob cannot renew, release or keep alive a grant
// of client's, even with its token, and client cannot release bob's.
func TestHolderBinding(t *testing.T) {
	sc, _, ctx := startSecureLeader(t, time.Minute)
	ca := tlsConfig(t, tlsutil.Files{CA: sc.pki.CA})
	cl := client.New(sc.Endpoints(), client.WithTLS(tlsConfig(t, sc.pki.Client)))
	bob := client.New(sc.Endpoints(), client.WithTLS(ca), client.WithBearerToken(clientToken))
	ga, err := cl.Acquire(ctx, client.AcquireRequest{Key: "a", Holder: "client/a", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	gb, err := bob.Acquire(ctx, client.AcquireRequest{Key: "b", Holder: "bob", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	before := sc.state(t)
	refusals := []struct {
		what string
		do   func() error
	}{
		{"bob renews client's grant", func() error { _, err := bob.Renew(ctx, "a", "client/a", ga.Token); return err }},
		{"bob releases client's grant", func() error {
			_, err := bob.Release(ctx, client.ReleaseRequest{Key: "a", Holder: "client/a", Token: ga.Token})
			return err
		}},
		{"bob keeps client's leases alive", func() error { _, err := bob.Keepalive(ctx, "client/a"); return err }},
		{"bob acquires as client", func() error {
			_, err := bob.Acquire(ctx, client.AcquireRequest{Key: "a", Holder: "client/a", TTL: "1m"})
			return err
		}},
		{"client releases bob's grant", func() error {
			_, err := cl.Release(ctx, client.ReleaseRequest{Key: "b", Holder: "bob", Token: gb.Token})
			return err
		}},
		{"client holder prefix is not a name prefix", func() error {
			_, err := cl.Acquire(ctx, client.AcquireRequest{Key: "c", Holder: "clientele", TTL: "1m"})
			return err
		}},
	}
	for _, r := range refusals {
		err := r.do()
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || !errors.Is(err, client.ErrForbidden) {
			t.Errorf("%s: %v, want 403 forbidden", r.what, err)
		}
	}
	// Naming the holder right but with a stale token is the FSM's refusal.
	if _, err := bob.Release(ctx, client.ReleaseRequest{Key: "b", Holder: "bob", Token: gb.Token + 1}); !errors.Is(err, client.ErrStaleToken) {
		t.Errorf("release with another token: %v, want stale_token", err)
	}
	if after := sc.state(t); after != before {
		t.Fatalf("refused requests changed the state:\nbefore %s\nafter  %s", before, after)
	}
}

// TestForeignNode starts nodes whose peer certificates come from another
// CA: one tries to join through the API, one bootstraps a configuration that
// names a member and campaigns against it, and one speaks plain TCP Raft.
// None becomes a member, and the cluster keeps its leader, its term and
// serves.
func TestForeignNode(t *testing.T) {
	sc, lead, ctx := startSecureLeader(t, 2*time.Minute)
	cl := sc.Client()
	st0, err := cl.NodeStatus(ctx, sc.URL(lead))
	if err != nil {
		t.Fatal(err)
	}
	before := sc.state(t)

	foreignDir := filepath.Join(t.TempDir(), "foreign")
	fpki, err := tlsutil.WriteDevPKI(foreignDir, tlsutil.DevOptions{Nodes: []string{"x1", "x2"}})
	if err != nil {
		t.Fatal(err)
	}
	// The intruders trust the cluster's CA, so that nothing stops them on
	// their side; the cluster does not trust theirs.
	foreignArgs := func(id string) []string {
		nf := fpki.Nodes[id]
		return []string{"--tls-cert", nf.Server.Cert, "--tls-key", nf.Server.Key, "--tls-ca", sc.pki.CA,
			"--peer-tls-cert", nf.Peer.Cert, "--peer-tls-key", nf.Peer.Key, "--peer-tls-ca", sc.pki.CA}
	}
	joiner, err := sc.AddNode("x1", append(foreignArgs("x1"), "--join", lead.HTTPAddr)...)
	if err != nil {
		t.Fatal(err)
	}
	campaigner, err := sc.NewNode("x2")
	if err != nil {
		t.Fatal(err)
	}
	// A node whose own configuration names the leader: it campaigns with
	// ever higher terms, which would depose the leader if it were heard.
	if err := startWithArgs(sc, campaigner, append(foreignArgs("x2"),
		"--peers", fmt.Sprintf("x2=%s,%s=%s", campaigner.RaftAddr, lead.ID, lead.RaftAddr))...); err != nil {
		t.Fatal(err)
	}
	plain, err := sc.NewNode("x3")
	if err != nil {
		t.Fatal(err)
	}
	if err := startWithArgs(sc, plain, "--peers", fmt.Sprintf("x3=%s,%s=%s", plain.RaftAddr, lead.ID, lead.RaftAddr)); err != nil {
		t.Fatal(err)
	}
	// Wait until each intruder has tried: the joiner was refused, the
	// others campaigned (their terms rose).
	testutil.Eventually(t, 30*time.Second, func() error {
		data, _ := os.ReadFile(joiner.LogPath)
		if !bytes.Contains(data, []byte("join/announce not done yet")) {
			return errors.New("the joiner has not been refused yet")
		}
		for _, n := range []*proccluster.Node{campaigner, plain} {
			data, _ := os.ReadFile(n.LogPath)
			if bytes.Count(data, []byte("entering candidate state")) < 3 {
				return fmt.Errorf("%s has not campaigned three times yet", n.ID)
			}
		}
		return nil
	})
	data, _ := os.ReadFile(joiner.LogPath)
	if !bytes.Contains(data, []byte("unauthenticated")) {
		t.Errorf("the joiner's log does not say it was refused as unauthenticated:\n%s", tail(data, 10))
	}
	st1, err := cl.NodeStatus(ctx, sc.URL(lead))
	if err != nil {
		t.Fatal(err)
	}
	if !st1.Ready || st1.LeaderID != lead.ID || st1.Term != st0.Term {
		t.Fatalf("the cluster was disturbed: leader %s term %d ready %v, before leader %s term %d", st1.LeaderID, st1.Term, st1.Ready, lead.ID, st0.Term)
	}
	if after := sc.state(t); after != before {
		t.Fatalf("the intruders changed the state:\nbefore %s\nafter  %s", before, after)
	}
	if _, err := cl.Acquire(ctx, client.AcquireRequest{Key: "still-serving", Holder: "ops", TTL: "10s"}); err != nil {
		t.Fatalf("the cluster stopped serving: %v", err)
	}
}

// startWithArgs starts a node prepared by NewNode with more arguments.
func startWithArgs(sc *secureCluster, n *proccluster.Node, args ...string) error {
	sc.AppendArgs(n, args...)
	return sc.StartNode(n)
}

func ipsOf(ss []string) []net.IP {
	var out []net.IP
	for _, s := range ss {
		out = append(out, net.ParseIP(s))
	}
	return out
}

func tail(data []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func writePEM(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCertReloadOnSIGHUP replaces a node's HTTP and peer certificates on
// disk, sends SIGHUP, and checks that new connections see the new
// certificates while the node keeps serving; a broken file is refused and
// the certificate in use kept.
func TestCertReloadOnSIGHUP(t *testing.T) {
	sc, _, ctx := startSecureLeader(t, time.Minute)
	n := sc.Nodes[1]
	nf := sc.pki.Nodes[n.ID]
	clientCfg := tlsConfig(t, tlsutil.Files{CA: sc.pki.CA})
	peerCfg := tlsConfig(t, sc.pki.Nodes[sc.Nodes[0].ID].Peer)
	serial := func(addr string, cfg *tls.Config) (string, error) {
		conn, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	httpOld, err := serial(n.HTTPAddr, clientCfg)
	if err != nil {
		t.Fatal(err)
	}
	raftOld, err := serial(n.RaftAddr, peerCfg)
	if err != nil {
		t.Fatal(err)
	}

	ca, err := tlsutil.LoadCA(sc.pki.CA, sc.pki.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	replace := func(f tlsutil.Files, l tlsutil.Leaf) {
		t.Helper()
		dir := t.TempDir()
		nf, err := ca.IssueFiles(dir, "new", l)
		if err != nil {
			t.Fatal(err)
		}
		for src, dst := range map[string]string{nf.Cert: f.Cert, nf.Key: f.Key} {
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst+".tmp", data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(dst+".tmp", dst); err != nil {
				t.Fatal(err)
			}
		}
	}
	ips := []string{"localhost", "127.0.0.1"}
	replace(nf.Server, tlsutil.Leaf{CommonName: n.ID, DNSNames: ips[:1], IPs: ipsOf(ips[1:]), Server: true})
	replace(nf.Peer, tlsutil.Leaf{CommonName: n.ID, OU: []string{tlsutil.DefaultPeerOU}, DNSNames: ips[:1], IPs: ipsOf(ips[1:]), Server: true, Client: true})
	if err := syscall.Kill(n.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		h, err := serial(n.HTTPAddr, clientCfg)
		if err != nil {
			return err
		}
		r, err := serial(n.RaftAddr, peerCfg)
		if err != nil {
			return err
		}
		if h == httpOld || r == raftOld {
			return fmt.Errorf("still the old certificates (http %v, raft %v)", h == httpOld, r == raftOld)
		}
		return nil
	})
	// The node still serves, and the cluster still talks to it.
	one := client.New([]string{n.HTTPAddr}, client.WithTLS(tlsConfig(t, sc.pki.Admin)))
	if _, err := one.Acquire(ctx, client.AcquireRequest{Key: "after-reload", Holder: "ops", TTL: "10s"}); err != nil {
		t.Fatalf("after the reload: %v", err)
	}

	// A broken certificate file is refused, and the one in use kept.
	httpNew, _ := serial(n.HTTPAddr, clientCfg)
	if err := os.WriteFile(nf.Server.Cert, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(n.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		data, _ := os.ReadFile(n.LogPath)
		if !bytes.Contains(data, []byte("reload failed; keeping the material in use")) {
			return errors.New("the failed reload is not logged yet")
		}
		return nil
	})
	if h, err := serial(n.HTTPAddr, clientCfg); err != nil || h != httpNew {
		t.Fatalf("after a failed reload: serial %s (want %s), %v", h, httpNew, err)
	}
}

// TestFencectlSecure drives the secure cluster with the fencectl binary:
// certificates and tokens from flags and from the environment, a refusal
// that names its reason, and a lock whose command inherits the credentials.
func TestFencectlSecure(t *testing.T) {
	sc, _, ctx := startSecureLeader(t, time.Minute)
	bin, err := proccluster.Fencectl()
	if err != nil {
		t.Fatal(err)
	}
	ctl := func(env []string, args ...string) (int, string) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(append(os.Environ(), "FENCE_ENDPOINTS="+strings.Join(sc.members, ",")), env...)
		out, err := cmd.CombinedOutput()
		var xe *exec.ExitError
		if errors.As(err, &xe) {
			return xe.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	asClient := []string{"--cacert", sc.pki.CA, "--cert", sc.pki.Client.Cert, "--key", sc.pki.Client.Key}
	if code, out := ctl(nil, append(asClient, "status")...); code != 0 || !strings.Contains(out, "3 ready") {
		t.Fatalf("status as client: exit %d\n%s", code, out)
	}
	if code, out := ctl(nil, append(asClient, "acquire", "deploy", "--holder", "client/ci")...); code != 0 {
		t.Fatalf("acquire as client: exit %d\n%s", code, out)
	}
	if code, out := ctl(nil, append(asClient, "acquire", "other", "--holder", "ci")...); code != 1 || !strings.Contains(out, "may not act as holder") {
		t.Fatalf("acquire as another holder: exit %d\n%s", code, out)
	}
	if code, out := ctl(nil, "--cacert", sc.pki.CA, "status"); code != 1 || !strings.Contains(out, "authentication required") {
		t.Fatalf("status without credentials: exit %d\n%s", code, out)
	}
	tokenEnv := []string{"FENCE_CACERT=" + sc.pki.CA, "FENCE_AUTH_TOKEN=" + clientToken,
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	// The lock's command gets FENCE_KEY and FENCE_TOKEN (the grant's) and
	// the credentials, and verifies its own token with them.
	code, out := ctl(tokenEnv, "lock", "job", "--holder", "bob/job", "--ttl", "10s", "--shell", "--",
		`fencectl verify "$FENCE_KEY" "$FENCE_TOKEN" --holder bob/job`)
	if code != 0 {
		t.Fatalf("lock with a token, verifying inside: exit %d\n%s", code, out)
	}
	// The benchmark's own transport speaks mutual TLS like the library's.
	admin := []string{"--cacert", sc.pki.CA, "--cert", sc.pki.Admin.Cert, "--key", sc.pki.Admin.Key}
	for _, tr := range []string{"lean", "std"} {
		code, out := ctl(nil, append(admin, "-o", "json", "bench", "verify", "keepalive", "--clients", "2", "--duration", "300ms", "--transport", tr)...)
		var rs []struct{ Ops, Errors int64 }
		start := max(0, strings.Index(out, "[\n")) // after the progress bar
		if code != 0 || json.Unmarshal([]byte(out[start:]), &rs) != nil || len(rs) != 2 {
			t.Fatalf("bench over mutual TLS, %s transport: exit %d\n%s", tr, code, out)
		}
		for _, r := range rs {
			if r.Ops == 0 || r.Errors != 0 {
				t.Fatalf("bench over mutual TLS, %s transport: %+v\n%s", tr, rs, out)
			}
		}
	}
}

// TestPeerChangesOnlyItself uses nodes' peer certificates against the
// membership API of a secure cluster: a node may join or leave as itself
// only. Joining as another id, re-registering another member's address,
// removing another member and a body that cannot be decoded are all
// refused, through the leader and through a follower, and change nothing.
// Then an admin points the leader's recorded HTTP address at a listener
// whose certificate (of the cluster's CA) does not name the leader: the
// followers refuse to forward to it, and it never sees a client's token.
func TestPeerChangesOnlyItself(t *testing.T) {
	sc, lead, ctx := startSecureLeader(t, 2*time.Minute)
	var fol *proccluster.Node
	for _, n := range sc.Nodes {
		if n != lead {
			fol = n
		}
	}
	peer := func(id string) *http.Client { return httpsClient(tlsConfig(t, sc.pki.Nodes[id].Peer)) }
	other := sc.Nodes[0].ID
	if other == lead.ID {
		other = sc.Nodes[1].ID
	}
	spare := testutil.FreeAddrs(t, 1)[0]
	before := sc.state(t)
	refusals := []struct {
		name, as, path, body string
		status               int
		code                 string
	}{
		{"join as another id", "n1", "/v1/cluster/join", fmt.Sprintf(`{"id":"n9","raft_addr":%q}`, spare), http.StatusForbidden, "forbidden"},
		{"join as another id with an address", "n1", "/v1/cluster/join", fmt.Sprintf(`{"id":"n9","raft_addr":%q,"http_addr":"127.0.0.1:1"}`, spare), http.StatusForbidden, "forbidden"},
		{"re-register another member", "n3", "/v1/cluster/join",
			fmt.Sprintf(`{"id":"n1","raft_addr":%q,"http_addr":"127.0.0.1:1"}`, sc.Node("n1").RaftAddr), http.StatusForbidden, "forbidden"},
		{"remove another member", "n1", "/v1/cluster/remove", fmt.Sprintf(`{"id":%q}`, "n2"), http.StatusForbidden, "forbidden"},
		{"join with an unknown field", "n1", "/v1/cluster/join", fmt.Sprintf(`{"id":"n1","raft_addr":%q,"evil":1}`, spare), http.StatusBadRequest, "bad_request"},
		{"join with a body that is not JSON", "n1", "/v1/cluster/join", `{"id":"n9","raft_addr":`, http.StatusBadRequest, "bad_request"},
		{"remove with two bodies", "n1", "/v1/cluster/remove", `{"id":"n1"}{"id":"n2"}`, http.StatusBadRequest, "bad_request"},
	}
	for _, n := range []*proccluster.Node{lead, fol} {
		for _, r := range refusals {
			status, er, err := call(t, peer(r.as), "POST", sc.URL(n)+r.path, r.body)
			if err != nil {
				t.Fatalf("%s via %s: %v", r.name, n.ID, err)
			}
			if status != r.status || er.Code != r.code {
				t.Errorf("%s (as %s) via %s: %d %s (%s), want %d %s", r.name, r.as, n.ID, status, er.Code, er.Message, r.status, r.code)
			}
		}
	}
	if after := sc.state(t); after != before {
		t.Fatalf("refused membership changes changed the state:\nbefore %s\nafter  %s", before, after)
	}
	// A node announcing itself again is still allowed (idempotent).
	self := fmt.Sprintf(`{"id":%q,"raft_addr":%q,"http_addr":%q}`, other, sc.Node(other).RaftAddr, sc.Node(other).HTTPAddr)
	if status, er, err := call(t, peer(other), "POST", sc.URL(lead)+"/v1/cluster/join", self); err != nil || status != http.StatusOK {
		t.Fatalf("%s announcing itself: %d %+v %v", other, status, er, err)
	}

	realCA, err := tlsutil.LoadCA(sc.pki.CA, sc.pki.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	// A node started as n5 with the peer certificate of n4 is refused: it
	// may join only as n4.
	dir := t.TempDir()
	ips := ipsOf([]string{"127.0.0.1"})
	srvCert, err := realCA.IssueFiles(dir, "n5-server", tlsutil.Leaf{CommonName: "n5", DNSNames: []string{"n5", "localhost"}, IPs: ips, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	n4Peer, err := realCA.IssueFiles(dir, "n4-peer", tlsutil.Leaf{CommonName: "n4", OU: []string{tlsutil.DefaultPeerOU},
		DNSNames: []string{"n4", "localhost"}, IPs: ips, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	n5, err := sc.AddNode("n5", "--join", lead.HTTPAddr, "--tls-cert", srvCert.Cert, "--tls-key", srvCert.Key, "--tls-ca", sc.pki.CA,
		"--peer-tls-cert", n4Peer.Cert, "--peer-tls-key", n4Peer.Key, "--peer-tls-ca", sc.pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		data, _ := os.ReadFile(n5.LogPath)
		if !bytes.Contains(data, []byte("join/announce not done yet")) {
			return errors.New("n5 has not been refused yet")
		}
		return nil
	})
	if data, _ := os.ReadFile(n5.LogPath); !bytes.Contains(data, []byte("forbidden")) {
		t.Errorf("n5's log does not say its join was forbidden:\n%s", tail(data, 10))
	}
	sc.Kill(n5)
	if after := sc.state(t); after != before {
		t.Fatalf("a node with another node's certificate changed the membership:\nbefore %s\nafter  %s", before, after)
	}

	// An impostor with a certificate of the cluster's CA, valid for its
	// address, naming no member.
	imp, err := realCA.IssueFiles(t.TempDir(), "impostor", tlsutil.Leaf{CommonName: "mallory", DNSNames: []string{"localhost"},
		IPs: ipsOf([]string{"127.0.0.1"}), Server: true})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(imp.Cert, imp.Key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 16)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization") + "|" + r.Header.Get("X-Fenced-Identity")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"key":"stolen","holder":"bob/w","token":"99999999999999","epoch":23283,"seq":1,"ttl":"10s"}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	admin := client.New([]string{sc.URL(lead)}, client.WithTLS(tlsConfig(t, sc.pki.Admin)))
	if err := admin.Join(ctx, client.JoinRequest{ID: lead.ID, RaftAddr: lead.RaftAddr, HTTPAddr: ln.Addr().String()}); err != nil {
		t.Fatalf("admin re-registers the leader's address: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		st, err := sc.Client().NodeStatus(ctx, sc.URL(fol))
		if err != nil {
			return err
		}
		if st.LeaderHTTP != ln.Addr().String() {
			return fmt.Errorf("%s knows the leader at %s", fol.ID, st.LeaderHTTP)
		}
		return nil
	})
	status, er, err := call(t, httpsClient(tlsConfig(t, tlsutil.Files{CA: sc.pki.CA})), "POST", sc.URL(fol)+"/v1/acquire",
		`{"key":"stolen","holder":"bob/w","ttl":"10s"}`, "Authorization", "Bearer "+clientToken)
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusServiceUnavailable {
		t.Errorf("acquire through a follower that knows the leader at an impostor: %d %s (%s), want 503", status, er.Code, er.Message)
	}
	select {
	case h := <-seen:
		t.Errorf("the impostor received a forwarded request (Authorization|identity: %q)", h)
	default:
	}
}

// TestTokensReloadVisible makes one node's tokens reload fail while the
// others load a new file: the failure shows in the node's metrics and in
// its /v1/cluster, fencectl status names the node whose credentials are
// older than the others', and a tokens file readable by others is warned
// about.
func TestTokensReloadVisible(t *testing.T) {
	sc, _, ctx := startSecureLeader(t, 2*time.Minute)
	path := filepath.Join(sc.dir, "tokens")
	n1, n2, n3 := sc.Nodes[0], sc.Nodes[1], sc.Nodes[2]
	hup := func(ns ...*proccluster.Node) {
		for _, n := range ns {
			if err := syscall.Kill(n.PID(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
	}
	cl := sc.Client()
	credentials := func(n *proccluster.Node) (*client.Status, error) {
		st, err := cl.NodeStatus(ctx, sc.URL(n))
		if err != nil {
			return nil, err
		}
		if st.Credentials == nil {
			return nil, fmt.Errorf("%s reports no credentials", n.ID)
		}
		return st, nil
	}
	st0, err := credentials(n1)
	if err != nil {
		t.Fatal(err)
	}
	// bob's token is revoked on n1 and n3.
	if err := os.WriteFile(path, []byte(adminToken+" admin ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup(n1, n3)
	testutil.Eventually(t, 10*time.Second, func() error {
		for _, n := range []*proccluster.Node{n1, n3} {
			st, err := credentials(n)
			if err != nil {
				return err
			}
			if st.Credentials.TokensDigest == st0.Credentials.TokensDigest {
				return fmt.Errorf("%s still has the old tokens", n.ID)
			}
		}
		return nil
	})
	// n2's reload fails: it keeps bob's token.
	if err := os.WriteFile(path, []byte("not a tokens file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup(n2)
	testutil.Eventually(t, 10*time.Second, func() error {
		st, err := credentials(n2)
		if err != nil {
			return err
		}
		if st.Credentials.ReloadError == "" {
			return errors.New("n2 does not report its failed reload yet")
		}
		return nil
	})
	if err := os.WriteFile(path, []byte(adminToken+" admin ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsOf := func(n *proccluster.Node) string {
		_, body := get(t, httpsClient(tlsConfig(t, tlsutil.Files{CA: sc.pki.CA})), sc.URL(n)+"/metrics")
		return body
	}
	if m := metricsOf(n2); !strings.Contains(m, `fenced_credentials_reload_success{material="tokens"} 0`) {
		t.Errorf("n2's metrics do not show its failed tokens reload:\n%s", grepLines(m, "fenced_credentials"))
	}
	if m := metricsOf(n1); !strings.Contains(m, `fenced_credentials_reload_success{material="tokens"} 1`) {
		t.Errorf("n1's metrics do not show its tokens reload:\n%s", grepLines(m, "fenced_credentials"))
	}

	bin, err := proccluster.Fencectl()
	if err != nil {
		t.Fatal(err)
	}
	admin := []string{"--endpoints", strings.Join(sc.members, ","), "--cacert", sc.pki.CA, "--cert", sc.pki.Admin.Cert, "--key", sc.pki.Admin.Key}
	out, err := exec.CommandContext(ctx, bin, append(admin, "status")...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "n2") || !strings.Contains(string(out), "credentials are older") {
		t.Errorf("fencectl status does not name n2's stale credentials (%v):\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, bin, append(admin, "-o", "json", "status")...).Output()
	var doc struct {
		Members []struct {
			ID               string `json:"id"`
			CredentialsStale bool   `json:"credentials_stale"`
		} `json:"members"`
	}
	if err != nil || json.Unmarshal(out, &doc) != nil {
		t.Fatalf("fencectl status -o json: %v\n%s", err, out)
	}
	for _, m := range doc.Members {
		if m.CredentialsStale != (m.ID == n2.ID) {
			t.Errorf("member %s: credentials_stale %v", m.ID, m.CredentialsStale)
		}
	}

	// A tokens file others can read is warned about at each load.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	hup(n1)
	testutil.Eventually(t, 10*time.Second, func() error {
		data, _ := os.ReadFile(n1.LogPath)
		if !bytes.Contains(data, []byte("tokens file is readable by other users")) {
			return errors.New("no warning about the tokens file's mode yet")
		}
		return nil
	})
}

// get fetches url and returns the status and the body.
func get(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
