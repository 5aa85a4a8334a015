package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenced/fenced/fence"
)

// Client talks to a fenced cluster through any of its nodes. It retries only
// what is safe: requests that were not served (no leader, node down), and
// writes whose outcome is unknown, which are idempotent by construction (an
// acquire keeps its request id and holder; a release of a released grant
// succeeds).
type Client struct {
	endpoints []string
	hc        *http.Client
	token     string

	mu        sync.Mutex
	preferred int
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient sets the HTTP client (for TLS or custom timeouts).
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.hc = hc } }

// WithBearerToken sends an Authorization: Bearer header with every request.
func WithBearerToken(tok string) ClientOption { return func(c *Client) { c.token = tok } }

// NewClient returns a client of the nodes at endpoints ("host:port" or URLs).
func NewClient(endpoints []string, opts ...ClientOption) *Client {
	c := &Client{hc: &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}}}
	for _, e := range endpoints {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		c.endpoints = append(c.endpoints, strings.TrimRight(e, "/"))
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// CloseIdleConnections closes the client's kept-alive connections that no
// request is using; it does not stop the client from opening new ones.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

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
	var g Grant
	if err := c.do(ctx, http.MethodPost, "/v1/acquire", req, &g, true); err != nil {
		return nil, err
	}
	return &g, nil
}

// Renew extends one grant's lease by its TTL.
func (c *Client) Renew(ctx context.Context, key, holder string, tok fence.Token) (*RenewResponse, error) {
	var out RenewResponse
	if err := c.do(ctx, http.MethodPost, "/v1/renew", RenewRequest{Key: key, Holder: holder, Token: tok}, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// Keepalive extends the leases of every key the holder has.
func (c *Client) Keepalive(ctx context.Context, holder string) (*KeepaliveResponse, error) {
	var out KeepaliveResponse
	if err := c.do(ctx, http.MethodPost, "/v1/keepalive", KeepaliveRequest{Holder: holder}, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// Release ends a grant. Retrying a release whose outcome is unknown is safe:
// releasing a released grant succeeds, and every attempt names the same
// grant by its token.
//
// A forced release without a token ends the key's current grant: Release
// reads that grant's token once, before the first attempt, and every attempt
// carries it. Were the token looked up per attempt, a retry after a first
// attempt that committed (and handed the key to a waiter in the same commit)
// but whose answer was lost would end the waiter's grant. When the retry finds
// the grant already superseded, the error says the outcome is unknown and
// errors.Is(err, ErrStaleToken) holds: the grant meant is over, by this
// release or by something else.
func (c *Client) Release(ctx context.Context, req ReleaseRequest) (*ReleaseResponse, error) {
	if req.Force && req.Token == 0 {
		k, err := c.Key(ctx, req.Key)
		if err != nil {
			return nil, err
		}
		req.Token = k.Token
	}
	var out ReleaseResponse
	if err := c.do(ctx, http.MethodPost, "/v1/release", req, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// Verify asks whether tok is the current live grant of key. It fails closed:
// whatever goes wrong, the verdict refuses, with the reason "unavailable" when
// no node could answer and "malformed" for a bad token or key; the error
// says what went wrong.
func (c *Client) Verify(ctx context.Context, key, tok, holder string) (VerifyResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	backoff := 20 * time.Millisecond
	for {
		var out VerifyResponse
		err := c.do(ctx, http.MethodPost, "/v1/verify", VerifyRequest{Key: key, Token: tok, Holder: holder}, &out, false)
		var apiErr *Error
		switch {
		case err == nil && out.Reason != "unavailable":
			return out, nil
		case err == nil:
			// The node that answered could not reach a ready leader (an
			// election, a restart): ask again until the context ends.
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusBadRequest:
			return VerifyResponse{Allow: false, Reason: "malformed"}, err
		default:
			return VerifyResponse{Allow: false, Reason: "unavailable"}, err
		}
		select {
		case <-ctx.Done():
			return VerifyResponse{Allow: false, Reason: "unavailable"}, fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
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

// Keys lists keys with a prefix, read linearizably.
func (c *Client) Keys(ctx context.Context, prefix string, limit int) ([]KeyInfo, error) {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	path := "/v1/keys"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out KeysResponse
	if err := c.do(ctx, http.MethodGet, path, nil, &out, false); err != nil {
		return nil, err
	}
	return out.Keys, nil
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

// do sends a request to the endpoints in turn until one serves it or ctx ends.
// write marks requests that change state: after such a request was sent, a
// failure means the outcome is unknown; it is retried (all writes are
// idempotent) and reported as ErrUnknownOutcome, never as a plain failure.
func (c *Client) do(ctx context.Context, method, path string, in, out any, write bool) error {
	if len(c.endpoints) == 0 {
		return fmt.Errorf("%w: no endpoints", ErrUnavailable)
	}
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	unknown := false
	backoff := 20 * time.Millisecond
	start := c.start()
	for attempt := 0; ; attempt++ {
		i := (start + attempt) % len(c.endpoints)
		sent, err := c.once(ctx, c.endpoints[i], method, path, body, out)
		if err == nil {
			return nil // once prefers the leader, or else this endpoint
		}
		var apiErr *Error
		switch {
		case errors.As(err, &apiErr) && apiErr.Code == "outcome_unknown":
			unknown = true
		case errors.As(err, &apiErr) && !safeToRetry(apiErr.Code):
			if unknown && write {
				// An earlier attempt may have been committed, and its effect
				// may be why this attempt was refused (a grant that then
				// expired and went to someone else): the refusal is not a
				// definite no. errors.Is works for both.
				return fmt.Errorf("%w (an earlier attempt may have been committed): %w", ErrUnknownOutcome, err)
			}
			return err
		case apiErr == nil && sent && write:
			unknown = true
		}
		if ctx.Err() != nil {
			if unknown {
				return fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
			}
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if (attempt+1)%len(c.endpoints) == 0 {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			backoff = min(2*backoff, 500*time.Millisecond)
		}
	}
}

// learnLeader makes the leader's endpoint the preferred one when it is among
// the client's endpoints, so requests stop taking a forwarding hop; else the
// endpoint that answered.
func (c *Client) learnLeader(addr, answered string) {
	for i, ep := range c.endpoints {
		if addr != "" && strings.HasSuffix(ep, "://"+addr) {
			c.prefer(i)
			return
		}
	}
	for i, ep := range c.endpoints {
		if ep == answered {
			c.prefer(i)
			return
		}
	}
}

func (c *Client) start() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.preferred
}

func (c *Client) prefer(i int) {
	c.mu.Lock()
	c.preferred = i
	c.mu.Unlock()
}

// once sends one request. sent reports whether the request may have reached
// the server (false only when the connection could not be made).
func (c *Client) once(ctx context.Context, endpoint, method, path string, body []byte, out any) (sent bool, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	// A request that never got a connection, or whose headers were never
	// written, cannot have been served: only then is a failure "not sent".
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	req, err := http.NewRequestWithContext(ctx, method, endpoint+path, rd)
	if err != nil {
		return false, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		notSent := (errors.As(err, &op) && op.Op == "dial") || handshakeFailed(err) || !wrote.Load()
		return !notSent, err
	}
	defer resp.Body.Close()
	c.learnLeader(resp.Header.Get(LeaderHeader), endpoint)
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return true, err
	}
	if resp.StatusCode/100 != 2 {
		return true, errorOf(resp.StatusCode, data)
	}
	if out == nil {
		return true, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return true, fmt.Errorf("decode answer of %s: %w", endpoint, err)
	}
	return true, nil
}
