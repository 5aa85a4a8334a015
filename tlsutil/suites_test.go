package tlsutil

import (
	"crypto/tls"
	"testing"
)

// cbcSuites are TLS 1.2 suites without an AEAD that Go still offers by
// default.
var cbcSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
	tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
	tls.TLS_RSA_WITH_AES_128_CBC_SHA,
	tls.TLS_RSA_WITH_AES_256_CBC_SHA,
}

// cbcOnly restricts cfg to TLS 1.2 with CBC suites.
func cbcOnly(cfg *tls.Config) *tls.Config {
	cfg = cfg.Clone()
	cfg.MaxVersion = tls.VersionTLS12
	cfg.CipherSuites = cbcSuites
	return cfg
}

// Every port offers only AEAD suites with TLS 1.2: a peer or client that
// offers nothing but CBC suites gets no connection, and fenced's own
// clients do not connect to a server that offers nothing but those.
func TestOnlyAEADSuites(t *testing.T) {
	p := devPKI(t)
	n1 := loadStore(t, p.Nodes["n1"].Peer)
	n2 := loadStore(t, p.Nodes["n2"].Peer)
	api := loadStore(t, p.Nodes["n1"].Server)

	peerAddr := serve(t, PeerServerConfig(n1, DefaultPeerOU))
	if err := exchange(peerAddr, PeerClientConfig(n2, DefaultPeerOU)); err != nil {
		t.Fatalf("peers with the default suites: %v", err)
	}
	if err := exchange(peerAddr, cbcOnly(PeerClientConfig(n2, DefaultPeerOU))); err == nil {
		t.Error("the Raft port accepted a TLS 1.2 peer offering only CBC suites")
	}
	apiAddr := serve(t, ServerConfig(api, tls.NoClientCert))
	client, err := ClientConfig(Files{CA: p.CA})
	if err != nil {
		t.Fatal(err)
	}
	client.ServerName = "localhost"
	if err := exchange(apiAddr, client); err != nil {
		t.Fatalf("API client with the default suites: %v", err)
	}
	if err := exchange(apiAddr, cbcOnly(client)); err == nil {
		t.Error("the API port accepted a TLS 1.2 client offering only CBC suites")
	}

	// The dialing side: a server that speaks only CBC suites.
	cbcPeer := serve(t, cbcOnly(PeerServerConfig(n1, DefaultPeerOU)))
	if err := exchange(cbcPeer, PeerClientConfig(n2, DefaultPeerOU)); err == nil {
		t.Error("the Raft transport dialed a peer that offered only CBC suites")
	}
	cbcAPI := serve(t, cbcOnly(ServerConfig(api, tls.NoClientCert)))
	if err := exchange(cbcAPI, client); err == nil {
		t.Error("an API client connected to a server that offered only CBC suites")
	}
}

// An empty OU means the default one on the Raft port, as on the API port:
// client and admin certificates of the same CA never pass as a peer.
func TestPeerEmptyOUMeansDefault(t *testing.T) {
	p := devPKI(t)
	n1 := loadStore(t, p.Nodes["n1"].Peer)
	n2 := loadStore(t, p.Nodes["n2"].Peer)
	addr := serve(t, PeerServerConfig(n1, ""))
	if err := exchange(addr, PeerClientConfig(n2, "")); err != nil {
		t.Fatalf("a peer certificate: %v", err)
	}
	for name, f := range map[string]Files{"client": p.Client, "admin": p.Admin} {
		s := loadStore(t, Files{Cert: f.Cert, Key: f.Key, CA: p.CA})
		if err := exchange(addr, PeerClientConfig(s, "")); err == nil {
			t.Errorf("the %s certificate passed as a peer with an empty OU", name)
		}
	}
}
