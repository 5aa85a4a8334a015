// Package synchttp is an HTTP/1.1 RoundTripper that runs each exchange on the
// caller's goroutine, for load generators that share a machine with what
// they measure.
//
// net/http's Transport gives every connection a reader and a writer
// goroutine, so one request wakes three goroutines and crosses two channels.
// That is nothing for an application, but a benchmark client on the cluster's
// own two cores spends as much CPU on it as the leader spends serving the
// request, and every cycle it spends is taken from the cluster it measures.
// This transport writes the request and reads the whole answer on the
// calling goroutine over a kept-alive connection, with the standard library's
// own request writer and response parser; the wire format is unchanged.
//
// It is for short answers on connections it owns: it reads each body into
// memory (at most MaxBody bytes) before it returns, does no proxying, no
// redirects of its own and no HTTP/2, and never retries.
package synchttp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// MaxBody bounds the body of an answer the transport reads.
const MaxBody = 64 << 20

// ErrBodyTooLarge is returned for an answer whose body exceeds MaxBody.
var ErrBodyTooLarge = errors.New("synchttp: answer body exceeds MaxBody")

// Transport is an http.RoundTripper over plain or TLS connections, one
// exchange at a time per connection, idle connections kept per host.
type Transport struct {
	// TLS configures https connections; nil uses the system roots.
	TLS *tls.Config
	// DialTimeout bounds a connect and TLS handshake; zero means 5s.
	DialTimeout time.Duration

	mu   sync.Mutex
	idle map[string][]*conn
}

type conn struct {
	nc  net.Conn
	br  *bufio.Reader
	bw  *bufio.Writer
	key string
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("synchttp: unsupported scheme %q", req.URL.Scheme)
	}
	ctx := req.Context()
	c, err := t.get(ctx, req.URL.Scheme, req.URL.Host)
	if err != nil {
		return nil, err
	}
	// A cancelled context ends a blocked read or write at once; the
	// connection is then in an unknown state and is closed, never reused.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	resp, err := c.exchange(req)
	if !stop() || err != nil {
		_ = c.nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if resp.Close {
		_ = c.nc.Close()
	} else {
		t.put(c)
	}
	return resp, nil
}

// exchange writes req and reads the whole answer, whose body it then holds
// in memory.
func (c *conn) exchange(req *http.Request) (*http.Response, error) {
	// Report the headers as written before anything reaches the wire: a
	// caller that decides whether a failed request may have been served
	// must never be told "not sent" for a request the server could have seen.
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil && tr.WroteHeaders != nil {
		tr.WroteHeaders()
	}
	if err := req.Write(c.bw); err != nil {
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if len(body) > MaxBody {
		return nil, ErrBodyTooLarge
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

func (t *Transport) get(ctx context.Context, scheme, host string) (*conn, error) {
	key := scheme + "://" + host
	t.mu.Lock()
	if l := t.idle[key]; len(l) > 0 {
		c := l[len(l)-1]
		t.idle[key] = l[:len(l)-1]
		t.mu.Unlock()
		return c, nil
	}
	t.mu.Unlock()
	return t.dial(ctx, scheme, host, key)
}

func (t *Transport) dial(ctx context.Context, scheme, host, key string) (*conn, error) {
	timeout := t.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := (&net.Dialer{KeepAlive: 15 * time.Second}).DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	if scheme == "https" {
		cfg := &tls.Config{}
		if t.TLS != nil {
			cfg = t.TLS.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(host)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	return &conn{nc: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc), key: key}, nil
}

func (t *Transport) put(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.idle == nil {
		t.idle = map[string][]*conn{}
	}
	t.idle[c.key] = append(t.idle[c.key], c)
}

// CloseIdleConnections closes every idle connection;
// http.Client.CloseIdleConnections calls it.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.idle {
		for _, c := range l {
			_ = c.nc.Close()
		}
	}
	t.idle = nil
}
