package api

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fenced/fenced/acl"
	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/metrics"
)

// Node is what the server needs of a cluster node.
type Node interface {
	Acquire(ctx context.Context, a cluster.AcquireArgs) (cluster.Grant, error)
	// AcquireMulti grants a set of keys in one entry, or none (multi.go).
	AcquireMulti(ctx context.Context, a cluster.AcquireMultiArgs) ([]cluster.Grant, error)
	Renew(ctx context.Context, key, holder string, tok fence.Token) (fsm.KeyState, time.Time, error)
	// Keepalive and KeepaliveBatch renew only the leases whose key may
	// (nil: any) lets the identity renew.
	Keepalive(ctx context.Context, holder string, may func(key string) bool) ([]cluster.RenewedLease, error)
	Release(ctx context.Context, a cluster.ReleaseArgs) (fsm.KeyState, error)
	// ReleaseMulti and RenewMulti end or renew a holder's set of grants,
	// all or none (multi.go).
	ReleaseMulti(ctx context.Context, a cluster.ReleaseMultiArgs) ([]fsm.KeyState, error)
	RenewMulti(ctx context.Context, holder string, keys []fsm.ReleaseKey) ([]cluster.RenewedLease, error)
	Verify(ctx context.Context, key string, tok fence.Token, holder string) (cluster.Verdict, error)
	// VerifyBatch and KeepaliveBatch serve the batch routes (batch.go):
	// one proof of leadership for every item.
	VerifyBatch(ctx context.Context, checks []cluster.VerifyCheck) ([]cluster.Verdict, error)
	KeepaliveBatch(ctx context.Context, holders []string, may func(key string) bool) ([][]cluster.RenewedLease, error)
	Key(ctx context.Context, key string) (cluster.KeyInfo, bool, error)
	Keys(ctx context.Context, q fsm.PageQuery) ([]cluster.KeyInfo, bool, error)
	Join(ctx context.Context, id, raftAddr, httpAddr string) error
	Remove(ctx context.Context, id string) error
	TransferLeadership(id string) error
	OpenBackup(ctx context.Context, key *cluster.BackupKey) (*cluster.BackupStream, error)
	Restore(ctx context.Context, data []byte, o cluster.RestoreOptions) (cluster.RestoreResult, error)
	Status() cluster.Status
	Ready() bool
	Leader() (id, httpAddr string)
}

// forwardedHeader marks a request a follower forwarded, so it is forwarded at
// most once and never loops between nodes that disagree about the leader.
const forwardedHeader = "X-Fenced-Forwarded"

// Server serves the HTTP API of one node.
type Server struct {
	node Node
	// self is the NodeHeader value, built once: the node's id, when the
	// node tells it.
	self    []string
	log     hclog.Logger
	forward *http.Client
	mux     *http.ServeMux
	sec     *security // authentication and limits; nil: none (NewSecureServer sets it)
	backups backupAuth
	frames  frameCache // encoded watch events (watch.go)
	// backupWriteTimeout bounds the wait for one write of a backup
	// (backupWriteTimeout, the constant; tests shorten it).
	backupWriteTimeout time.Duration
	// watchWriteTimeout bounds the wait for one write of a watch stream
	// (ServerOptions.WatchWriteTimeout).
	watchWriteTimeout time.Duration
	// watching counts the watch streams being served.
	watching atomic.Int64
	// checks shares the streams' checks with the leader (watch_check.go).
	checks indexChecks
	// corsPolicy lets pages of other origins read (cors.go); nil: none.
	corsPolicy *corsPolicy
}

// NewServer returns the API server of node.
func NewServer(node Node, log hclog.Logger) *Server {
	s := &Server{
		node: node,
		log:  log.Named("api"),
		forward: &http.Client{
			Timeout: client.MaxWait + 30*time.Second,
			Transport: &http.Transport{
				DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
				MaxIdleConnsPerHost: 64,
				IdleConnTimeout:     60 * time.Second,
			},
		},
		mux:                http.NewServeMux(),
		watchWriteTimeout:  DefaultWatchWriteTimeout,
		backupWriteTimeout: backupWriteTimeout,
	}
	if n, ok := node.(interface{ ID() string }); ok {
		if id := n.ID(); id != "" {
			s.self = []string{id}
		}
	}
	s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Clients learn where the leader is and go there directly next time.
	if s.self != nil {
		// Shared, never changed: a handler that sets the header replaces it.
		w.Header()[client.NodeHeader] = s.self
	}
	setLeader(w.Header(), s.node.Leader)
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK, leader: s.node.Leader}
	if s.cors(sw, r) {
		metrics.Requests.WithLabelValues("OPTIONS (preflight)", strconv.Itoa(sw.status)).Inc()
		return
	}
	r, ok := s.admit(sw, r)
	if ok {
		s.mux.ServeHTTP(sw, r)
	}
	metrics.ObserveRequest(r.Pattern, sw.status, time.Since(start))
}

// statusWriter remembers the status code, for the request metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
	// leader returns the leader's id and HTTP address now ("" when none is
	// known).
	leader func() (id, addr string)
}

// WriteHeader names the leader as known when a refusal is written, not when
// the request came: a request that a leader change cut off is answered after
// the change, and the client's next attempt should go to the new leader.
func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	if code/100 != 2 && w.leader != nil {
		setLeader(w.Header(), w.leader)
	}
	w.ResponseWriter.WriteHeader(code)
}

// setLeader names the leader in h (LeaderHeader, LeaderIDHeader) as leader
// says it is now.
func setLeader(h http.Header, leader func() (id, addr string)) {
	id, addr := leader()
	if addr != "" {
		h.Set(client.LeaderHeader, addr)
	}
	if id != "" {
		h.Set(client.LeaderIDHeader, id)
	}
}

// Handle mounts an extra handler (for example /metrics) on the server's mux.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

func (s *Server) routes() {
	s.mux.HandleFunc("POST /v1/acquire", s.write(s.acquire))
	s.mux.HandleFunc("POST /v1/acquire/multi", s.write(s.acquireMulti))
	s.mux.HandleFunc("POST /v1/renew", s.write(s.renew))
	s.mux.HandleFunc("POST /v1/keepalive", s.write(s.keepalive))
	s.mux.HandleFunc("POST /v1/release", s.write(s.release))
	s.mux.HandleFunc("POST /v1/release/multi", s.write(s.releaseMulti))
	s.mux.HandleFunc("POST /v1/renew/multi", s.write(s.renewMulti))
	s.mux.HandleFunc("POST /v1/verify", s.verify)
	s.mux.HandleFunc("POST /v1/verify/batch", s.verifyBatch)
	s.mux.HandleFunc("POST /v1/keepalive/batch", s.keepaliveBatch)
	s.mux.HandleFunc("GET /v1/keys", s.read(s.keys))
	s.mux.HandleFunc("GET /v1/keys/{key...}", s.streams(s.keyRead))
	s.mux.HandleFunc("GET /v1/watch", s.streams(s.watch))
	s.mux.HandleFunc("GET /v1/watch/index", s.read(s.readIndexHandler))
	s.mux.HandleFunc("GET /v1/cluster", s.cluster)
	s.mux.HandleFunc("POST /v1/cluster/join", s.write(s.join))
	s.mux.HandleFunc("POST /v1/cluster/remove", s.write(s.remove))
	s.mux.HandleFunc("POST /v1/cluster/transfer", s.write(s.transfer))
	s.mux.HandleFunc("GET /v1/snapshot", s.snapshotSave)
	s.mux.HandleFunc("POST /v1/snapshot/restore", s.snapshotRestore)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /v1/debug/state", s.debugState)
	s.mux.Handle("GET /metrics", metrics.Handler())
	s.routeOpenAPI()
	s.routeACL()
	s.routeSigningKeys()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if m := s.methodOf(r.URL.Path); m != "" {
			w.Header().Set("Allow", m)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.URL.Path+" takes "+m)
			return
		}
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
}

// methodOf returns the method a known path takes, or "".
func (s *Server) methodOf(path string) string {
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		r := &http.Request{Method: m, URL: &url.URL{Path: path}}
		if _, pattern := s.mux.Handler(r); pattern != "/" && pattern != "" {
			return m
		}
	}
	return ""
}

// handlerFunc runs one operation on a decoded request body.
type handlerFunc func(ctx context.Context, body []byte, r *http.Request) (any, error)

// write wraps a handler that may change state. A request this node cannot
// serve because it does not lead is forwarded to the leader, once.
func (s *Server) write(h handlerFunc) http.HandlerFunc { return s.serve(h, true) }

// read wraps a handler that only reads; it is forwarded the same way.
func (s *Server) read(h handlerFunc) http.HandlerFunc { return s.serve(h, false) }

func (s *Server) serve(h handlerFunc, write bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if err := checkContentType(r); err != nil {
				writeUnsupportedMediaType(w, err, false)
				return
			}
		}
		body, err := readBody(w, r)
		if err != nil {
			writeErr(w, err)
			return
		}
		if !s.node.Ready() && r.Header.Get(forwardedHeader) == "" {
			s.proxy(w, r, body, write)
			return
		}
		out, err := h(r.Context(), body, r)
		if (errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrNotReady)) && r.Header.Get(forwardedHeader) == "" {
			s.proxy(w, r, body, write)
			return
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return readBodyLimit(w, r, client.MaxBodyBytes)
}

func readBodyLimit(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, fmt.Errorf("%w: body larger than %d bytes", cluster.ErrBadRequest, limit)
	}
	return b, err
}

// proxy forwards a request to the leader. A write whose connection failed
// after it was sent may have been committed: that is an unknown outcome.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, body []byte, write bool) {
	lid, addr := s.node.Leader()
	if lid == "" || addr == "" {
		writeErr(w, s.noLeader())
		return
	}
	if s.leaderSilent() {
		// Nothing was sent: the client asks another node, or this one
		// again once an election named a leader it hears from.
		writeErr(w, fmt.Errorf("%w: leader %s not heard from lately", ErrUnavailable, lid))
		return
	}
	// Only to a leader that can prove its id, and never with the client's
	// own credentials (design invariant 9).
	base := s.leaderURL(addr)
	fwd, err := s.forwarder(lid, base)
	if err != nil {
		writeErr(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go s.cancelOnLeaderChange(ctx, cancel, lid)
	req, err := http.NewRequestWithContext(ctx, r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		writeErr(w, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(forwardedHeader, "1")
	s.forwardIdentity(req, r)
	resp, err := fwd.Do(req)
	if err != nil {
		s.log.Debug("forward failed", "leader", lid, "error", err)
		var op *net.OpError
		var unproven *unprovenLeaderError
		if errors.As(err, &unproven) {
			s.log.Warn("not forwarding: the leader did not prove its id", "leader", lid, "addr", addr, "error", unproven)
			writeErr(w, fmt.Errorf("%w: %v", ErrUnavailable, unproven))
			return
		}
		if !write || (errors.As(err, &op) && op.Op == "dial") {
			writeErr(w, fmt.Errorf("%w: leader %s unreachable", ErrUnavailable, lid))
			return
		}
		writeErr(w, cluster.ErrLeadershipLost)
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", client.BackupMetaHeader, client.IndexHeader} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// cancelOnLeaderChange ends a forwarded request once this node sees another
// leader (or none), or stops hearing from the leader: a frozen or
// partitioned old leader would otherwise hold the request until a timeout,
// long after the cluster moved on, and this node notices a leader's silence
// well before raft here stands a candidate.
func (s *Server) cancelOnLeaderChange(ctx context.Context, cancel context.CancelFunc, leader string) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if id, _ := s.node.Leader(); id != leader {
				s.log.Debug("leader changed during a forwarded request; abandoning it", "old", leader, "new", id)
				cancel()
				return
			}
			if s.leaderSilent() {
				s.log.Debug("leader silent during a forwarded request; abandoning it", "leader", leader)
				cancel()
				return
			}
		}
	}
}

// silenceTeller is a node that tells when its leader has gone silent
// (cluster.Node.LeaderSilent).
type silenceTeller interface{ LeaderSilent() bool }

// leaderSilent reports whether this node has not heard from its leader
// lately; false for a node that cannot tell.
func (s *Server) leaderSilent() bool {
	n, ok := s.node.(silenceTeller)
	return ok && n.LeaderSilent()
}

// checkName validates a key, holder or request id: valid UTF-8, no control
// characters, within the length limit.
func checkName(what, s string, max int, required bool) error {
	switch {
	case s == "" && required:
		return fmt.Errorf("%w: %s is required", cluster.ErrBadRequest, what)
	case len(s) > max:
		return fmt.Errorf("%w: %s is longer than %d bytes", cluster.ErrBadRequest, what, max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", cluster.ErrBadRequest, what)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s contains a control character", cluster.ErrBadRequest, what)
	case what == "holder":
		return checkHolderPath(s)
	}
	return nil
}

func parseDuration(what, s string, def, lo, hi time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not a duration like \"10s\"", cluster.ErrBadRequest, what, s)
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("%w: %s %v is outside %v..%v", cluster.ErrBadRequest, what, d, lo, hi)
	}
	return d, nil
}

func checkToken(t fence.Token) error {
	if t == 0 {
		return fmt.Errorf("%w: token is required", fence.ErrMalformed)
	}
	return nil
}

func (s *Server) snapshotSave(w http.ResponseWriter, r *http.Request) {
	if !s.node.Ready() && r.Header.Get(forwardedHeader) == "" {
		s.proxy(w, r, nil, false)
		return
	}
	s.sendBackup(w, r)
}

func (s *Server) snapshotRestore(w http.ResponseWriter, r *http.Request) {
	body, err := readBodyLimit(w, r, client.MaxRestoreBytes)
	if err != nil {
		writeErr(w, err)
		return
	}
	o, err := restoreOptions(r.URL.Query())
	if err == nil {
		err = s.backups.check(body)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	if !s.node.Ready() && r.Header.Get(forwardedHeader) == "" {
		s.proxy(w, r, body, true)
		return
	}
	res, err := s.node.Restore(r.Context(), body, o)
	if err != nil {
		writeErr(w, err)
		return
	}
	s.log.Warn("restored from backup", "backup_cluster", res.Meta.ClusterID, "new_floor", res.NewFloor, "attested", res.Attested)
	writeJSON(w, http.StatusOK, res)
}

// restoreOptions reads above_epoch and margin: each at most once, a decimal
// epoch (0..fence.MaxEpoch), and not both, since the margin only applies
// without an attested epoch.
func restoreOptions(q url.Values) (cluster.RestoreOptions, error) {
	var o cluster.RestoreOptions
	for _, p := range []struct {
		name string
		dst  *uint64
	}{{"above_epoch", &o.AboveEpoch}, {"margin", &o.Margin}} {
		vs := q[p.name]
		if len(vs) == 0 {
			continue
		}
		n, err := strconv.ParseUint(vs[0], 10, 64)
		if len(vs) > 1 || err != nil || n > fence.MaxEpoch {
			return o, fmt.Errorf("%w: %s must be given once, as an epoch (0..%d)", cluster.ErrBadRequest, p.name, fence.MaxEpoch)
		}
		*p.dst = n
	}
	if o.AboveEpoch > 0 && o.Margin > 0 {
		return o, fmt.Errorf("%w: margin is only used without above_epoch: give one of them", cluster.ErrBadRequest)
	}
	return o, nil
}

func (s *Server) transfer(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.TransferRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := checkName("id", req.ID, client.MaxHolderLen, false); err != nil {
		return nil, err
	}
	if err := s.node.TransferLeadership(req.ID); err != nil {
		return nil, err
	}
	// The old leader learns the new one with its first heartbeat.
	deadline := time.Now().Add(5 * time.Second)
	id, _ := s.node.Leader()
	for (id == "" || (req.ID != "" && id != req.ID)) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		id, _ = s.node.Leader()
	}
	return map[string]string{"leader": id}, nil
}

func (s *Server) acquire(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.AcquireRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := firstOf(checkName("key", req.Key, client.MaxKeyLen, true), checkName("holder", req.Holder, client.MaxHolderLen, true),
		checkName("request_id", req.RequestID, client.MaxRequestIDLen, false), checkName("value", req.Value, client.MaxValueLen, false)); err != nil {
		return nil, err
	}
	if err := s.may(ctx, acl.Lock, req.Key); err != nil {
		return nil, err
	}
	ttl, err := parseDuration("ttl", req.TTL, client.DefaultTTL, client.MinTTL, client.MaxTTL)
	if err != nil {
		return nil, err
	}
	wait, err := parseDuration("wait", req.Wait, 0, 0, client.MaxWait)
	if err != nil {
		return nil, err
	}
	delay, err := parseDuration("lock_delay", req.LockDelay, 0, 0, client.MaxLockDelay)
	if err != nil {
		return nil, err
	}
	if err := checkLimit(body, req); err != nil {
		return nil, err
	}
	g, err := s.node.Acquire(ctx, cluster.AcquireArgs{Key: req.Key, Holder: req.Holder, TTL: ttl, Wait: wait, RequestID: req.RequestID, LockDelay: delay,
		Value: req.Value, Limit: req.Limit, Shared: req.Mode == client.ModeShared, Owner: ownerOf(ctx)})
	if err != nil {
		return nil, err
	}
	out := grantOf(g.KeyState, g.Renewed)
	out.Proof = s.grantProof(g)
	return out, nil
}

func grantOf(k fsm.KeyState, renewed bool) client.Grant {
	return client.Grant{Key: k.Key, Holder: k.Holder, Token: k.Token, Epoch: k.Token.Epoch(), Seq: k.Token.Seq(), TTL: k.TTL.String(), Renewed: renewed, Value: k.Value,
		Limit: int(k.Limit), Mode: modeOf(k.Shared)}
}

func (s *Server) renew(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.RenewRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := firstOf(checkName("key", req.Key, client.MaxKeyLen, true), checkName("holder", req.Holder, client.MaxHolderLen, true), checkToken(req.Token),
		checkName("request_id", req.RequestID, client.MaxRequestIDLen, false)); err != nil {
		return nil, err
	}
	if err := s.may(ctx, acl.Lock, req.Key); err != nil {
		return nil, err
	}
	k, _, err := s.node.Renew(ctx, req.Key, req.Holder, req.Token)
	if err != nil {
		return nil, err
	}
	return client.RenewResponse{Key: k.Key, Holder: k.Holder, Token: k.Token, TTL: k.TTL.String(), Proof: s.proofOf(k)}, nil
}

func (s *Server) keepalive(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.KeepaliveRequest
	if !decodeFlatStrings(body, []string{"holder", "request_id"}, []*string{&req.Holder, &req.RequestID}) {
		if err := decode(body, &req); err != nil {
			return nil, err
		}
	}
	if err := firstOf(checkName("holder", req.Holder, client.MaxHolderLen, true), checkName("request_id", req.RequestID, client.MaxRequestIDLen, false)); err != nil {
		return nil, err
	}
	ls, err := s.node.Keepalive(ctx, req.Holder, s.mayFilter(ctx, acl.Lock))
	if err != nil {
		return nil, err
	}
	return keepaliveOf(req.Holder, ls), nil
}

// keepaliveOf is the answer to a keepalive of holder that renewed ls, for
// POST /v1/keepalive and each holder of POST /v1/keepalive/batch alike.
func keepaliveOf(holder string, ls []cluster.RenewedLease) client.KeepaliveResponse {
	out := client.KeepaliveResponse{Holder: holder, Renewed: make([]client.RenewResponse, 0, len(ls))}
	for _, l := range ls {
		out.Renewed = append(out.Renewed, client.RenewResponse{Key: l.Key.Key, Holder: l.Key.Holder, Token: l.Key.Token, TTL: l.Key.TTL.String()})
	}
	return out
}

func (s *Server) release(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.ReleaseRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := firstOf(checkName("key", req.Key, client.MaxKeyLen, true), checkName("holder", req.Holder, client.MaxHolderLen, !req.Force),
		checkName("request_id", req.RequestID, client.MaxRequestIDLen, false)); err != nil {
		return nil, err
	}
	if err := s.may(ctx, acl.Lock, req.Key); err != nil {
		return nil, err
	}
	// A forced release may name no token: the node then ends the grant
	// current when it first applies the request (see ReleaseRequest).
	if !req.Force || req.Token != 0 {
		if err := checkToken(req.Token); err != nil {
			return nil, err
		}
	}
	k, err := s.node.Release(ctx, cluster.ReleaseArgs{Key: req.Key, Holder: req.Holder, Token: req.Token, Force: req.Force, RequestID: req.RequestID})
	if err != nil {
		return nil, err
	}
	if req.Force {
		s.log.Warn("forced release", "key", req.Key, "holder", k.Holder, "token", k.Token, "by", who(ctx))
	}
	return client.ReleaseResponse{Key: k.Key, Token: k.Token, Holder: k.Holder, State: k.State.String()}, nil
}

// verify answers every request with a verdict; whatever it cannot prove is
// a refusal with a reason, never an allow.
func (s *Server) verify(w http.ResponseWriter, r *http.Request) {
	refuse := verifyRefusal(w)
	body, ok := readVerifyBody(w, r, refuse)
	if !ok {
		return
	}
	var req client.VerifyRequest
	if !decodeFlatStrings(body, []string{"key", "token", "holder"}, []*string{&req.Key, &req.Token, &req.Holder}) {
		if err := decode(body, &req); err != nil {
			code, _ := codeOf(err)
			refuse(http.StatusBadRequest, code, err)
			return
		}
	}
	tok, code, err := checkVerify(req)
	if err != nil {
		refuse(http.StatusBadRequest, code, err)
		return
	}
	if err := s.may(r.Context(), acl.Verify, req.Key); err != nil {
		verifyRefusalFor(w, reasonForbidden)(http.StatusForbidden, "forbidden", err)
		return
	}
	if !s.node.Ready() && r.Header.Get(forwardedHeader) == "" {
		s.proxyVerify(w, r, body)
		return
	}
	v, err := s.node.Verify(r.Context(), req.Key, tok, req.Holder)
	if err != nil && (errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrNotReady)) && r.Header.Get(forwardedHeader) == "" {
		s.proxyVerify(w, r, body)
		return
	}
	writeJSON(w, http.StatusOK, verdictOf(v, err))
}

// verifyRefusal returns how the verify routes refuse a request they cannot
// judge: the error, with the verdict of a refused verify (allow false,
// reason malformed), so that a client reading only the verdict refuses too.
func verifyRefusal(w http.ResponseWriter) func(status int, code string, err error) {
	return verifyRefusalFor(w, string(cluster.ReasonMalformed))
}

// reasonForbidden is the verdict of a verify the key ACL refuses: the
// identity may not verify tokens of that key.
const reasonForbidden = "forbidden"

// verifyRefusalFor is verifyRefusal with another reason.
func verifyRefusalFor(w http.ResponseWriter, reason string) func(status int, code string, err error) {
	return func(status int, code string, err error) {
		f := false
		writeJSON(w, status, client.ErrorResponse{Code: code, Message: err.Error(), Allow: &f, Reason: reason})
	}
}

// readVerifyBody checks the content type and reads the body of a verify
// route's request; on false the request was refused.
func readVerifyBody(w http.ResponseWriter, r *http.Request, refuse func(int, string, error)) ([]byte, bool) {
	if err := checkContentType(r); err != nil {
		writeUnsupportedMediaType(w, err, true)
		return nil, false
	}
	body, err := readBody(w, r)
	if err != nil {
		refuse(http.StatusBadRequest, "bad_request", err)
		return nil, false
	}
	return body, true
}

// checkVerify validates one verify request, for POST /v1/verify and each
// check of POST /v1/verify/batch alike: the token, or the wire code of the
// 400 refusal and its error.
func checkVerify(req client.VerifyRequest) (fence.Token, string, error) {
	if err := firstOf(checkName("key", req.Key, client.MaxKeyLen, true), checkName("holder", req.Holder, client.MaxHolderLen, false)); err != nil {
		return 0, "bad_request", err
	}
	tok, err := fence.Parse(req.Token)
	if err != nil {
		return 0, "malformed_token", err
	}
	return tok, "", nil
}

func verdictOf(v cluster.Verdict, err error) client.VerifyResponse {
	if err != nil {
		return client.VerifyResponse{Allow: false, Reason: string(cluster.ReasonUnavailable)}
	}
	out := client.VerifyResponse{Allow: v.Allow, Reason: string(v.Reason)}
	if v.Current != nil {
		out.CurrentToken, out.Holder = v.Current.Token, v.Current.Holder
	}
	return out
}

// proxyVerify forwards a verify; any failure to reach the leader is a refusal.
func (s *Server) proxyVerify(w http.ResponseWriter, r *http.Request, body []byte) {
	rec := &captureWriter{header: http.Header{}}
	s.proxy(rec, r, body, false)
	if rec.status == http.StatusOK || rec.status == http.StatusBadRequest {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.buf.Bytes())
		return
	}
	writeJSON(w, http.StatusOK, client.VerifyResponse{Allow: false, Reason: string(cluster.ReasonUnavailable)})
}

type captureWriter struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.buf.Write(b)
}
func (c *captureWriter) WriteHeader(s int) { c.status = s }

func keyInfoOf(k cluster.KeyInfo) client.KeyInfo {
	ki := client.KeyInfo{Key: k.Key, Holder: k.Holder, Token: k.Token, Epoch: k.Token.Epoch(), Seq: k.Token.Seq(),
		State: k.State.String(), TTL: k.TTL.String(), Index: k.Index, Value: k.Value}
	if !k.Deadline.IsZero() {
		ki.LeaseRemaining = time.Until(k.Deadline).Round(time.Millisecond).String()
	}
	if k.LockDelay > 0 {
		ki.LockDelay = k.LockDelay.String()
	}
	if k.DelayLeft > 0 {
		ki.LockDelayRemaining = k.DelayLeft.Round(time.Millisecond).String()
	}
	ki.Limit, ki.Waiters, ki.Mode, ki.Live = k.Limit, k.Waiters, modeOf(k.Shared), k.Live
	for _, p := range k.Permits {
		pi := keyInfoOf(cluster.KeyInfo{KeyState: p.KeyState, Deadline: p.Deadline})
		pi.Limit, pi.Mode = 0, modeOf(p.Shared) // the limit said once, by the key
		ki.Permits = append(ki.Permits, pi)
	}
	for _, d := range k.Delayed {
		di := keyInfoOf(cluster.KeyInfo{KeyState: d.KeyState, DelayLeft: d.Left})
		di.Limit, di.Mode = 0, modeOf(d.Shared)
		ki.Delayed = append(ki.Delayed, di)
	}
	return ki
}

// keys lists keys in name order: with prefix=, those starting with it; with
// after=, those after that name (the cursor of the previous page); with
// state=, those in that state; at most limit= of them (client.DefaultKeysLimit
// when absent or 0, client.MaxKeysLimit at most). A listing cut there says
// so (truncated) and names the last key listed as the cursor to continue
// from (next). With a key ACL, only the keys the identity may read are
// listed: the others are not there, as if unknown.
func (s *Server) keys(ctx context.Context, _ []byte, r *http.Request) (any, error) {
	q := r.URL.Query()
	prefix, after := q.Get("prefix"), q.Get("after")
	if err := checkName("prefix", prefix, client.MaxPrefixLen, false); err != nil {
		return nil, err
	}
	if err := checkName("after", after, client.MaxKeyLen, false); err != nil {
		return nil, err
	}
	var state fsm.State
	switch q.Get("state") {
	case "":
	case fsm.Held.String():
		state = fsm.Held
	case fsm.Released.String():
		state = fsm.Released
	case fsm.Expired.String():
		state = fsm.Expired
	default:
		return nil, fmt.Errorf("%w: state must be held, released or expired", cluster.ErrBadRequest)
	}
	limit := client.DefaultKeysLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 || n > client.MaxKeysLimit {
			return nil, fmt.Errorf("%w: limit must be an integer from 0 to %d (0: the default, %d)", cluster.ErrBadRequest, client.MaxKeysLimit, client.DefaultKeysLimit)
		}
		if n > 0 {
			limit = n
		}
	}
	readable := s.mayFilter(ctx, acl.Read)
	keep := func(key string, st fsm.State) bool {
		return (q.Get("state") == "" || st == state) && (readable == nil || readable(key))
	}
	ks, more, err := s.node.Keys(ctx, fsm.PageQuery{Prefix: prefix, After: after, Limit: limit, Keep: keep})
	if err != nil {
		return nil, err
	}
	out := client.KeysResponse{Keys: make([]client.KeyInfo, 0, len(ks))}
	for _, k := range ks {
		out.Keys = append(out.Keys, keyInfoOf(k))
	}
	if more && len(out.Keys) > 0 {
		out.Truncated, out.Next = true, out.Keys[len(out.Keys)-1].Key
	}
	return out, nil
}

func (s *Server) key(ctx context.Context, _ []byte, r *http.Request) (any, error) {
	name := r.PathValue("key")
	if err := checkName("key", name, client.MaxKeyLen, true); err != nil {
		return nil, err
	}
	k, ok, err := s.node.Key(ctx, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fsm.ErrUnknownKey
	}
	return keyInfoOf(k), nil
}

func (s *Server) cluster(w http.ResponseWriter, r *http.Request) {
	st := s.node.Status()
	st.Auth = "off"
	if s.sec != nil && s.sec.o.AuthEnabled() {
		st.Auth = "on"
	}
	if s.sec != nil && s.sec.o.Credentials != nil {
		st.Credentials = s.sec.o.Credentials()
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	st := s.node.Status()
	if st.Ready || (st.LeaderID != "" && st.LeaderHTTP != "") {
		body := map[string]any{"status": "ready", "leader": st.LeaderID, "state": st.State}
		if d := st.DataDir; d != nil && d.NoSpace {
			// Still ready: it serves renewals, releases, verifies and
			// reads; as leader it refuses only new keys (no_space).
			body["no_space"], body["reason"] = true, d.Reason
		}
		writeJSON(w, http.StatusOK, body)
		return
	}
	if err := s.memberErr(); err != nil {
		writeErr(w, err)
		return
	}
	writeError(w, http.StatusServiceUnavailable, "unavailable", "no ready leader known to this node")
}

func (s *Server) join(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.JoinRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := firstOf(checkName("id", req.ID, client.MaxHolderLen, true), checkName("raft_addr", req.RaftAddr, client.MaxKeyLen, true),
		checkName("http_addr", req.HTTPAddr, client.MaxKeyLen, false)); err != nil {
		return nil, err
	}
	var signingKey []byte
	if req.SigningKey != "" {
		var err error
		if signingKey, err = base64.RawURLEncoding.Strict().DecodeString(req.SigningKey); err != nil || len(signingKey) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: signing_key must be a %d-byte Ed25519 public key in base64url", cluster.ErrBadRequest, ed25519.PublicKeySize)
		}
	}
	if err := s.node.Join(ctx, req.ID, req.RaftAddr, req.HTTPAddr); err != nil {
		return nil, err
	}
	if err := s.registerJoined(ctx, req.ID, signingKey); err != nil {
		return nil, err
	}
	return map[string]string{"joined": req.ID}, nil
}

func (s *Server) remove(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.RemoveRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := checkName("id", req.ID, client.MaxHolderLen, true); err != nil {
		return nil, err
	}
	if err := s.node.Remove(ctx, req.ID); err != nil {
		return nil, err
	}
	return map[string]string{"removed": req.ID}, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	bp := answerBufs.Get().(*[]byte)
	if b, ok := appendAnswer((*bp)[:0], v); ok {
		b = append(b, '\n')
		w.WriteHeader(status)
		_, _ = w.Write(b)
		if cap(b) <= maxPooledAnswer {
			*bp = b[:0]
			answerBufs.Put(bp)
		}
		return
	}
	answerBufs.Put(bp)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, client.ErrorResponse{Code: code, Message: msg})
}

// refusalReason is the refusals metric's reason for an answer with code:
// the code, but client_gone for a request whose client went away (a
// waiting acquire given up by its caller), which the server did nothing
// wrong to refuse and which nobody reads.
func refusalReason(code string, err error) string {
	if code == "internal" && errors.Is(err, context.Canceled) {
		return "client_gone"
	}
	return code
}

// writeErr translates an error of any layer to its wire form.
func writeErr(w http.ResponseWriter, err error) {
	code, status := codeOf(err)
	metrics.Refusals.WithLabelValues(refusalReason(code, err)).Inc()
	resp := client.ErrorResponse{Code: code, Message: err.Error()}
	var he *fsm.HeldError
	if errors.As(err, &he) {
		resp.HeldBy = he.Holder
		resp.RetryAfter = "1s"
	}
	var che *cluster.HeldError
	if errors.As(err, &che) {
		resp.RetryAfter = che.RetryAfter.String()
	}
	var lde *cluster.LockDelayError
	if errors.As(err, &lde) {
		resp.RetryAfter = lde.RetryAfter.String()
	}
	setRetryAfter(w, &resp, err)
	writeJSON(w, status, resp)
}
