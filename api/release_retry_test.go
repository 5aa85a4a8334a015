package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/fenced/fenced/internal/testutil"
)

// loseAnswer is an http.RoundTripper that lets the first request to path
// reach the server and be served, then throws the answer away and reports a
// broken connection instead: the client cannot know whether it was applied.
type loseAnswer struct {
	next http.RoundTripper
	path string

	mu   sync.Mutex
	lost bool
}

var errAnswerLost = errors.New("connection reset after the request was sent (test)")

func (l *loseAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || req.URL.Path != l.path {
		return resp, err
	}
	l.mu.Lock()
	drop := !l.lost
	l.lost = true
	l.mu.Unlock()
	if !drop {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errAnswerLost
}

// TestForcedReleaseRetryKeepsNextGrant: a forced release without a token
// whose first attempt committed, handing the key to a waiter in the same
// commit, and whose answer was lost, is retried by the client; the retry
// must not end the waiter's grant, which no one meant to end.
func TestForcedReleaseRetryKeepsNextGrant(t *testing.T) {
	nodes := startCluster(t, 1)
	n := nodes[0]
	testutil.Eventually(t, 10*time.Second, func() error {
		if !n.node.Ready() {
			return errors.New("not ready")
		}
		return nil
	})
	ctx := context.Background()
	c := client.New([]string{n.url})
	first, err := c.Acquire(ctx, client.AcquireRequest{Key: "k", Holder: "a", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		g   *client.Grant
		err error
	}
	waited := make(chan result, 1)
	go func() {
		g, err := c.Acquire(ctx, client.AcquireRequest{Key: "k", Holder: "w", TTL: "1m", Wait: "1m"})
		waited <- result{g, err}
	}()
	testutil.Eventually(t, 10*time.Second, func() error {
		if n.node.Status().Waiters != 1 {
			return errors.New("the waiter is not queued yet")
		}
		return nil
	})

	lossy := client.New([]string{n.url}, client.WithHTTPClient(&http.Client{Transport: &loseAnswer{next: http.DefaultTransport, path: "/v1/release"}}))
	out, err := lossy.Release(ctx, client.ReleaseRequest{Key: "k", Force: true})
	t.Logf("forced release: %+v, %v", out, err)

	var w result
	select {
	case w = <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was never served")
	}
	if w.err != nil {
		t.Fatalf("waiter: %v", w.err)
	}
	k, err := c.Key(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if k.State != "held" || k.Holder != "w" || k.Token != w.g.Token {
		t.Fatalf("after a retried forced release of %s (holder a), the key is %s by %s with token %s: the retry ended the waiter's grant %s",
			first.Token, k.State, k.Holder, k.Token, w.g.Token)
	}
	switch {
	case err == nil && out != nil && out.Token != first.Token:
		t.Fatalf("the forced release reports token %s, not the grant it ended (%s)", out.Token, first.Token)
	case err != nil && !errors.Is(err, client.ErrUnknownOutcome):
		t.Fatalf("the forced release failed without saying its outcome is unknown: %v", err)
	}
}

// TestRawForcedReleaseRetryKeepsNextGrant: a client that is not the Go
// client (curl, any HTTP library) repeats the very body of a token-less
// forced release whose answer it lost, after the key went to a waiter in
// the same commit. With a request id the repeat is answered with the grant
// the first one ended, and the waiter's grant stands (without one, a
// harness got 3 violations in 90 s: "a release meant for grant T ended
// grant T+1").
func TestRawForcedReleaseRetryKeepsNextGrant(t *testing.T) {
	n := startCluster(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := client.New([]string{n.url})
	first, err := c.Acquire(ctx, client.AcquireRequest{Key: "k", Holder: "a", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan *client.Grant, 1)
	go func() {
		g, err := c.Acquire(ctx, client.AcquireRequest{Key: "k", Holder: "b", TTL: "1m", Wait: "20s"})
		if err != nil {
			t.Error(err)
		}
		waiter <- g
	}()
	testutil.Eventually(t, 10*time.Second, func() error {
		if st := n.node.Status(); st.Waiters != 1 {
			return fmt.Errorf("%d waiters", st.Waiters)
		}
		return nil
	})
	body := `{"key":"k","force":true,"request_id":"op-7"}`
	var answers []client.ReleaseResponse
	for range 2 {
		status, data := postRaw(t, n.url, "/v1/release", body, "")
		var r client.ReleaseResponse
		if status != http.StatusOK || json.Unmarshal(data, &r) != nil {
			t.Fatalf("forced release: %d %s", status, data)
		}
		answers = append(answers, r)
	}
	b := <-waiter
	if answers[0].Token != first.Token || answers[1].Token != first.Token || answers[1].State != "released" {
		t.Fatalf("answers %+v; want both to name a's grant %v", answers, first.Token)
	}
	if k, err := c.Key(ctx, "k"); err != nil || k.Holder != "b" || k.Token != b.Token || k.State != "held" {
		t.Fatalf("the waiter's grant after the repeat: %+v %v, want b's %v held", k, err, b.Token)
	}
}
