package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/tlsutil"
)

// TestTLSInit creates the development certificates, prints the flags that
// use them, and refuses to overwrite them.
func TestTLSInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	e, out, errb := testEnv(nil)
	if code := run(context.Background(), e, []string{"tls", "init", "--dir", dir, "--nodes", "a,b", "--hosts", "fenced-a,10.1.2.3"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem", "a/server.pem", "a/peer-key.pem", "b/peer.pem", "admin.pem", "client-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, want := range []string{"--tls-cert " + filepath.Join(dir, "a/server.pem"), "--peer-tls-ca " + filepath.Join(dir, "ca.pem"), "FENCE_KEY_FILE=", "--holder client/worker-1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	s, err := tlsutil.Load(tlsutil.Files{Cert: filepath.Join(dir, "a/peer.pem"), Key: filepath.Join(dir, "a/peer-key.pem")})
	if err != nil {
		t.Fatal(err)
	}
	if l := s.Leaf(); !tlsutil.HasOU(l, tlsutil.DefaultPeerOU) || l.Subject.CommonName != "a" || len(l.IPAddresses) < 2 || !strings.Contains(strings.Join(l.DNSNames, ","), "fenced-a") {
		t.Errorf("peer certificate: CN %q OU %v DNS %v IPs %v", l.Subject.CommonName, l.Subject.OrganizationalUnit, l.DNSNames, l.IPAddresses)
	}

	e, _, errb = testEnv(nil)
	if code := run(context.Background(), e, []string{"tls", "init", "--dir", dir}); code != 1 || !strings.Contains(errb.String(), "exists") {
		t.Fatalf("second init: exit %d, %s", code, errb)
	}
	e, out, _ = testEnv(nil)
	if code := run(context.Background(), e, []string{"-o", "json", "tls", "init", "--dir", filepath.Join(t.TempDir(), "j"), "--nodes", "n1"}); code != 0 {
		t.Fatalf("json: exit %d", code)
	}
	var p tlsutil.DevPKI
	if err := json.Unmarshal(out.Bytes(), &p); err != nil || p.Nodes["n1"].Peer.Cert == "" || p.Admin.Key == "" {
		t.Fatalf("json output %s: %v", out, err)
	}
}

// A node id that every node certificate would name (a --hosts entry,
// localhost) is refused, and nothing is written.
func TestTLSInitRefusesASharedNodeID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	e, _, errb := testEnv(nil)
	if code := run(context.Background(), e, []string{"tls", "init", "--dir", dir, "--nodes", "fenced1,fenced2", "--hosts", "fenced1,fenced2"}); code != 1 ||
		!strings.Contains(errb.String(), `node id "fenced1"`) || !strings.Contains(errb.String(), "--hosts") {
		t.Fatalf("exit %d: %s", code, errb)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s was written", dir)
	}
}

// TestTLSGlobalFlags checks the credentials' flags and variables: the
// variables fencectl lock sets for its command (FENCE_KEY, FENCE_TOKEN) are
// never taken for credentials.
func TestTLSGlobalFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	p, err := tlsutil.WriteDevPKI(dir, tlsutil.DevOptions{Nodes: []string{"n1"}})
	if err != nil {
		t.Fatal(err)
	}
	e, _, _ := testEnv(map[string]string{"FENCE_KEY": "orders-db", "FENCE_TOKEN": "8589934593"})
	if _, err := parse(e, []string{"status"}); err != nil || e.g.tls.key != "" || e.g.tls.token != "" || e.g.tls.cfg != nil {
		t.Fatalf("lock's variables were read as credentials: %+v %v", e.g.tls, err)
	}
	e, _, _ = testEnv(map[string]string{"FENCE_CACERT": p.CA, "FENCE_CERT": p.Admin.Cert, "FENCE_KEY_FILE": p.Admin.Key, "FENCE_AUTH_TOKEN": "t0k"})
	if _, err := parse(e, []string{"status", "--endpoints", "h:1,http://h:2"}); err != nil {
		t.Fatal(err)
	}
	if e.g.tls.cfg == nil || len(e.g.tls.cfg.Certificates) != 1 || e.g.tls.cfg.RootCAs == nil || e.g.tls.token != "t0k" {
		t.Fatalf("credentials from the environment: %+v", e.g.tls)
	}
	if eps := e.client().Endpoints(); eps[0] != "https://h:1" || eps[1] != "https://h:2" {
		t.Fatalf("endpoints with TLS: %v", eps)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--cert", p.Admin.Cert}, "--cert and --key go together"},
		{[]string{"status", "--cacert", filepath.Join(dir, "missing.pem")}, "--cacert"},
		{[]string{"status", "--cert", p.Admin.Cert, "--key", p.Client.Key}, "private key does not match"},
	} {
		e, _, _ := testEnv(nil)
		if _, err := parse(e, tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestUntrustedNodeCertificate: against a TLS node, a --cacert of another CA
// (of the same name, as two development CAs are) or a file that is no CA
// at all fails at once with the whole certificate error, not a fragment
// cut inside its quotes, and without claiming --timeout ran out.
func TestUntrustedNodeCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dir := t.TempDir()
	pki, err := tlsutil.WriteDevPKI(filepath.Join(dir, "tls"), tlsutil.DevOptions{Nodes: []string{"n1"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlsutil.WriteDevPKI(filepath.Join(dir, "other"), tlsutil.DevOptions{Nodes: []string{"n1"}})
	if err != nil {
		t.Fatal(err)
	}
	n1 := pki.Nodes["n1"]
	cl := proccluster.StartTest(t, proccluster.Options{
		Nodes: 1, Dir: t.TempDir(), Secure: true,
		NodeArgs: func(string) []string {
			return []string{"--tls-cert", n1.Server.Cert, "--tls-key", n1.Server.Key, "--tls-ca", pki.CA,
				"--peer-tls-cert", n1.Peer.Cert, "--peer-tls-key", n1.Peer.Key, "--peer-tls-ca", pki.CA}
		},
		ClientOptions: []client.Option{client.WithTLS(adminTLS(t, pki))},
	})
	ep := cl.URL(cl.Nodes[0])
	for name, ca := range map[string]string{"another CA": other.CA, "a certificate that is no CA": other.Admin.Cert} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := runCtl(t, nil, "--endpoints", ep, "--cacert", ca, "--timeout", "1h", "key", "k")
			if code != exitErr {
				t.Fatalf("exit %d, want 1: %s", code, stderr)
			}
			_, reason, _ := strings.Cut(stderr, ep+": ")
			if !strings.HasPrefix(reason, "TLS: certificate signed by unknown authority") || strings.Count(reason, `"`)%2 != 0 {
				t.Errorf("the reason is not the whole certificate error: %s", stderr)
			}
			if strings.Contains(stderr, "within") || strings.Contains(stderr, "1h") {
				t.Errorf("the error claims a deadline ran out: %s", stderr)
			}
		})
	}
	code, _, stderr := runCtl(t, nil, "--endpoints", ep, "--cacert", pki.CA, "--cert", pki.Admin.Cert, "--key", pki.Admin.Key, "key", "k")
	if code != exitErr || !strings.Contains(stderr, "unknown") {
		t.Fatalf("with the right CA (positive control): exit %d, want 1 for an unknown key: %s", code, stderr)
	}
}

func adminTLS(t *testing.T, pki *tlsutil.DevPKI) *tls.Config {
	t.Helper()
	cfg, err := tlsutil.ClientConfig(tlsutil.Files{Cert: pki.Admin.Cert, Key: pki.Admin.Key, CA: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
