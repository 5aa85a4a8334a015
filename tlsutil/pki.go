package tlsutil

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Organizational units that give a certificate its role on the HTTP API.
const (
	OUAdmin  = "admin"
	OUClient = "client"
)

// CA is a certificate authority that issues certificates: a development CA
// made by `fencectl tls init`, or one the tests make.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed CA valid from now for validity.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"fenced"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// Leaf describes a certificate to issue.
type Leaf struct {
	CommonName string
	// OU is the subject's organizational units: the role of a client
	// certificate (admin, client), or the peer marker of a node's.
	OU       []string
	DNSNames []string
	IPs      []net.IP
	// Server and Client say which extended key usages it gets.
	Server, Client bool
	// NotBefore and NotAfter bound its validity; NotBefore defaults to a
	// minute ago and NotAfter to NotBefore plus a year.
	NotBefore, NotAfter time.Time
}

// Issue makes a key pair and a certificate for it signed by the CA, both PEM.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-time.Minute)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = l.NotBefore.Add(365 * 24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: l.CommonName, OrganizationalUnit: l.OU, Organization: []string{"fenced"}},
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
	}
	if l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// IssueFiles issues a certificate and writes it and its key to dir/name.pem
// and dir/name-key.pem (the key readable by its owner only).
func (ca *CA) IssueFiles(dir, name string, l Leaf) (Files, error) {
	certPEM, keyPEM, err := ca.Issue(l)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
	if err := writeFile(f.Cert, certPEM, 0o644); err != nil {
		return Files{}, err
	}
	if err := writeFile(f.Key, keyPEM, 0o600); err != nil {
		return Files{}, err
	}
	return f, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// writeFile writes data to a new file; it never replaces an existing one, so
// that a second `tls init` cannot silently swap a cluster's CA.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists; remove the directory or choose another --dir", path)
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// DevOptions describe a development PKI.
type DevOptions struct {
	// Nodes are the node ids; each gets an HTTP server certificate and a
	// peer certificate.
	Nodes []string
	// Hosts are extra DNS names or IPs put in every node certificate, next
	// to the node's id, localhost and 127.0.0.1.
	Hosts []string
	// AdminName and ClientName are the common names, that is the identity
	// names, of the admin and client certificates ("admin", "client" when
	// empty).
	AdminName, ClientName string
	// Validity of every certificate; a year when zero (the CA gets ten).
	Validity time.Duration
}

// NodeFiles are one node's certificates.
type NodeFiles struct {
	// Server is the HTTP API's certificate (server authentication).
	Server Files `json:"server"`
	// Peer is the node's certificate on the Raft transport and when it
	// forwards requests or joins (OU=peer; server and client
	// authentication).
	Peer Files `json:"peer"`
}

// DevPKI is what WriteDevPKI wrote.
type DevPKI struct {
	Dir    string               `json:"dir"`
	CA     string               `json:"ca"` // the CA certificate, every Files' CA
	CAKey  string               `json:"ca_key"`
	Nodes  map[string]NodeFiles `json:"nodes"`
	Admin  Files                `json:"admin"`  // OU=admin client certificate
	Client Files                `json:"client"` // OU=client client certificate
}

// WriteDevPKI makes a development CA and the certificates of a cluster in
// dir: ca.pem and ca-key.pem; for each node, NODE/server.pem and
// NODE/peer.pem with their keys; admin.pem and client.pem with theirs. It
// refuses to overwrite any file.
func WriteDevPKI(dir string, o DevOptions) (*DevPKI, error) {
	if len(o.Nodes) == 0 {
		return nil, errors.New("no nodes given")
	}
	if o.AdminName == "" {
		o.AdminName = "admin"
	}
	if o.ClientName == "" {
		o.ClientName = "client"
	}
	if o.Validity == 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	seen := map[string]bool{}
	for _, n := range o.Nodes {
		if n == "" || filepath.Base(n) != n || n == "." || n == ".." {
			return nil, fmt.Errorf("node id %q cannot name a directory", n)
		}
		if seen[n] {
			return nil, fmt.Errorf("node id %q given twice", n)
		}
		seen[n] = true
	}
	if err := checkSharedNames(o.Nodes, o.Hosts); err != nil {
		return nil, err
	}
	ca, err := NewCA("fenced development CA", 10*o.Validity)
	if err != nil {
		return nil, err
	}
	p := &DevPKI{Dir: dir, CA: filepath.Join(dir, "ca.pem"), CAKey: filepath.Join(dir, "ca-key.pem"), Nodes: map[string]NodeFiles{}}
	if err := writeFile(p.CA, ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := writeFile(p.CAKey, ca.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	notBefore := time.Now().Add(-time.Minute)
	notAfter := notBefore.Add(o.Validity)
	for _, n := range o.Nodes {
		dns, ips := sans(append([]string{n}, sharedNames(o.Hosts)...))
		ndir := filepath.Join(dir, n)
		server, err := ca.IssueFiles(ndir, "server", Leaf{CommonName: n, DNSNames: dns, IPs: ips, Server: true, NotBefore: notBefore, NotAfter: notAfter})
		if err != nil {
			return nil, err
		}
		peer, err := ca.IssueFiles(ndir, "peer", Leaf{CommonName: n, OU: []string{DefaultPeerOU}, DNSNames: dns, IPs: ips,
			Server: true, Client: true, NotBefore: notBefore, NotAfter: notAfter})
		if err != nil {
			return nil, err
		}
		server.CA, peer.CA = p.CA, p.CA
		p.Nodes[n] = NodeFiles{Server: server, Peer: peer}
	}
	if p.Admin, err = ca.IssueFiles(dir, "admin", Leaf{CommonName: o.AdminName, OU: []string{OUAdmin}, Client: true, NotBefore: notBefore, NotAfter: notAfter}); err != nil {
		return nil, err
	}
	if p.Client, err = ca.IssueFiles(dir, "client", Leaf{CommonName: o.ClientName, OU: []string{OUClient}, Client: true, NotBefore: notBefore, NotAfter: notAfter}); err != nil {
		return nil, err
	}
	p.Admin.CA, p.Client.CA = p.CA, p.CA
	return p, nil
}

// sharedNames are the names every node certificate carries besides its
// node's id.
func sharedNames(hosts []string) []string {
	return append([]string{"localhost", "127.0.0.1", "::1"}, hosts...)
}

// checkSharedNames refuses a node id that a name every node certificate
// carries would name (by CertNames' rule): each node's certificate would
// then prove that id, and a node could dial or answer as another on the Raft
// transport.
func checkSharedNames(nodes, hosts []string) error {
	dns, ips := sans(sharedNames(hosts))
	shared := &x509.Certificate{DNSNames: dns, IPAddresses: ips}
	for _, n := range nodes {
		if CertNames(shared, n) {
			return fmt.Errorf("node id %q is also a name every node certificate carries (localhost, 127.0.0.1, ::1 and --hosts): a node's certificate must name no other node; give each node's own names only to that node", n)
		}
	}
	return nil
}

// sans splits host names and IP addresses, dropping duplicates.
func sans(hosts []string) (dns []string, ips []net.IP) {
	seen := map[string]bool{}
	for _, h := range hosts {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	return dns, ips
}

// LoadCA reads a CA certificate and its key (PEM), for example the ones
// WriteDevPKI wrote, to issue more certificates.
func LoadCA(certFile, keyFile string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", certFile)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: the key cannot sign", keyFile)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}
