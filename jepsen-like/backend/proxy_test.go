package backend

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
)

// fakeNode counts the requests it served and answers every one with a JSON
// body, naming itself the leader.
func fakeNode(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var served atomic.Int64
	var addr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		served.Add(1)
		w.Header().Set(client.LeaderHeader, addr)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"key":"k","token":"4294967297","state":"released"}`)
	}))
	addr = strings.TrimPrefix(srv.URL, "http://")
	t.Cleanup(srv.Close)
	return srv, &served
}

func newTestProxies(t *testing.T, eps ...string) *Proxies {
	t.Helper()
	p, err := NewProxies(eps, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func post(t *testing.T, ep string) (*http.Response, []byte, error) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("http://"+ep+"/v1/release", "application/json", strings.NewReader(`{"key":"k","force":true,"token":"4294967297"}`))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

// Without loss the proxy is transparent, except that the leader header names
// the leader's proxy.
func TestProxyPassesAnswers(t *testing.T) {
	node, served := fakeNode(t)
	nodeAddr := strings.TrimPrefix(node.URL, "http://")
	p := newTestProxies(t, nodeAddr)
	resp, data, err := post(t, p.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(data), `"state":"released"`) {
		t.Fatalf("answer %d %s", resp.StatusCode, data)
	}
	if got := resp.Header.Get(client.LeaderHeader); got != p.Endpoints()[0] {
		t.Fatalf("leader header %q, want the proxy %q", got, p.Endpoints()[0])
	}
	if served.Load() != 1 {
		t.Fatalf("node served %d requests, want 1", served.Load())
	}
	if s := p.Stats(); s.Forwarded != 1 || s.Dropped+s.Cut != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// With every answer lost, the node still serves each request, and the client
// gets no complete answer: the connection closes before the head (a drop) or
// inside the body (a cut). Both kinds happen.
func TestProxyLosesAnswersAfterTheNodeServed(t *testing.T) {
	node, served := fakeNode(t)
	p := newTestProxies(t, strings.TrimPrefix(node.URL, "http://"))
	p.SetLoss(1)
	const n = 20
	for i := 0; i < n; i++ {
		resp, data, err := post(t, p.Endpoints()[0])
		if err == nil {
			t.Fatalf("attempt %d: a whole answer got through: %d %s", i, resp.StatusCode, data)
		}
	}
	if served.Load() != n {
		t.Fatalf("node served %d of %d requests", served.Load(), n)
	}
	s := p.Stats()
	if s.Dropped == 0 || s.Cut == 0 || s.Dropped+s.Cut != n || s.Lost["release+force"] != n {
		t.Fatalf("stats %+v (%s)", s, s)
	}
}

// The API client sees a lost answer of a write as an unknown outcome, retries
// the same request, and reports ErrUnknownOutcome when every answer is lost.
func TestProxyLossIsAnUnknownOutcomeToTheClient(t *testing.T) {
	node, served := fakeNode(t)
	p := newTestProxies(t, strings.TrimPrefix(node.URL, "http://"))
	p.SetLoss(1)
	cl := client.New(p.Endpoints(), client.WithHTTPClient(&http.Client{Timeout: time.Second, Transport: &http.Transport{}}))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := cl.Release(ctx, client.ReleaseRequest{Key: "k", Token: 4294967297, Force: true})
	if !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("release through a proxy that loses every answer: %v, want ErrUnknownOutcome", err)
	}
	if served.Load() < 2 {
		t.Fatalf("node served %d attempts, want the first and at least one retry", served.Load())
	}
}

// A node the proxy cannot reach is reported as unavailable (nothing was
// done), not as a lost answer.
func TestProxyUnreachableNodeIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := newTestProxies(t, dead)
	resp, data, err := post(t, p.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(data), `"unavailable"`) {
		t.Fatalf("answer %d %s, want 503 unavailable", resp.StatusCode, data)
	}
}
