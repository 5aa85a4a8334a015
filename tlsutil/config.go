package tlsutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

// DefaultPeerOU is the organizational unit a certificate must name to be
// taken as a fenced node's on the Raft transport and as a forwarding peer on
// the HTTP API.
const DefaultPeerOU = "peer"

// CipherSuites are the TLS 1.2 suites fenced offers and accepts, on every
// port: ECDHE key exchange with an AEAD only. Go's defaults still include
// CBC suites with HMAC-SHA1 (ECDHE-ECDSA-AES128-SHA and others), which are
// open to padding-oracle and Lucky13-style timing attacks. TLS 1.3 suites
// are all AEAD and not configurable.
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// peerOU is the OU a peer certificate must name: ou, or DefaultPeerOU when
// ou is empty. An empty OU never means "any": client and admin certificates
// may come from the peer CA too, and must not pass as a node's.
func peerOU(ou string) string {
	if ou == "" {
		return DefaultPeerOU
	}
	return ou
}

// ServerConfig returns the configuration of a TLS server presenting the
// store's current certificate. clientAuth says whether a client certificate
// is asked for; with tls.RequestClientCert or tls.RequireAnyClientCert the
// certificate is checked by the caller (the HTTP API verifies it per request
// against the current CA, so that a wrong or expired certificate gets a clear
// 401 instead of a bare handshake failure).
func ServerConfig(s *Store, clientAuth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion:     MinVersion,
		CipherSuites:   CipherSuites,
		GetCertificate: s.getCertificate,
		ClientAuth:     clientAuth,
		// HTTP/1.1 only: its limits (header size, timeouts) are the ones
		// fenced configures and documents.
		NextProtos: []string{"http/1.1"},
	}
}

// PeerServerConfig returns the configuration of the Raft transport's
// listener: mutual TLS where the dialing node must present a certificate
// that chains to the store's current CA, is valid for client authentication
// and names the organizational unit ou (DefaultPeerOU when empty).
func PeerServerConfig(s *Store, ou string) *tls.Config {
	return &tls.Config{
		MinVersion:     MinVersion,
		CipherSuites:   CipherSuites,
		GetCertificate: s.getCertificate,
		ClientAuth:     tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := VerifyPeer(s, cs.PeerCertificates, x509.ExtKeyUsageClientAuth, ou)
			return err
		},
	}
}

// PeerClientConfig returns the configuration the Raft transport dials other
// nodes with: it presents the store's current certificate and accepts a node
// whose certificate chains to the current CA, is valid for server
// authentication and names the organizational unit ou (DefaultPeerOU when
// empty).
//
// The dialed address is not matched against the certificate's names: Raft
// addresses may be IPs, names or NAT addresses that a certificate cannot all
// list. What the Raft transport checks instead is the server id it dials,
// which the certificate must name (CertNames; fenced's cluster package adds
// that check to this configuration per dial). InsecureSkipVerify only turns
// off the standard verification, which cannot read a CA pool that is swapped
// on reload; VerifyConnection does the chain verification instead, on every
// handshake, and an error there aborts it.
func PeerClientConfig(s *Store, ou string) *tls.Config {
	return &tls.Config{
		MinVersion:           MinVersion,
		CipherSuites:         CipherSuites,
		GetClientCertificate: s.getClientCertificate,
		InsecureSkipVerify:   true, // verified in VerifyConnection, see above
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := VerifyPeer(s, cs.PeerCertificates, x509.ExtKeyUsageServerAuth, ou)
			return err
		},
	}
}

// VerifyPeer verifies a certificate chain presented by another node: it must
// chain to the store's current CA, be valid for usage now, and name the
// organizational unit ou (DefaultPeerOU when empty, as the HTTP API takes
// it). It returns the leaf.
func VerifyPeer(s *Store, chain []*x509.Certificate, usage x509.ExtKeyUsage, ou string) (*x509.Certificate, error) {
	leaf, err := s.Verify(chain, usage)
	if err != nil {
		return nil, fmt.Errorf("peer certificate: %w", err)
	}
	if ou = peerOU(ou); !HasOU(leaf, ou) {
		return nil, fmt.Errorf("peer certificate %q does not name OU=%s", leaf.Subject.CommonName, ou)
	}
	return leaf, nil
}

// CertNames reports whether a certificate names id: as its common name, a
// DNS name or, for an id that is an IP address, an IP address. It is how a
// node's certificate proves the node's server id: to a follower forwarding to
// the leader, and on the Raft transport in both directions.
func CertNames(c *x509.Certificate, id string) bool {
	if c.Subject.CommonName == id || slices.Contains(c.DNSNames, id) {
		return true
	}
	ip := net.ParseIP(id)
	return ip != nil && slices.ContainsFunc(c.IPAddresses, ip.Equal)
}

// Dialer returns a DialTLSContext function for an http.Transport: servers are
// verified the standard way (chain and host name) against the current pool
// of roots (the system roots when roots is nil or has no CA), and the current
// certificate of cert, if any, is presented as the client certificate. Each
// connection gets a configuration built from the material current when it is
// dialed, so a reload applies to new connections.
func Dialer(roots, cert *Store) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		cfg := &tls.Config{MinVersion: MinVersion, CipherSuites: CipherSuites, ServerName: host, NextProtos: []string{"http/1.1"}}
		if roots != nil {
			cfg.RootCAs = roots.Pool()
		}
		if cert != nil {
			cfg.GetClientCertificate = cert.getClientCertificate
		}
		td := &tls.Dialer{NetDialer: d, Config: cfg}
		conn, err := td.DialContext(ctx, network, addr)
		if err != nil {
			var op *net.OpError
			if errors.As(err, &op) {
				return nil, err
			}
			// A failed handshake sent no request: report it as a failed
			// dial, which callers know to be safe to retry elsewhere.
			var rec tls.RecordHeaderError
			if errors.As(err, &rec) {
				err = fmt.Errorf("%s does not speak TLS: %w", addr, err)
			}
			return nil, &net.OpError{Op: "dial", Net: network, Addr: tcpAddr(addr), Err: err}
		}
		return conn, nil
	}
}

// tcpAddr is an address for an error message.
type tcpAddr string

func (a tcpAddr) Network() string { return "tcp" }
func (a tcpAddr) String() string  { return string(a) }

// ClientConfig returns a static client configuration: servers verified
// against f.CA (the system roots when empty), f.Cert and f.Key presented as
// the client certificate when given. Clients that live for one command (like
// fencectl) need no reload.
func ClientConfig(f Files) (*tls.Config, error) {
	m, err := load(f)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: MinVersion, CipherSuites: CipherSuites, RootCAs: m.pool}
	if m.cert != nil {
		cfg.Certificates = []tls.Certificate{*m.cert}
	}
	return cfg, nil
}
