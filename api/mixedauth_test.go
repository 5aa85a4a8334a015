package api

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/tlsutil"
)

// TestForwardWithoutAnIdentityIsRefused: during a rollout a follower with
// authentication off forwards an anonymous request over mutual TLS with its
// node certificate and no identity. A leader with authentication on must
// not take it as the node's own request (a node may remove itself): the
// forward carries no more authority than its client proved, none here.
func TestForwardWithoutAnIdentityIsRefused(t *testing.T) {
	p := newTestPKI(t)
	peer := p.store("n2-peer", tlsutil.Leaf{CommonName: "n2", OU: []string{tlsutil.DefaultPeerOU}, Server: true, Client: true})
	leaderPeer := p.store("n1-peer", tlsutil.Leaf{CommonName: "n1", OU: []string{tlsutil.DefaultPeerOU}, Server: true, Client: true})
	httpCert := p.store("n1-server", serverLeaf("n1"))
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(testClientToken+" client bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	tn := startNode(t, cluster.Limits{}, func(n *cluster.Node, log hclog.Logger) *httptest.Server {
		// httptest's own StartTLS would answer with its certificate: the
		// node's is served by a TLS listener of its own.
		srv := httptest.NewUnstartedServer(NewSecureServer(n, log, ServerOptions{TLS: true, Peer: leaderPeer, Tokens: tokens}))
		srv.Listener = tls.NewListener(srv.Listener, tlsutil.ServerConfig(httpCert, tls.RequestClientCert))
		srv.Start()
		srv.URL = "https://" + srv.Listener.Addr().String()
		return srv
	})

	hc := tlsForward(p, peer)
	for _, path := range []string{"/v1/cluster/remove", "/v1/acquire"} {
		body := `{"id":"n2"}`
		if path == "/v1/acquire" {
			body = `{"key":"k","holder":"n2"}`
		}
		req, _ := http.NewRequest(http.MethodPost, tn.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(forwardedHeader, "1")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s forwarded by n2 with no identity: %d; want 401 (it is not n2's own request)", path, resp.StatusCode)
		}
	}
}
