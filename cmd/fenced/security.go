package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/fenced/fenced/api"
	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/metrics"
	"github.com/fenced/fenced/tlsutil"
)

// securityUsage is the part of --help about TLS, authentication and limits.
const securityUsage = `
Security (see docs/SECURITY.md; 'fencectl tls init' makes a development CA and
every certificate below, and prints these flags):

  --tls-cert/--tls-key serve the HTTP API over TLS; --tls-ca verifies client
  certificates, whose OU gives the role (admin or client) and CN the name.
  --peer-tls-cert/--peer-tls-key/--peer-tls-ca turn on mutual TLS between
  nodes: a node without a certificate from the peer CA (with OU=peer) cannot
  join the cluster or talk Raft. --auth-tokens FILE accepts bearer tokens
  ("TOKEN ROLE NAME" per line). Authentication is on as soon as client
  certificates or tokens are configured. --acl-file FILE keeps each client
  identity to its keys ("IDENTITY RIGHTS PREFIX" per line, e.g.
  "billing lock,read,verify billing/" and "* verify \"\""): anything no rule
  allows is refused. SIGHUP reloads every certificate, CA, the tokens file
  and the ACL file without a restart.
`

// securityOptions are the flags of TLS, authentication and limits.
type securityOptions struct {
	tlsCert, tlsKey, tlsCA, clientAuth string
	peerCert, peerKey, peerCA, peerOU  string
	authTokens, joinToken              string
	aclFile                            string

	maxKeysPerHolder, maxWaitersPerKey        int
	maxKeysPerIdentity, maxWaitersPerIdentity int
	maxEndedKeysPerIdentity                   int
	maxWatchesPerIdentity                     int
	rateLimit                                 float64
	rateBurst                                 int
	bodyTimeout                               time.Duration
	maxHeaderBytes                            int
}

func (s *securityOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.tlsCert, "tls-cert", "", "certificate (PEM) of the HTTP API; with --tls-key, the API is served over TLS only")
	fs.StringVar(&s.tlsKey, "tls-key", "", "private key (PEM) of --tls-cert")
	fs.StringVar(&s.tlsCA, "tls-ca", "", "CA bundle that verifies client certificates (and other nodes' HTTP certificates when forwarding)")
	fs.StringVar(&s.clientAuth, "tls-client-auth", "", "client certificates: require, verify-if-given or none (default verify-if-given with --tls-ca, none without)")
	fs.StringVar(&s.peerCert, "peer-tls-cert", "", "this node's peer certificate (PEM): mutual TLS on the Raft transport, and its identity when it forwards or joins")
	fs.StringVar(&s.peerKey, "peer-tls-key", "", "private key (PEM) of --peer-tls-cert")
	fs.StringVar(&s.peerCA, "peer-tls-ca", "", "CA bundle that verifies other nodes' peer certificates")
	fs.StringVar(&s.peerOU, "peer-cert-ou", tlsutil.DefaultPeerOU, "organizational unit a peer certificate must name, on the Raft port and the API alike (not empty, admin or client)")
	fs.StringVar(&s.authTokens, "auth-tokens", "", "file of bearer tokens, one \"TOKEN ROLE NAME\" per line (ROLE: client or admin); reloaded on SIGHUP")
	fs.StringVar(&s.aclFile, "acl-file", "", "file of key ACL rules, one \"IDENTITY RIGHTS PREFIX\" per line (RIGHTS: lock,read,verify; IDENTITY a client's name or *; PREFIX \"\" for every key): a client identity may then act only on the keys its rules name; needs authentication; reloaded on SIGHUP")
	fs.StringVar(&s.joinToken, "join-token", "", "bearer token (admin) this node joins with when authentication is on but it has no peer certificate")
	fs.IntVar(&s.maxKeysPerHolder, "max-keys-per-holder", 10000, "live grants one holder may have (0: no limit)")
	fs.IntVar(&s.maxWaitersPerKey, "max-waiters-per-key", 1000, "acquires that may wait for one key (0: no limit)")
	fs.IntVar(&s.maxKeysPerIdentity, "max-keys-per-identity", 10000, "live grants the holders of one client identity may have together, whatever holder names it uses (0: no limit; admins are not counted)")
	fs.IntVar(&s.maxWaitersPerIdentity, "max-waiters-per-identity", 1000, "acquires one client identity may have waiting, over all keys (0: no limit; admins are not counted)")
	fs.IntVar(&s.maxEndedKeysPerIdentity, "max-ended-keys-per-identity", 100000, "ended keys (kept with their values until --key-retention reclaims them) one identity may have before its acquires of new key names are refused; the identity is the client identity with authentication, else the holder's name up to its first \"/\" (0: no limit)")
	fs.IntVar(&s.maxWatchesPerIdentity, "max-watches-per-identity", 100, "watch streams and blocking reads one client identity (or IP address, when anonymous) may have open on this node at once (0: no limit)")
	fs.Float64Var(&s.rateLimit, "rate-limit", 0, "requests per second one client (identity, or IP address when anonymous) may send to a node (0: no limit)")
	fs.IntVar(&s.rateBurst, "rate-burst", 0, "requests a client may send at once above --rate-limit (default: one second's worth)")
	fs.DurationVar(&s.bodyTimeout, "http-read-body-timeout", 30*time.Second, "time allowed to send a request body once its headers are in (0: no limit)")
	fs.IntVar(&s.maxHeaderBytes, "http-max-header-bytes", 16<<10, "largest request header block accepted")
}

// check validates the combination of flags.
func (s *securityOptions) check() error {
	if (s.tlsCert == "") != (s.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if s.clientAuth == "" {
		s.clientAuth = "none"
		if s.tlsCA != "" {
			s.clientAuth = "verify-if-given"
		}
	}
	switch s.clientAuth {
	case "require", "verify-if-given", "none":
	default:
		return fmt.Errorf("--tls-client-auth must be require, verify-if-given or none, not %q", s.clientAuth)
	}
	if s.tlsCert == "" && (s.tlsCA != "" || s.clientAuth != "none") {
		return errors.New("--tls-ca and --tls-client-auth need TLS on the HTTP API: give --tls-cert and --tls-key")
	}
	if s.clientAuth != "none" && s.tlsCA == "" {
		return fmt.Errorf("--tls-client-auth %s needs --tls-ca to verify client certificates", s.clientAuth)
	}
	peer := []string{s.peerCert, s.peerKey, s.peerCA}
	if n := countSet(peer); n != 0 && n != 3 {
		return errors.New("mutual TLS between nodes needs all of --peer-tls-cert, --peer-tls-key and --peer-tls-ca")
	}
	if err := checkPeerOU(s.peerOU); err != nil {
		return err
	}
	if s.aclFile != "" && s.authTokens == "" && (s.tlsCA == "" || s.clientAuth == "none") {
		return errors.New("--acl-file needs authentication to know who asks: give --auth-tokens or --tls-ca (client certificates)")
	}
	switch {
	case s.maxKeysPerHolder < 0, s.maxWaitersPerKey < 0, s.maxKeysPerIdentity < 0, s.maxWaitersPerIdentity < 0, s.maxEndedKeysPerIdentity < 0, s.maxWatchesPerIdentity < 0, s.rateLimit < 0, s.rateBurst < 0, s.bodyTimeout < 0:
		return errors.New("limits cannot be negative")
	case s.maxHeaderBytes < 1<<10:
		return errors.New("--http-max-header-bytes must be at least 1024")
	}
	return nil
}

// checkPeerOU refuses a peer OU that would let client certificates pass as
// a node's: none (which once meant any OU on the Raft port), or a client
// role's.
func checkPeerOU(ou string) error {
	switch ou {
	case "":
		return fmt.Errorf("--peer-cert-ou cannot be empty: a peer certificate must name an OU (default %q) that client certificates do not", tlsutil.DefaultPeerOU)
	case tlsutil.OUAdmin, tlsutil.OUClient:
		return fmt.Errorf("--peer-cert-ou %s is a client role: %s certificates would pass as nodes on the Raft port", ou, ou)
	}
	return nil
}

func countSet(ss []string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

func (s *securityOptions) httpTLS() bool { return s.tlsCert != "" }
func (s *securityOptions) peerTLS() bool { return s.peerCert != "" }

// security is the loaded material of the security flags.
type security struct {
	o      *securityOptions
	http   *tlsutil.Store // HTTP API certificate and client CA; nil without TLS
	peer   *tlsutil.Store // peer certificate and CA; nil without peer TLS
	tokens *api.Tokens
	acl    *api.ACL

	// mu guards cred, the state of the material in use that /v1/cluster
	// reports.
	mu   sync.Mutex
	cred cluster.CredentialStatus
}

// loadSecurity reads every certificate, key, CA and the tokens file named
// by the flags.
func loadSecurity(o *securityOptions) (*security, error) {
	s := &security{o: o}
	var err error
	if o.httpTLS() {
		if s.http, err = tlsutil.Load(tlsutil.Files{Cert: o.tlsCert, Key: o.tlsKey, CA: o.tlsCA}); err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err)
		}
	}
	if o.peerTLS() {
		if s.peer, err = tlsutil.Load(tlsutil.Files{Cert: o.peerCert, Key: o.peerKey, CA: o.peerCA}); err != nil {
			return nil, fmt.Errorf("--peer-tls-cert/--peer-tls-key/--peer-tls-ca: %w", err)
		}
		if leaf := s.peer.Leaf(); !tlsutil.HasOU(leaf, o.peerOU) {
			return nil, fmt.Errorf("--peer-tls-cert %s does not name OU=%s: other nodes would refuse it (see --peer-cert-ou)", o.peerCert, o.peerOU)
		}
	}
	if o.authTokens != "" {
		if s.tokens, err = api.LoadTokens(o.authTokens); err != nil {
			return nil, fmt.Errorf("--auth-tokens: %w", err)
		}
	}
	if o.aclFile != "" {
		if s.acl, err = api.LoadACL(o.aclFile); err != nil {
			return nil, fmt.Errorf("--acl-file: %w", err)
		}
	}
	now := time.Now()
	s.cred.LoadedAt = now
	for _, m := range s.materials() {
		if m.on {
			metrics.CredentialsReload.WithLabelValues(m.name).Set(1)
			metrics.CredentialsLoaded.WithLabelValues(m.name).Set(float64(now.Unix()))
		}
	}
	s.noteDigests()
	return s, nil
}

// noteDigests records the digests of the tokens and ACL files in use in
// the credentials /v1/cluster reports. The caller holds s.mu, or s is not
// shared yet.
func (s *security) noteDigests() {
	if s.tokens != nil {
		s.cred.TokensDigest = s.tokens.Digest()
	}
	if s.acl != nil {
		s.cred.ACLDigest = s.acl.Digest()
	}
}

// material is one reloadable set of credentials.
type material struct {
	name, what string // metric label, and words for the log
	reload     func() error
	on         bool
}

func (s *security) materials() []material {
	return []material{
		{"http_tls", "HTTP API certificate and client CA", func() error { return s.http.Reload() }, s.http != nil},
		{"peer_tls", "peer certificate and CA", func() error { return s.peer.Reload() }, s.peer != nil},
		{"tokens", "auth tokens", func() error { return s.tokens.Reload() }, s.tokens != nil},
		{"acl", "key ACL", func() error { return s.acl.Reload() }, s.acl != nil},
	}
}

// credentials reports the state of the material in use for /v1/cluster.
func (s *security) credentials() *cluster.CredentialStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cred
	return &c
}

// namesID reports whether a certificate names a node id the way
// forwarding nodes check it: as its common name or a DNS name.
func namesID(c *x509.Certificate, id string) bool {
	return c != nil && (c.Subject.CommonName == id || slices.Contains(c.DNSNames, id))
}

// warnTokensMode warns when the tokens file can be read by users other than
// its owner: anyone on the host could then act as any identity in it.
func (s *security) warnTokensMode(log hclog.Logger) {
	if s.tokens == nil {
		return
	}
	fi, err := os.Stat(s.tokens.Path())
	if err != nil || fi.Mode().Perm()&0o044 == 0 {
		return
	}
	log.Warn("the tokens file is readable by other users: anyone on this host can use its tokens; make it readable by its owner only (chmod 600)",
		"path", s.tokens.Path(), "mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
}

// warn logs the weak spots of the configuration, once at start.
func (s *security) warn(log hclog.Logger, dev bool, id string) {
	s.warnTokensMode(log)
	if s.http != nil && !namesID(s.http.Leaf(), id) {
		log.Warn("the HTTP API certificate does not name this node's id (as CN or DNS name): other nodes will not forward requests to it while it leads",
			"id", id, "cn", s.http.Leaf().Subject.CommonName, "dns", s.http.Leaf().DNSNames)
	}
	switch {
	case s.peer != nil && !tlsutil.CertNames(s.peer.Leaf(), id):
		log.Warn("the peer certificate does not name this node's id (as CN or subject alternative name): the other nodes refuse its Raft connections, both the ones they dial and the ones it dials, so it takes no part in the cluster",
			"id", id, "cn", s.peer.Leaf().Subject.CommonName, "dns", s.peer.Leaf().DNSNames)
	case s.peer != nil && s.peer.Leaf().Subject.CommonName != id:
		log.Warn("the peer certificate's common name is not this node's id: with authentication on, the cluster lets a node join only as the name in its certificate",
			"id", id, "cn", s.peer.Leaf().Subject.CommonName)
	}
	if s.peer != nil && s.o.tlsCA != "" && sharesCA(s.o.peerCA, s.o.tlsCA) {
		log.Warn("the peer CA also signs client certificates: a client certificate that names the peer OU would pass as a node on the Raft port; issue peer certificates from a CA of their own, or never put the peer OU in a client certificate",
			"peer-ca", s.o.peerCA, "client-ca", s.o.tlsCA, "peer-ou", s.o.peerOU)
	}
	if dev {
		return
	}
	if !s.o.peerTLS() {
		log.Warn("Raft traffic is not encrypted or authenticated: anyone who can reach the Raft address can join or disturb the cluster; give --peer-tls-cert, --peer-tls-key and --peer-tls-ca")
	}
	if !s.o.httpTLS() && s.tokens != nil {
		log.Warn("bearer tokens travel in plain text: serve the API with --tls-cert and --tls-key")
	}
	if !s.apiOptions().AuthEnabled() {
		log.Warn("authentication is off: any client can acquire, release or force-release any key and change the membership")
	} else if s.acl == nil {
		log.Warn("no key ACL: every client identity may lock, read and verify every key (its holders are its own, its keys are not); give --acl-file to keep teams to their keys")
	}
}

// raftTLS returns the Raft transport's server and client configurations;
// both nil without peer TLS.
func (s *security) raftTLS() (server, client *tls.Config) {
	if s.peer == nil {
		return nil, nil
	}
	return tlsutil.PeerServerConfig(s.peer, s.o.peerOU), tlsutil.PeerClientConfig(s.peer, s.o.peerOU)
}

// serverTLS returns the HTTP API's TLS configuration, or nil. Client
// certificates are asked for, not verified, at the handshake: the API
// verifies them per request, so a wrong one is a clear 401.
func (s *security) serverTLS() *tls.Config {
	if s.http == nil {
		return nil
	}
	auth := tls.NoClientCert
	switch {
	case s.o.clientAuth == "require":
		auth = tls.RequireAnyClientCert
	case s.o.clientAuth == "verify-if-given" || s.peer != nil:
		// Other nodes present their peer certificate when they forward.
		auth = tls.RequestClientCert
	}
	return tlsutil.ServerConfig(s.http, auth)
}

// nodeClient returns the HTTP client this node uses to reach other nodes
// (forwarding, joining, leaving): TLS with its peer certificate when the API
// speaks TLS; timeout bounds every request.
func (s *security) nodeClient(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     60 * time.Second,
	}
	if s.http != nil {
		var roots *tlsutil.Store
		if s.o.tlsCA != "" {
			roots = s.http
		}
		tr.DialTLSContext = tlsutil.Dialer(roots, s.peer)
	}
	return &http.Client{Timeout: timeout, Transport: tr}
}

// apiClient returns a client of other nodes' APIs at targets.
func (s *security) apiClient(targets []string) *client.Client {
	var eps []string
	for _, t := range targets {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if !strings.Contains(t, "://") && s.http != nil {
			t = "https://" + t
		}
		eps = append(eps, t)
	}
	opts := []client.Option{client.WithHTTPClient(s.nodeClient(client.MaxWait))}
	if s.o.joinToken != "" {
		opts = append(opts, client.WithBearerToken(s.o.joinToken))
		if s.http == nil {
			// A node whose own API is plain http takes bearer tokens in
			// the clear already (its start-up warns so); its join token
			// goes to the other nodes the same way.
			opts = append(opts, client.WithInsecureCredentials())
		}
	}
	return client.New(eps, opts...)
}

// apiOptions returns the API server's security and limits.
func (s *security) apiOptions() api.ServerOptions {
	o := api.ServerOptions{
		TLS:         s.http != nil,
		Peer:        s.peer,
		PeerOU:      s.o.peerOU,
		RateLimit:   s.o.rateLimit,
		RateBurst:   s.o.rateBurst,
		BodyTimeout: s.o.bodyTimeout,

		MaxStreamsPerIdentity: s.o.maxWatchesPerIdentity,
	}
	if s.http != nil || s.peer != nil || s.tokens != nil || s.acl != nil {
		o.Credentials = s.credentials
	}
	if s.http != nil && s.o.clientAuth != "none" {
		o.ClientCA = s.http
	}
	if s.tokens != nil {
		o.Tokens = s.tokens
	}
	if s.acl != nil {
		o.ACL = s.acl
	}
	if s.http != nil {
		o.Forward = s.nodeClient(client.MaxWait + 30*time.Second)
		o.ForwardIdentity = s.peer != nil
	}
	return o
}

// limits returns the cluster's limits.
func (s *security) limits() cluster.Limits {
	return cluster.Limits{MaxKeysPerHolder: s.o.maxKeysPerHolder, MaxWaitersPerKey: s.o.maxWaitersPerKey,
		MaxKeysPerIdentity: s.o.maxKeysPerIdentity, MaxWaitersPerIdentity: s.o.maxWaitersPerIdentity,
		MaxEndedKeysPerIdentity: s.o.maxEndedKeysPerIdentity}
}

// reloadOnSIGHUP reloads certificates, CAs and tokens on every SIGHUP until
// stop is closed. A file that fails to load leaves the material in use as it
// was, and says why.
func (s *security) reloadOnSIGHUP(log hclog.Logger, stop <-chan struct{}) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	defer signal.Stop(ch)
	for {
		select {
		case <-stop:
			return
		case <-ch:
			s.reload(log)
		}
	}
}

// reload reloads every material. One that fails to load is kept as it
// was; the failure is logged, counted in the credentials_reload_success
// metric and reported in /v1/cluster until a reload succeeds, because a
// removed token keeps working on this node meanwhile.
func (s *security) reload(log hclog.Logger) {
	now := time.Now()
	var failed []string
	for _, m := range s.materials() {
		if !m.on {
			continue
		}
		if err := m.reload(); err != nil {
			log.Error("reload failed; keeping the material in use", "what", m.what, "error", err)
			metrics.CredentialsReload.WithLabelValues(m.name).Set(0)
			failed = append(failed, fmt.Sprintf("%s: %v", m.what, err))
			continue
		}
		log.Info("reloaded", "what", m.what)
		metrics.CredentialsReload.WithLabelValues(m.name).Set(1)
		metrics.CredentialsLoaded.WithLabelValues(m.name).Set(float64(now.Unix()))
	}
	s.warnTokensMode(log)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cred.ReloadedAt = now
	s.cred.ReloadError = strings.Join(failed, "; ")
	if len(failed) == 0 {
		s.cred.LoadedAt = now
	}
	s.noteDigests()
}

// serveHTTP serves the API on ln, over TLS when configured. HTTP/2 is off:
// the limits fenced documents (header size, timeouts) are HTTP/1.1's.
func serveHTTP(srv *http.Server, ln net.Listener, s *security) error {
	cfg := s.serverTLS()
	if cfg == nil {
		return srv.Serve(ln)
	}
	srv.TLSConfig = cfg
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	return srv.ServeTLS(ln, "", "")
}

// sharesCA reports whether the CA bundles in files a and b hold a common
// certificate (or are the same file). A bundle that cannot be read counts as
// shared: the warning is the safe side.
func sharesCA(a, b string) bool {
	if a == b {
		return true
	}
	ca, errA := caCerts(a)
	cb, errB := caCerts(b)
	if errA != nil || errB != nil {
		return true
	}
	for der := range ca {
		if cb[der] {
			return true
		}
	}
	return false
}

// caCerts returns the DER encodings of the certificates in a PEM bundle.
func caCerts(path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for {
		var block *pem.Block
		if block, data = pem.Decode(data); block == nil {
			return out, nil
		}
		if block.Type == "CERTIFICATE" {
			out[string(block.Bytes)] = true
		}
	}
}
