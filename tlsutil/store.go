// Package tlsutil holds fenced's TLS material: certificates and CA bundles
// read from files and swapped atomically when they are reloaded (on SIGHUP),
// the TLS configurations of the HTTP API and of the Raft transport built on
// them, and a development PKI for `fencectl tls init` and the tests.
//
// Every configuration reads the current material at each handshake, so a
// reload takes effect for the next connection without a restart; connections
// already open keep the certificates they were made with.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// MinVersion is the lowest TLS version fenced speaks, on every port.
const MinVersion = tls.VersionTLS12

// Files names the PEM files of one TLS identity: a certificate (chain), its
// private key, and the CA bundle that verifies the other side. Cert and Key go
// together; either pair or CA may be empty.
type Files struct {
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
	CA   string `json:"ca,omitempty"`
}

// Empty reports whether no file is named.
func (f Files) Empty() bool { return f.Cert == "" && f.Key == "" && f.CA == "" }

// Store holds the material of Files and hands out the current version of it.
// It is safe for concurrent use; Reload swaps everything at once, so a
// handshake never sees a new certificate with an old CA or the other way round.
type Store struct {
	files Files
	cur   atomic.Pointer[material]
}

type material struct {
	cert   *tls.Certificate // nil when Files has no certificate
	leaf   *x509.Certificate
	pool   *x509.CertPool // nil when Files has no CA
	loaded time.Time
}

// Load reads files. A certificate without its key (or the reverse), an
// unreadable file, a key that does not match its certificate and a CA file
// without any certificate are errors.
func Load(files Files) (*Store, error) {
	s := &Store{files: files}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again and, if everything in them is valid, replaces
// the material in use. On error the material in use is kept.
func (s *Store) Reload() error {
	m, err := load(s.files)
	if err != nil {
		return err
	}
	s.cur.Store(m)
	return nil
}

// Files returns the files the store reads.
func (s *Store) Files() Files { return s.files }

func load(f Files) (*material, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("a certificate and its key go together: give both or neither")
	}
	m := &material{loaded: time.Now()}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("certificate %s with key %s: %w", f.Cert, f.Key, err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", f.Cert, err)
		}
		cert.Leaf = leaf
		m.cert, m.leaf = &cert, leaf
	}
	if f.CA != "" {
		data, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("CA bundle %s: no PEM certificate in it", f.CA)
		}
		m.pool = pool
	}
	return m, nil
}

// Certificate returns the current certificate, or nil.
func (s *Store) Certificate() *tls.Certificate { return s.cur.Load().cert }

// Leaf returns the current certificate's parsed leaf, or nil.
func (s *Store) Leaf() *x509.Certificate { return s.cur.Load().leaf }

// Pool returns the current CA pool, or nil.
func (s *Store) Pool() *x509.CertPool { return s.cur.Load().pool }

// getCertificate serves tls.Config.GetCertificate.
func (s *Store) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.Certificate(); c != nil {
		return c, nil
	}
	return nil, errors.New("no certificate configured")
}

// getClientCertificate serves tls.Config.GetClientCertificate. Without a
// certificate it sends none, and the server decides.
func (s *Store) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if c := s.Certificate(); c != nil {
		return c, nil
	}
	return &tls.Certificate{}, nil
}

// Verify checks a certificate chain as the other side presented it (leaf
// first) against the current CA pool, for the given use (client or server
// authentication), at the current time. It returns the verified leaf.
func (s *Store) Verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	pool := s.Pool()
	if pool == nil {
		return nil, errors.New("no CA configured to verify certificates")
	}
	if len(chain) == 0 {
		return nil, errors.New("no certificate presented")
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{usage}}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return nil, err
	}
	return chain[0], nil
}

// HasOU reports whether the certificate's subject names the organizational
// unit ou.
func HasOU(c *x509.Certificate, ou string) bool {
	for _, u := range c.Subject.OrganizationalUnit {
		if u == ou {
			return true
		}
	}
	return false
}
