package tlsutil

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CertNames takes an id as named by the common name, a DNS name, or an IP
// address for an id that is one; nothing else.
func TestCertNames(t *testing.T) {
	c := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "n1", OrganizationalUnit: []string{"n2"}},
		DNSNames:    []string{"fenced-1.fenced", "n3"},
		IPAddresses: []net.IP{net.ParseIP("10.0.0.5"), net.ParseIP("::1")},
	}
	for id, want := range map[string]bool{
		"n1": true, "n3": true, "fenced-1.fenced": true, "10.0.0.5": true, "::1": true, "0:0:0:0:0:0:0:1": true,
		"n2": false, "N1": false, "": false, "10.0.0.6": false, "fenced-1": false, "n": false,
	} {
		if got := CertNames(c, id); got != want {
			t.Errorf("CertNames(%q) = %v, want %v", id, got, want)
		}
	}
}

// readLeaf parses the certificate in a PEM file.
func readLeaf(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A node's certificates prove its id and no other node's: each names its
// own id and never another node's, so that a node cannot answer or send Raft
// RPCs as another with its own certificate.
func TestDevPKINodeCertificatesNameOnlyTheirNode(t *testing.T) {
	nodes := []string{"n1", "n2", "fenced-0", "10.0.0.7"}
	p, err := WriteDevPKI(filepath.Join(t.TempDir(), "tls"), DevOptions{Nodes: nodes, Hosts: []string{"fenced", "10.0.0.5"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		for _, f := range []Files{p.Nodes[n].Peer, p.Nodes[n].Server} {
			c := readLeaf(t, f.Cert)
			if c.Subject.CommonName != n {
				t.Errorf("%s: CN %q, want the node id %q", f.Cert, c.Subject.CommonName, n)
			}
			for _, m := range nodes {
				if got := CertNames(c, m); got != (m == n) {
					t.Errorf("%s (node %s) names %s: %v", f.Cert, n, m, got)
				}
			}
		}
	}
}

// Every node certificate names localhost, the loopback addresses and every
// --hosts entry: a node id among them would be named by every node's
// certificate, so WriteDevPKI refuses it and writes nothing.
func TestDevPKIRefusesANodeIDEveryCertificateNames(t *testing.T) {
	for _, tt := range []struct {
		nodes, hosts []string
		want         string
	}{
		{[]string{"n1", "n2"}, []string{"n2"}, `node id "n2"`},
		{[]string{"fenced1", "fenced2"}, []string{"fenced1", "fenced2"}, `node id "fenced1"`},
		{[]string{"n1", "localhost"}, nil, `node id "localhost"`},
		{[]string{"n1", "127.0.0.1"}, nil, `node id "127.0.0.1"`},
		{[]string{"n1", "10.0.0.5"}, []string{"10.0.0.5"}, `node id "10.0.0.5"`},
		{[]string{"n1", "::1"}, nil, `node id "::1"`},
	} {
		dir := filepath.Join(t.TempDir(), "tls")
		_, err := WriteDevPKI(dir, DevOptions{Nodes: tt.nodes, Hosts: tt.hosts})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("nodes %v, hosts %v: error %v, want one naming %s", tt.nodes, tt.hosts, err, tt.want)
		}
		if _, serr := os.Stat(dir); serr == nil {
			t.Errorf("nodes %v, hosts %v: %s was written", tt.nodes, tt.hosts, dir)
		}
	}
}
