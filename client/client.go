package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fenced/fenced/fence"
)

// Client talks to a fenced cluster through any of its nodes. It retries only
// what is safe: requests that were not served (no leader, node down), and
// writes whose outcome is unknown, which are idempotent by construction (an
// acquire keeps its request id and holder; a release of a released grant
// succeeds).
//
// Each attempt on one node has its own deadline, well inside the caller's: a
// node that does not answer (frozen, partitioned away) is left for the next
// one, a refused connection or a failed TLS handshake at once. The node that
// last answered as (or for) the leader is tried first; reads and verifies
// start a second, hedged attempt on another node when the first is slow.
//
// Concurrent verifies, and concurrent keepalives, are coalesced into batch
// requests while one of their kind is in flight (coalesce.go, WithBatching).
type Client struct {
	endpoints []string
	invalid   map[string]error
	hc        *http.Client
	token     string
	// insecureCredentials lets token go over plain http to any host
	// (transport.go).
	insecureCredentials bool

	attemptTimeout time.Duration
	hedgeDelay     time.Duration
	// connectTimeout, when set, ends a request for which no endpoint
	// accepted a connection within it (WithConnectTimeout).
	connectTimeout time.Duration

	// batching coalesces concurrent verifies and keepalives (coalesce.go);
	// verifies and keepalives are nil when it is off.
	batching   bool
	verifies   *batcher[VerifyRequest, VerifyResponse]
	keepalives *batcher[string, KeepaliveResponse]

	mu        sync.Mutex
	preferred int
	// suspect holds, per endpoint, until when it is tried only after the
	// others: it timed out or could not be reached.
	suspect map[string]time.Time
	// ids holds, per endpoint, the id its node answered with (NodeHeader).
	ids map[string]string

	// shares are the watch streams that watches of one key or prefix
	// share (watch_share.go).
	shares watchShares
}

// Defaults of the attempt machinery.
const (
	// DefaultAttemptTimeout bounds one attempt on one node: an election
	// timeout (1s by default) plus a margin. It doubles after each full
	// round of the endpoints in which every attempt timed out, up to 8
	// times, for a cluster that is slow rather than electing or missing a
	// node; a node that did not answer lately gets half of it.
	DefaultAttemptTimeout = 2 * time.Second
	// DefaultHedgeDelay is how long a read or verify waits for its first
	// node before asking another one as well.
	DefaultHedgeDelay = 300 * time.Millisecond
	// suspectFor is how long a node that did not answer is tried last.
	suspectFor = 10 * time.Second
)

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (for TLS or custom timeouts).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithBearerToken sends an Authorization: Bearer header with every request.
func WithBearerToken(tok string) Option { return func(c *Client) { c.token = tok } }

// WithAttemptTimeout bounds each attempt on one node (DefaultAttemptTimeout
// when zero or negative). The caller's context bounds the whole request.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.attemptTimeout = d
		}
	}
}

// WithConnectTimeout makes a request fail once d has passed since it began
// without any endpoint accepting a connection (the TCP connection, and with
// WithTLS its handshake): endpoints with nothing behind them, refusing or
// unanswered, then cost d rather than the caller's whole deadline. Nothing
// was sent, so the error is ErrUnavailable, with ErrNoConnection, and names
// each endpoint and why. Once an endpoint accepted a connection, the request
// is retried as usual until the caller's deadline. It bounds the requests
// retried across the endpoints; WaitReady, Watch and KeyWait wait as long as
// their context. Zero, the default, retries refused connections until the
// caller's deadline, as suits a cluster that is starting. The client learns
// of connections through net/http/httptrace (GotConn or WroteHeaders): a
// transport given with WithHTTPClient must report one of them.
func WithConnectTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.connectTimeout = d
		}
	}
}

// WithHedgeDelay sets how long a read waits for one node before asking a
// second one too (DefaultHedgeDelay when zero; negative turns hedging off).
func WithHedgeDelay(d time.Duration) Option {
	return func(c *Client) {
		if d != 0 {
			c.hedgeDelay = d
		}
	}
}

// New returns a client of the nodes at endpoints ("host:port" or
// http(s) URLs with a port). An endpoint that ParseEndpoint refuses is kept
// but never contacted: every request reports it as bad. Check endpoints with
// ParseEndpoints first to refuse them up front.
func New(endpoints []string, opts ...Option) *Client {
	c := &Client{hc: &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}}, attemptTimeout: DefaultAttemptTimeout, hedgeDelay: DefaultHedgeDelay, suspect: map[string]time.Time{}, ids: map[string]string{}, batching: true}
	for _, e := range endpoints {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		ep, err := ParseEndpoint(e)
		if err != nil {
			if !strings.Contains(e, "://") {
				e = "http://" + e
			}
			ep = strings.TrimRight(e, "/")
			if c.invalid == nil {
				c.invalid = map[string]error{}
			}
			c.invalid[ep] = err
		}
		c.endpoints = append(c.endpoints, ep)
	}
	for _, o := range opts {
		o(c)
	}
	c.hc = noRedirects(c.hc)
	if c.batching {
		c.newBatchers()
	}
	return c
}

// CloseIdleConnections closes the client's kept-alive connections that no
// request is using; it does not stop the client from opening new ones.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// AttemptTimeout returns the base deadline of one attempt on one node.
func (c *Client) AttemptTimeout() time.Duration { return c.attemptTimeout }

// Endpoints returns the endpoints as URLs.
func (c *Client) Endpoints() []string { return append([]string(nil), c.endpoints...) }

// NewRequestID returns a random request id for an acquire.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Acquire asks for a key. When the outcome of an attempt is unknown it retries
// with the same request id, so it never holds two grants for one call. A key
// held by someone else gives an error that errors.Is(err, ErrHeld) and whose
// *Error carries HeldBy.
func (c *Client) Acquire(ctx context.Context, req AcquireRequest) (*Grant, error) {
	if req.RequestID == "" {
		req.RequestID = NewRequestID()
	}
	// A queued acquire is held by the leader up to its wait: each attempt
	// may take that long on top of its own deadline.
	hold, _ := time.ParseDuration(req.Wait)
	var g Grant
	if err := c.call(ctx, call{method: http.MethodPost, path: "/v1/acquire", in: req, out: &g, write: true, hold: max(hold, 0)}); err != nil {
		return nil, err
	}
	return &g, nil
}

// AcquireMulti asks for every key of req.Keys for one holder, all in one
// log entry or none (see AcquireMultiRequest). A set with a key held by
// another holder gives an error that errors.Is(err, ErrHeld). When the
// outcome of an attempt is unknown it retries with the same request id, so
// one call never holds two sets.
func (c *Client) AcquireMulti(ctx context.Context, req AcquireMultiRequest) (*MultiGrant, error) {
	if req.RequestID == "" {
		req.RequestID = NewRequestID()
	}
	hold, _ := time.ParseDuration(req.Wait)
	var g MultiGrant
	if err := c.call(ctx, call{method: http.MethodPost, path: "/v1/acquire/multi", in: req, out: &g, write: true, hold: max(hold, 0)}); err != nil {
		return nil, err
	}
	return &g, nil
}

// ReleaseMulti ends a holder's set of grants (a multi-key acquire's, or
// any of its grants: see ReleaseMultiRequest) in one log entry, or none: a
// set naming a grant that is not the holder's live one gives the error a
// release of it alone would (errors.Is with ErrNotHolder, ErrStaleToken,
// ...), the key named in its message. Retrying is safe as for Release:
// every attempt carries the same request id (one is made when req has
// none), and a retry of an applied attempt is answered with the grants it
// ended, never ends a later grant.
func (c *Client) ReleaseMulti(ctx context.Context, req ReleaseMultiRequest) (*ReleaseMultiResponse, error) {
	if req.RequestID == "" {
		req.RequestID = NewRequestID()
	}
	var out ReleaseMultiResponse
	if err := c.do(ctx, http.MethodPost, "/v1/release/multi", req, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// RenewMulti extends the lease of each of a holder's set of grants by its
// TTL, after one proof of leadership, or none: a set naming a grant
// without a live lease of the holder gives the error a renewal of it alone
// would, the key named in its message. Safe to repeat, by the tokens alone.
func (c *Client) RenewMulti(ctx context.Context, holder string, keys []GrantRef) (*RenewMultiResponse, error) {
	var out RenewMultiResponse
	if err := c.do(ctx, http.MethodPost, "/v1/renew/multi", RenewMultiRequest{Keys: keys, Holder: holder, RequestID: NewRequestID()}, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// Renew extends one grant's lease by its TTL.
func (c *Client) Renew(ctx context.Context, key, holder string, tok fence.Token) (*RenewResponse, error) {
	var out RenewResponse
	// Every write carries a request id, kept across the attempts: a renewal
	// is safe to repeat by its token alone, and the id says so to any
	// reader of the request (a proxy's log, the server's).
	if err := c.do(ctx, http.MethodPost, "/v1/renew", RenewRequest{Key: key, Holder: holder, Token: tok, RequestID: NewRequestID()}, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// Keepalive extends the leases of every key the holder has. Keepalives made
// while another is in flight go out together in one batch request (see
// WithBatching); each gets its own answer.
func (c *Client) Keepalive(ctx context.Context, holder string) (*KeepaliveResponse, error) {
	var out KeepaliveResponse
	var err error
	if c.keepalives != nil {
		out, err = c.keepalives.do(ctx, holder)
	} else {
		err = c.do(ctx, http.MethodPost, "/v1/keepalive", KeepaliveRequest{Holder: holder, RequestID: NewRequestID()}, &out, true)
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Release ends a grant. Retrying a release whose outcome is unknown is safe:
// every attempt carries the same request id (one is made when req has
// none), and the cluster applies a request id once: a retry of an attempt
// that was applied is answered with the grant it ended, never an effect on
// a later grant, and every attempt names the same grant by its token.
//
// A forced release without a token ends the key's current grant: Release
// reads that grant's token once, before the first attempt, and every attempt
// carries it (a server that knows the request id would answer the same
// without it).
func (c *Client) Release(ctx context.Context, req ReleaseRequest) (*ReleaseResponse, error) {
	if req.Force && req.Token == 0 {
		k, err := c.Key(ctx, req.Key)
		if err != nil {
			return nil, err
		}
		req.Token = k.Token
	}
	if req.RequestID == "" {
		// Applied once: a retry after a lost answer is answered with the
		// grant the first attempt ended, never ends a later one.
		req.RequestID = NewRequestID()
	}
	var out ReleaseResponse
	if err := c.do(ctx, http.MethodPost, "/v1/release", req, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// Verify asks whether tok is the current live grant of key. It fails closed:
// whatever goes wrong, the verdict refuses, with the reason "unavailable" when
// no node could answer, "malformed" for a bad token or key and "forbidden"
// when the identity may not verify the key; the error says what went wrong. Verifies made while another is in flight go out
// together in one batch request (see WithBatching); each gets its own
// verdict, as linearizable as a verify of its own.
func (c *Client) Verify(ctx context.Context, key, tok, holder string) (VerifyResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	backoff := 20 * time.Millisecond
	for {
		out, err := c.verifyOnce(ctx, VerifyRequest{Key: key, Token: tok, Holder: holder})
		var apiErr *Error
		switch {
		case err == nil && out.Reason != "unavailable":
			return out, nil
		case err == nil:
			// The node that answered could not reach a ready leader (an
			// election, a restart): ask again until the context ends.
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusBadRequest:
			return VerifyResponse{Allow: false, Reason: "malformed"}, err
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusForbidden:
			return VerifyResponse{Allow: false, Reason: "forbidden"}, err
		default:
			return VerifyResponse{Allow: false, Reason: "unavailable"}, err
		}
		select {
		case <-ctx.Done():
			return VerifyResponse{Allow: false, Reason: "unavailable"}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
		c.prefer((c.start() + 1) % len(c.endpoints))
	}
}

// Key returns one key's state, read linearizably.
func (c *Client) Key(ctx context.Context, key string) (*KeyInfo, error) {
	var out KeyInfo
	if err := c.do(ctx, http.MethodGet, "/v1/keys/"+url.PathEscape(key), nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// Keys lists keys with a prefix, in name order, at most limit of them
// (every one when limit is 0, page by page: see ListAllKeys). KeysPage says
// whether the list was cut.
func (c *Client) Keys(ctx context.Context, prefix string, limit int) ([]KeyInfo, error) {
	if limit == 0 {
		return c.ListAllKeys(ctx, KeysQuery{Prefix: prefix})
	}
	kr, err := c.KeysPage(ctx, prefix, "", limit)
	if err != nil {
		return nil, err
	}
	return kr.Keys, nil
}

// KeysPage lists, read linearizably and in name order, at most limit keys
// (the server's page, DefaultKeysLimit, when limit is 0) with a prefix whose
// names come after after. When the list was cut, Truncated is set and Next
// is the after of the next page.
func (c *Client) KeysPage(ctx context.Context, prefix, after string, limit int) (*KeysResponse, error) {
	return c.ListKeys(ctx, KeysQuery{Prefix: prefix, After: after, Limit: limit})
}

// KeysQuery selects the keys ListKeys lists: those with Prefix, in State
// when it is set (held, released or expired), whose names come after After,
// at most Limit of them (DefaultKeysLimit when 0, MaxKeysLimit at most).
type KeysQuery struct {
	Prefix, State, After string
	Limit                int
}

// ListKeys lists one page of keys, read linearizably and in name order, as
// q selects. When the list was cut, Truncated is set and Next is the After
// of the next page.
func (c *Client) ListKeys(ctx context.Context, q KeysQuery) (*KeysResponse, error) {
	v := url.Values{}
	for name, val := range map[string]string{"prefix": q.Prefix, "state": q.State, "after": q.After} {
		if val != "" {
			v.Set(name, val)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", fmt.Sprint(q.Limit))
	}
	path := "/v1/keys"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out KeysResponse
	if err := c.do(ctx, http.MethodGet, path, nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListAllKeys lists every key q selects (q.Limit is the page size), page by
// page in name order. Each page is read linearizably; the listing as a whole
// is not one snapshot: a key granted meanwhile may or may not be in it.
func (c *Client) ListAllKeys(ctx context.Context, q KeysQuery) ([]KeyInfo, error) {
	var all []KeyInfo
	for {
		kr, err := c.ListKeys(ctx, q)
		if err != nil {
			return nil, err
		}
		all = append(all, kr.Keys...)
		if !kr.Truncated || kr.Next == "" {
			return all, nil
		}
		q.After = kr.Next
	}
}

// Join adds a node to the cluster.
func (c *Client) Join(ctx context.Context, req JoinRequest) error {
	return c.do(ctx, http.MethodPost, "/v1/cluster/join", req, nil, true)
}

// Remove takes a node out of the cluster.
func (c *Client) Remove(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/cluster/remove", RemoveRequest{ID: id}, nil, true)
}

// NodeStatus returns the status that the node at endpoint reports, with no
// retry on another node.
func (c *Client) NodeStatus(ctx context.Context, endpoint string) (*Status, error) {
	var out Status
	if _, err := c.once(ctx, endpoint, http.MethodGet, "/v1/cluster", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Status returns the status of the first node that answers.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var out Status
	if err := c.do(ctx, http.MethodGet, "/v1/cluster", nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// verifyOnce asks for one verdict: coalesced with the verifies in flight, or
// alone when batching is off.
func (c *Client) verifyOnce(ctx context.Context, req VerifyRequest) (VerifyResponse, error) {
	if c.verifies != nil {
		return c.verifies.do(ctx, req)
	}
	var out VerifyResponse
	err := c.do(ctx, http.MethodPost, "/v1/verify", req, &out, false)
	return out, err
}
