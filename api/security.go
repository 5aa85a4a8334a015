package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/tlsutil"
)

// ServerOptions configure the security and limits of a Server. The zero
// value is a development server: plain HTTP, no authentication, no limits
// beyond the fixed ones.
type ServerOptions struct {
	// TLS says the API is served over TLS, so the leader is reached with
	// https when a request is forwarded.
	TLS bool
	// ClientCA verifies client certificates; the role comes from the
	// certificate's OU (admin or client) and the name from its CN. Nil:
	// client certificates give no identity.
	ClientCA *tlsutil.Store
	// Tokens are the bearer tokens; nil: no token is accepted.
	Tokens *Tokens
	// ACL is the key ACL file: with one, a client identity may lock, read
	// or verify only the keys its rules name (admins every key); nil: every
	// identity may act on every key its role allows. It needs
	// authentication (ClientCA or Tokens) to name identities.
	ACL *ACL
	// Peer verifies the certificates of other nodes (the Raft peer CA), and
	// PeerOU is the OU they must carry. A request forwarded over a
	// connection that presents such a certificate keeps the identity the
	// forwarding node authenticated; and the node itself may join or leave
	// the cluster as its own id.
	Peer   *tlsutil.Store
	PeerOU string
	// Forward is the HTTP client that forwards requests to the leader (with
	// this node's peer certificate when there is one); nil keeps the
	// default plain client.
	Forward *http.Client
	// ForwardIdentity sends the authenticated identity with forwarded
	// requests. Only set it when Forward presents a peer certificate: the
	// leader ignores the identity otherwise, and authenticates the
	// forwarded Authorization header instead.
	ForwardIdentity bool
	// RateLimit is the sustained requests per second allowed to one client
	// identity (or IP address, when anonymous) on this node, with bursts
	// up to RateBurst; 0 is no limit.
	RateLimit float64
	RateBurst int
	// BodyTimeout bounds the time to read a request body once its headers
	// are in (a slow client holds a connection and a goroutine meanwhile).
	// It ends when the body is read, so an acquire may still wait minutes.
	BodyTimeout time.Duration
	// Log receives the audit trail of admin operations; the server's
	// logger when nil.
	Log hclog.Logger
	// MaxStreamsPerIdentity bounds the watch streams and blocking reads one
	// client identity (or IP address, when anonymous) may have open on this
	// node at once; 0 is no limit.
	MaxStreamsPerIdentity int
	// Credentials, when set, reports the state of the credentials in use
	// (tokens digest, last reload and its error) in GET /v1/cluster.
	Credentials func() *cluster.CredentialStatus
	// WatchWriteTimeout ends a watch stream whose watcher did not read
	// for that long (one write waited it); DefaultWatchWriteTimeout when
	// zero.
	WatchWriteTimeout time.Duration
	// CORSOrigins are the origins whose pages may watch and read keys
	// through a browser (as ParseCORSOrigins returns them; "*" is any
	// origin, without credentials); none when empty.
	CORSOrigins []string
}

// AuthEnabled reports whether requests must be authenticated.
func (o ServerOptions) AuthEnabled() bool { return o.ClientCA != nil || o.Tokens != nil }

// security is a Server's authentication, authorization and limits.
type security struct {
	o       ServerOptions
	log     hclog.Logger
	rate    *rateLimiter
	certs   certCache
	streams streamLimits

	// fwd holds a forwarding client per leader id, each proving it.
	fwdMu sync.Mutex
	fwd   map[string]*http.Client
}

// NewSecureServer returns the API server of node with security and limits.
func NewSecureServer(node Node, log hclog.Logger, o ServerOptions) *Server {
	s := NewServer(node, log)
	if o.Forward != nil {
		s.forward = o.Forward
	}
	if o.PeerOU == "" {
		o.PeerOU = tlsutil.DefaultPeerOU
	}
	sec := &security{o: o, log: s.log, rate: newRateLimiter(o.RateLimit, o.RateBurst)}
	if o.Log != nil {
		sec.log = o.Log
	}
	s.sec = sec
	if o.WatchWriteTimeout > 0 {
		s.watchWriteTimeout = o.WatchWriteTimeout
	}
	s.corsPolicy = newCORSPolicy(o.CORSOrigins)
	return s
}

// Unwrap lets http.ResponseController reach the connection (read deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// access is what a route requires.
type access int

const (
	accessOpen   access = iota // health, readiness, metrics: anyone
	accessStatus               // any authenticated identity, nodes included
	accessClient               // client or admin
	accessMember               // admin, or a node joining or leaving as itself
	accessAdmin                // admin only
)

// routeAccess maps the routes of the mux to what they require. A route not
// listed (a handler mounted later, like /debug/pprof/) requires admin.
var routeAccess = map[string]access{
	"POST /v1/acquire":          accessClient,
	"POST /v1/acquire/multi":    accessClient,
	"POST /v1/renew":            accessClient,
	"POST /v1/keepalive":        accessClient,
	"POST /v1/release":          accessClient,
	"POST /v1/release/multi":    accessClient,
	"POST /v1/renew/multi":      accessClient,
	"POST /v1/verify":           accessClient,
	"POST /v1/verify/batch":     accessClient,
	"POST /v1/keepalive/batch":  accessClient,
	"GET /v1/keys":              accessClient,
	"GET /v1/keys/{key...}":     accessClient,
	"GET /v1/watch":             accessClient,
	"GET /v1/watch/index":       accessClient,
	"GET /v1/cluster":           accessStatus,
	"POST /v1/cluster/join":     accessMember,
	"POST /v1/cluster/remove":   accessMember,
	"POST /v1/cluster/transfer": accessAdmin,
	"GET /v1/snapshot":          accessAdmin,
	"POST /v1/snapshot/restore": accessAdmin,
	"GET /healthz":              accessOpen,
	"GET /readyz":               accessOpen,
	"GET /metrics":              accessOpen,
	"/":                         accessOpen, // not found, method not allowed
}

// admit runs before the mux: it bounds the time to read the body,
// authenticates the request, applies the rate limit and checks that the
// identity may do what it asks, answering 401, 403 or 429 itself. It returns
// the request to serve, carrying the identity, and whether to serve it.
func (s *Server) admit(w *statusWriter, r *http.Request) (*http.Request, bool) {
	sec := s.sec
	if sec == nil {
		return r, true
	}
	sec.limitBodyTime(w, r)
	_, pattern := s.mux.Handler(r)
	need, known := routeAccess[pattern]
	if !known {
		need = accessAdmin
	}
	// A refused request is counted in the metrics under its route.
	refuse := func(err error) (*http.Request, bool) {
		if pattern == "GET /v1/watch" {
			refuseWatch(w, err) // a limit: a stream an EventSource retries
		} else {
			writeErr(w, err)
		}
		r.Pattern = pattern
		return r, false
	}
	id, trusted, err := sec.authenticate(r)
	now := time.Now()
	rateKey := "ip:" + remoteHost(r)
	if id.Name != "" {
		rateKey = "id:" + string(id.Role) + ":" + id.Name // as clientKey names it
	}
	// Requests a node forwarded over mutual TLS were counted where they came
	// in. No request header is believed on its own: without a peer
	// certificate a forward is counted again, in the bucket of the address
	// it comes from, like any client's request.
	exempt := need == accessOpen || trusted
	if !exempt {
		if ok, wait := sec.rate.allow(rateKey, now); !ok {
			return refuse(&retryError{err: refusal(ErrRateLimited, "more than %g requests per second; slow down", sec.o.RateLimit), after: wait})
		}
	}
	if need == accessOpen {
		return r, true
	}
	if err != nil {
		return refuse(err)
	}
	if sec.o.AuthEnabled() {
		if err := sec.authorize(w, r, pattern, need, id); err != nil {
			return refuse(err)
		}
		if need == accessAdmin || need == accessMember {
			sec.log.Info("admin operation", "op", pattern, "by", id.String(), "remote", r.RemoteAddr)
		}
	}
	if id.Name != "" {
		r = r.WithContext(withIdentity(r.Context(), id))
	}
	if !exempt && sec.rate != nil && batchRoutes[pattern] {
		// The batch handler counts its other items in the same bucket.
		r = r.WithContext(context.WithValue(r.Context(), rateKeyOf{}, rateKey))
	}
	return r, true
}

// authenticate finds who sent the request. trusted is true when the identity
// was named by another node over mutual TLS. With authentication off, every
// request is anonymous and may do anything.
func (sec *security) authenticate(r *http.Request) (id Identity, trusted bool, err error) {
	if !sec.o.AuthEnabled() {
		return Identity{}, false, nil
	}
	var chain []*x509.Certificate
	if r.TLS != nil {
		chain = r.TLS.PeerCertificates
	}
	// A node forwarding a request presents its peer certificate and names
	// the identity it authenticated. A forward that names none comes from a
	// node that authenticated nobody (its authentication is off, as during a
	// rollout): it carries no more authority than its anonymous client, and
	// never the node's own.
	if r.Header.Get(forwardedHeader) != "" && len(chain) > 0 && sec.o.Peer != nil {
		if peer, perr := sec.peerIdentity(chain); perr == nil {
			h := r.Header.Get(identityHeader)
			if h == "" {
				return Identity{}, false, refusal(ErrUnauthenticated, "node %s forwarded a request with no authenticated identity: its authentication is off while this node's is on (fencectl status shows each node's)", peer.Name)
			}
			fid, derr := decodeIdentity(h)
			if derr != nil {
				return Identity{}, false, refusal(ErrUnauthenticated, "node %s forwarded a bad identity: %v", peer.Name, derr)
			}
			return fid, true, nil
		}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return Identity{}, false, refusal(ErrUnauthenticated, "the Authorization header must be \"Bearer TOKEN\"")
		}
		if sec.o.Tokens == nil {
			return Identity{}, false, refusal(ErrUnauthenticated, "this cluster does not accept bearer tokens (no --auth-tokens)")
		}
		tid, ok := sec.o.Tokens.Lookup(strings.TrimSpace(tok))
		if !ok {
			return Identity{}, false, refusal(ErrUnauthenticated, "unknown bearer token")
		}
		return tid, false, nil
	}
	if len(chain) > 0 {
		cid, cerr := sec.certIdentity(chain)
		if cerr != nil {
			return Identity{}, false, refusal(ErrUnauthenticated, "client certificate: %v", cerr)
		}
		return cid, false, nil
	}
	return Identity{}, false, refusal(ErrUnauthenticated, "authentication required: present a client certificate or a bearer token")
}

// certIdentity verifies a client certificate chain against the client CA
// (role from its OU) or, failing that, the peer CA (a node). Results are
// cached per certificate and CA for a minute at most, and never past the
// certificate's expiry.
func (sec *security) certIdentity(chain []*x509.Certificate) (Identity, error) {
	var pool, peerPool *x509.CertPool
	if sec.o.ClientCA != nil {
		pool = sec.o.ClientCA.Pool()
	}
	if sec.o.Peer != nil {
		peerPool = sec.o.Peer.Pool()
	}
	key := certKey{leaf: sha256.Sum256(chain[0].Raw), pool: pool, peerPool: peerPool}
	if e, ok := sec.certs.get(key); ok {
		return e.id, e.err
	}
	id, err := sec.verifyCert(chain)
	until := time.Now().Add(time.Minute)
	if chain[0].NotAfter.Before(until) {
		until = chain[0].NotAfter
	}
	sec.certs.put(key, certEntry{id: id, err: err, until: until})
	return id, err
}

func (sec *security) verifyCert(chain []*x509.Certificate) (Identity, error) {
	cerr := errors.New("client certificates are not accepted (no --tls-ca)")
	if sec.o.ClientCA != nil {
		cerr = nil
		leaf, err := sec.o.ClientCA.Verify(chain, x509.ExtKeyUsageClientAuth)
		if err == nil {
			switch {
			case tlsutil.HasOU(leaf, tlsutil.OUAdmin):
				return Identity{Name: leaf.Subject.CommonName, Role: RoleAdmin, Method: "certificate"}, nil
			case tlsutil.HasOU(leaf, tlsutil.OUClient):
				return Identity{Name: leaf.Subject.CommonName, Role: RoleClient, Method: "certificate"}, nil
			}
		} else {
			cerr = err
		}
	}
	if sec.o.Peer != nil {
		if id, err := sec.peerIdentity(chain); err == nil {
			return id, nil
		}
	}
	if cerr == nil {
		// A valid certificate without a role: known, but allowed nothing.
		return Identity{Name: chain[0].Subject.CommonName, Method: "certificate"}, nil
	}
	return Identity{}, cerr
}

func (sec *security) peerIdentity(chain []*x509.Certificate) (Identity, error) {
	leaf, err := tlsutil.VerifyPeer(sec.o.Peer, chain, x509.ExtKeyUsageClientAuth, sec.o.PeerOU)
	if err != nil {
		return Identity{}, err
	}
	return Identity{Name: leaf.Subject.CommonName, Role: RolePeer, Method: "peer"}, nil
}

// authorize checks the identity's role against what the route needs and,
// for a client, the holder it names and whether it forces a release.
func (sec *security) authorize(w http.ResponseWriter, r *http.Request, pattern string, need access, id Identity) error {
	deny := func(format string, args ...any) error {
		return refusal(ErrForbidden, "%s may not %s", id, fmt.Sprintf(format, args...))
	}
	switch {
	case !validRole(id.Role):
		return deny("do anything: its certificate names no role (OU=%s or OU=%s)", tlsutil.OUAdmin, tlsutil.OUClient)
	case need == accessStatus:
		return nil
	case id.Role == RoleAdmin:
		return nil
	case need == accessAdmin:
		return deny("call %s: it needs the admin role", pattern)
	case need == accessMember && id.Role == RolePeer:
		target, err := memberOf(w, r, pattern)
		if err != nil {
			return err
		}
		if target != id.Name {
			return deny("change membership of %q: a node may only join or leave as itself", target)
		}
		return nil
	case need == accessMember:
		return deny("change membership: it needs the admin role")
	case id.Role != RoleClient:
		return deny("call %s: it needs the client or admin role", pattern)
	}
	var holder string
	switch pattern {
	case "POST /v1/acquire":
		var req client.AcquireRequest
		if err := peekBody(w, r, &req); err != nil {
			return err
		}
		holder = req.Holder
	case "POST /v1/acquire/multi":
		var req client.AcquireMultiRequest
		if err := peekBody(w, r, &req); err != nil {
			return err
		}
		holder = req.Holder
	case "POST /v1/renew":
		var req client.RenewRequest
		if err := peekBody(w, r, &req); err != nil {
			return err
		}
		holder = req.Holder
	case "POST /v1/keepalive":
		var req client.KeepaliveRequest
		if err := peekBody(w, r, &req); err != nil {
			return err
		}
		holder = req.Holder
	case "POST /v1/release/multi":
		var req client.ReleaseMultiRequest
		if err := peekBody(w, r, &req); err != nil {
			return err
		}
		holder = req.Holder
	case "POST /v1/renew/multi":
		var req client.RenewMultiRequest
		if err := peekBody(w, r, &req); err != nil {
			return err
		}
		holder = req.Holder
	case "POST /v1/release":
		var req client.ReleaseRequest
		if err := peekBody(w, r, &req); err != nil {
			return err
		}
		if req.Force {
			return deny("force a release: it needs the admin role")
		}
		holder = req.Holder
	default:
		return nil
	}
	if err := checkHolderPath(holder); err != nil {
		return err
	}
	if !id.MayActAs(holder) {
		return deny("act as holder %q: a client's holders are %q or start with %q", holder, id.Name, id.Name+"/")
	}
	return nil
}

// peekBody decodes the body with the handlers' own strict decoder and puts
// the bytes back for the handler, so the check and the handler read exactly
// the same request. A body that cannot be read or decoded is an error (400,
// or 408 for a slow body): a check that cannot see what it checks refuses.
func peekBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return decode(body, v)
}

// memberOf returns the member id a join or remove request changes.
func memberOf(w http.ResponseWriter, r *http.Request, pattern string) (string, error) {
	var id string
	switch pattern {
	case "POST /v1/cluster/join":
		var req client.JoinRequest
		if err := peekBody(w, r, &req); err != nil {
			return "", err
		}
		id = req.ID
	case "POST /v1/cluster/remove":
		var req client.RemoveRequest
		if err := peekBody(w, r, &req); err != nil {
			return "", err
		}
		id = req.ID
	default:
		return "", refusal(ErrForbidden, "%s is not a membership change a node may make", pattern)
	}
	if id == "" {
		return "", fmt.Errorf("%w: id is required", cluster.ErrBadRequest)
	}
	return id, nil
}

// checkHolderPath refuses a holder name that is not a clean path of
// segments: an empty segment ("a//b", "a/", "/a"), "." or "..". Holder names
// are namespaces ("bob/worker-1" belongs to bob), so each must mean one
// thing to every reader, whether it splits, joins or cleans paths.
func checkHolderPath(holder string) error {
	if holder == "" {
		return nil // required or not, checkName says
	}
	for seg := range strings.SplitSeq(holder, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w: holder %q has an empty path segment", cluster.ErrBadRequest, holder)
		case ".", "..":
			return fmt.Errorf("%w: holder %q has a %q path segment", cluster.ErrBadRequest, holder, seg)
		}
	}
	return nil
}

// limitBodyTime gives the client BodyTimeout to send the body. The deadline
// is lifted when the body has been read, so a waiting acquire is not cut off.
func (sec *security) limitBodyTime(w *statusWriter, r *http.Request) {
	if sec.o.BodyTimeout <= 0 || r.Body == nil || r.Body == http.NoBody {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(sec.o.BodyTimeout)) != nil {
		return
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, timeout: sec.o.BodyTimeout, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
}

type deadlineBody struct {
	io.ReadCloser
	timeout time.Duration
	once    sync.Once
	lift    func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var ne net.Error
	switch {
	case err == io.EOF:
		b.once.Do(b.lift)
	case errors.As(err, &ne) && ne.Timeout():
		err = refusal(ErrBodyTimeout, "the request body did not arrive within %v", b.timeout)
	}
	return n, err
}

// remoteHost is the client's IP address without its port.
func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// refusalError is a refusal of the security layer: its message says why,
// and errors.Is with its sentinel gives the wire code.
type refusalError struct {
	sentinel error
	msg      string
}

func refusal(sentinel error, format string, args ...any) error {
	return &refusalError{sentinel: sentinel, msg: fmt.Sprintf(format, args...)}
}

func (e *refusalError) Error() string { return e.msg }
func (e *refusalError) Unwrap() error { return e.sentinel }

// retryError is a refusal with a hint of when to try again.
type retryError struct {
	err   error
	after time.Duration
}

func (e *retryError) Error() string                 { return e.err.Error() }
func (e *retryError) Unwrap() error                 { return e.err }
func (e *retryError) RetryAfterHint() time.Duration { return e.after }

// setRetryAfter puts the retry hint of a refusal that has one (a limit) in
// the body and the Retry-After header.
func setRetryAfter(w http.ResponseWriter, resp *client.ErrorResponse, err error) {
	var h interface{ RetryAfterHint() time.Duration }
	if !errors.As(err, &h) {
		return
	}
	d := max(h.RetryAfterHint(), time.Millisecond).Round(time.Millisecond)
	resp.RetryAfter = d.String()
	w.Header().Set("Retry-After", fmt.Sprint(int((d+time.Second-1)/time.Second)))
}

// leaderURL is the base URL of the leader's HTTP API.
func (s *Server) leaderURL(addr string) string {
	if strings.Contains(addr, "://") {
		return strings.TrimRight(addr, "/")
	}
	if s.sec != nil && s.sec.o.TLS {
		return "https://" + addr
	}
	return "http://" + addr
}

// forwardIdentity names the authenticated identity on a forwarded request,
// when this node forwards over mutual TLS.
func (s *Server) forwardIdentity(out, in *http.Request) {
	if s.sec == nil || !s.sec.o.ForwardIdentity {
		return
	}
	if id, ok := IdentityFrom(in.Context()); ok {
		out.Header.Set(identityHeader, encodeIdentity(id))
	}
}

// forwarder returns the HTTP client that forwards a request to leader, or
// why this node may not forward. A client's own credentials are never
// forwarded; so with authentication on, a node forwards only when the leader
// can trust the identity it names: over TLS with its peer certificate. It
// refuses otherwise (not_leader, with the leader's address in the header),
// and the client goes to the leader itself. Over TLS the leader, at
// baseURL, must prove its id, whether authentication is on or not.
func (s *Server) forwarder(leader, baseURL string) (*http.Client, error) {
	sec := s.sec
	if sec == nil {
		return s.forward, nil // no security configured: nothing to prove or protect
	}
	if sec.o.AuthEnabled() && !(sec.o.TLS && sec.o.ForwardIdentity) {
		return nil, fmt.Errorf("%w: leader is %s; this node does not forward authenticated requests without TLS and a peer certificate: send the request to the leader",
			cluster.ErrNotLeader, leader)
	}
	if !sec.o.TLS {
		return s.forward, nil // plain, anonymous: nothing can be proven
	}
	if !strings.HasPrefix(baseURL, "https://") {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, &unprovenLeaderError{leader: leader, reason: "(" + baseURL + ") is not an https address"})
	}
	return sec.provenForwarder(leader, s.forward)
}

// unprovenLeaderError: the node at the leader's address did not prove, with
// its TLS certificate, that it is the leader. Nothing was sent to it.
type unprovenLeaderError struct {
	leader string
	reason string
}

func (e *unprovenLeaderError) Error() string {
	return fmt.Sprintf("the server at the address of leader %s %s", e.leader, e.reason)
}

// maxForwarders bounds the per-leader clients kept: past it they are
// dropped (a new leader id is rare; a handful is the normal number).
const maxForwarders = 64

// provenForwarder returns a client that connects only to a server whose
// verified TLS certificate names leader, as its common name or a subject
// alternative name. The check is made when a connection is dialed, before
// any request is written on it, and each leader id has its own connections,
// so a connection proven for one id never carries a request meant for
// another. The check relies on the transport's standard verification (chain
// to the trusted CA, and the address); a connection without a verified chain
// is refused.
func (sec *security) provenForwarder(leader string, base *http.Client) (*http.Client, error) {
	sec.fwdMu.Lock()
	defer sec.fwdMu.Unlock()
	if c, ok := sec.fwd[leader]; ok {
		return c, nil
	}
	rt := base.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	tr, ok := rt.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("%w: the forwarding client cannot check the leader's certificate", ErrUnavailable)
	}
	t := tr.Clone()
	dial := t.DialTLSContext
	if dial == nil {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: t.TLSClientConfig}
		dial = d.DialContext
	}
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := provesID(conn, leader); err != nil {
			_ = conn.Close()
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		return conn, nil
	}
	if sec.fwd == nil || len(sec.fwd) >= maxForwarders {
		for _, c := range sec.fwd {
			c.CloseIdleConnections()
		}
		sec.fwd = map[string]*http.Client{}
	}
	c := &http.Client{Transport: t, Timeout: base.Timeout, CheckRedirect: base.CheckRedirect}
	sec.fwd[leader] = c
	return c, nil
}

// provesID checks that conn is a TLS connection whose verified certificate
// names id.
func provesID(conn net.Conn, id string) error {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return &unprovenLeaderError{leader: id, reason: "does not speak TLS"}
	}
	cs := tc.ConnectionState()
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return &unprovenLeaderError{leader: id, reason: "presented no verified certificate"}
	}
	if !tlsutil.CertNames(cs.PeerCertificates[0], id) {
		leaf := cs.PeerCertificates[0]
		return &unprovenLeaderError{leader: id, reason: fmt.Sprintf("presented a certificate for %q (names %q) that does not name %s",
			leaf.Subject.CommonName, append(leaf.DNSNames, ipStrings(leaf.IPAddresses)...), id)}
	}
	return nil
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// certCache remembers certificate verifications.
type certCache struct {
	mu sync.Mutex
	m  map[certKey]certEntry
}

type certKey struct {
	leaf           [sha256.Size]byte
	pool, peerPool *x509.CertPool // the CA material it was verified with
}

type certEntry struct {
	id    Identity
	err   error
	until time.Time
}

const maxCachedCerts = 4096

func (c *certCache) get(k certKey) (certEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || !time.Now().Before(e.until) {
		return certEntry{}, false
	}
	return e, true
}

func (c *certCache) put(k certKey, e certEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedCerts {
		c.m = map[certKey]certEntry{}
	}
	c.m[k] = e
}
