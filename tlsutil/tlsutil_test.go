package tlsutil

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func devPKI(t *testing.T) *DevPKI {
	t.Helper()
	p, err := WriteDevPKI(filepath.Join(t.TempDir(), "tls"), DevOptions{Nodes: []string{"n1", "n2"}, Hosts: []string{"fenced1", "10.0.0.5"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func loadStore(t *testing.T, f Files) *Store {
	t.Helper()
	s, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve accepts TLS connections with cfg and answers each with "ok" once
// the handshake succeeded.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// exchange dials with cfg and reports whether the server answered.
func exchange(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2)
	_, err = io.ReadFull(c, buf)
	return err
}

// TestPeerMutualTLS checks the Raft transport's configurations: nodes with
// peer certificates of the CA talk; a certificate of another CA, one without
// OU=peer, no certificate, and plain TCP are all refused.
func TestPeerMutualTLS(t *testing.T) {
	p := devPKI(t)
	n1 := loadStore(t, p.Nodes["n1"].Peer)
	n2 := loadStore(t, p.Nodes["n2"].Peer)
	addr := serve(t, PeerServerConfig(n1, DefaultPeerOU))
	if err := exchange(addr, PeerClientConfig(n2, DefaultPeerOU)); err != nil {
		t.Fatalf("a peer of the same CA: %v", err)
	}

	other := devPKI(t)
	foreign := loadStore(t, Files{Cert: other.Nodes["n2"].Peer.Cert, Key: other.Nodes["n2"].Peer.Key, CA: p.CA})
	adminAsPeer := loadStore(t, Files{Cert: p.Admin.Cert, Key: p.Admin.Key, CA: p.CA})
	noCert := loadStore(t, Files{CA: p.CA})
	for name, s := range map[string]*Store{"another CA": foreign, "no OU=peer": adminAsPeer, "no certificate": noCert} {
		if err := exchange(addr, PeerClientConfig(s, DefaultPeerOU)); err == nil {
			t.Errorf("%s: the server accepted it", name)
		}
	}
	// The dialing side refuses a server of another CA, too.
	other1 := loadStore(t, Files{Cert: other.Nodes["n1"].Peer.Cert, Key: other.Nodes["n1"].Peer.Key, CA: other.CA})
	foreignServer := serve(t, PeerServerConfig(other1, DefaultPeerOU))
	if err := exchange(foreignServer, PeerClientConfig(n2, DefaultPeerOU)); err == nil || !strings.Contains(err.Error(), "peer certificate") {
		t.Errorf("dialing a server of another CA: %v", err)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = conn.Write([]byte("\x00plain raft rpc"))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(conn); strings.Contains(string(b), "ok") {
		t.Error("a plaintext connection was answered")
	}
}

// TestReload swaps a certificate on disk: Reload serves the new one to the
// next handshake, and a broken file leaves the one in use.
func TestReload(t *testing.T) {
	p := devPKI(t)
	s := loadStore(t, p.Nodes["n1"].Server)
	old := s.Leaf().SerialNumber
	ca, err := LoadCA(p.CA, p.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.IssueFiles(t.TempDir(), "new", Leaf{CommonName: "n1", DNSNames: []string{"localhost"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{f.Cert: p.Nodes["n1"].Server.Cert, f.Key: p.Nodes["n1"].Server.Key} {
		data, _ := os.ReadFile(src)
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if s.Leaf().SerialNumber.Cmp(old) == 0 {
		t.Fatal("the reload kept the old certificate")
	}
	cur := s.Leaf().SerialNumber
	if err := os.WriteFile(p.Nodes["n1"].Server.Key, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("a broken key was accepted")
	}
	if s.Leaf().SerialNumber.Cmp(cur) != 0 {
		t.Fatal("a failed reload replaced the certificate")
	}
}

// TestDialerVerifiesHost checks the HTTP dialer: the host name must be in the
// server's certificate, and the client certificate is presented.
func TestDialerVerifiesHost(t *testing.T) {
	p := devPKI(t)
	srv := loadStore(t, p.Nodes["n1"].Server)
	cfg := ServerConfig(srv, tls.RequireAnyClientCert)
	addr := serve(t, cfg)
	roots := loadStore(t, Files{CA: p.CA})
	peer := loadStore(t, p.Nodes["n2"].Peer)
	dial := Dialer(roots, peer)
	c, err := dial(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c.Close()
	_, port, _ := net.SplitHostPort(addr)
	if _, err := Dialer(roots, peer)(t.Context(), "tcp", net.JoinHostPort("127.0.0.2", port)); err == nil {
		t.Error("a host name not in the certificate was accepted")
	}
	if _, err := Dialer(loadStore(t, Files{CA: devPKI(t).CA}), peer)(t.Context(), "tcp", addr); err == nil {
		t.Error("a server of another CA was accepted")
	} else if _, ok := err.(*net.OpError); !ok {
		t.Errorf("a failed handshake is %T, want a *net.OpError (a dial that sent nothing)", err)
	}
}

func TestDevPKIRefusesToOverwrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	if _, err := WriteDevPKI(dir, DevOptions{Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteDevPKI(dir, DevOptions{Nodes: []string{"n1"}}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second init: %v", err)
	}
	if _, err := WriteDevPKI(t.TempDir(), DevOptions{Nodes: []string{"../x"}}); err == nil {
		t.Fatal("a node id with a path was accepted")
	}
	st, err := os.Stat(filepath.Join(dir, "ca-key.pem"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("ca key mode %v %v", st.Mode(), err)
	}
}
