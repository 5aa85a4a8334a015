package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// coalesceServer is a node stand-in that counts requests; single verifies
// wait for gate when it is set, so calls pile up behind one in flight.
type coalesceServer struct {
	singles, batches atomic.Int32
	batchItems       atomic.Int32
	noBatch          bool
	gate             chan struct{}
	batchGate        chan struct{}
}

func (s *coalesceServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch r.URL.Path {
	case "/v1/verify":
		s.singles.Add(1)
		if s.gate != nil {
			<-s.gate
		}
		var req VerifyRequest
		_ = json.Unmarshal(body, &req)
		writeJSON(w, 200, VerifyResponse{Reason: "unknown_key", Holder: req.Key})
	case "/v1/verify/batch":
		s.batches.Add(1)
		if s.noBatch {
			writeError(w, 404, "not_found", "no such endpoint")
			return
		}
		if s.batchGate != nil {
			<-s.batchGate
		}
		var req VerifyBatchRequest
		_ = json.Unmarshal(body, &req)
		s.batchItems.Add(int32(len(req.Checks)))
		out := VerifyBatchResponse{}
		for _, c := range req.Checks {
			if c.Token == "bad" {
				out.Results = append(out.Results, VerifyResult{Status: 400, Reason: "malformed", Code: "malformed_token", Message: "bad"})
				continue
			}
			out.Results = append(out.Results, VerifyResult{Status: 200, Reason: "unknown_key", Holder: c.Key})
		}
		writeJSON(w, 200, out)
	case "/v1/keepalive":
		s.singles.Add(1)
		if s.gate != nil {
			<-s.gate
		}
		var req KeepaliveRequest
		_ = json.Unmarshal(body, &req)
		writeJSON(w, 200, KeepaliveResponse{Holder: req.Holder, Renewed: []RenewResponse{}})
	case "/v1/keepalive/batch":
		s.batches.Add(1)
		var req KeepaliveBatchRequest
		_ = json.Unmarshal(body, &req)
		s.batchItems.Add(int32(len(req.Holders)))
		out := KeepaliveBatchResponse{}
		for _, h := range req.Holders {
			if h == "alice" {
				out.Results = append(out.Results, KeepaliveResult{Status: 403, Code: "forbidden", Message: "not yours"})
				continue
			}
			out.Results = append(out.Results, KeepaliveResult{Status: 200, Holder: h})
		}
		writeJSON(w, 200, out)
	default:
		writeError(w, 404, "not_found", "no such endpoint")
	}
}

// TestClientCoalescesKeepalives: keepalives made while maxFlights are in flight go
// out as one batch; each caller gets its own holder's answer or refusal.
func TestClientCoalescesKeepalives(t *testing.T) {
	s := &coalesceServer{gate: make(chan struct{})}
	srv := httptest.NewServer(s)
	defer srv.Close()
	release := sync.OnceFunc(func() { close(s.gate) })
	defer release() // before srv.Close, so a failed test does not hang
	c := New([]string{srv.URL})
	const n = 12
	outs := make([]*KeepaliveResponse, n)
	errs := make([]error, n)
	holder := func(i int) string {
		if i == 3 {
			return "alice"
		}
		return fmt.Sprintf("h%d", i)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = c.Keepalive(context.Background(), holder(i))
		}()
		if i < maxFlights {
			inFlight(t, s, i+1)
		}
	}
	eventually(t, 10*time.Second, func() error {
		c.keepalives.mu.Lock()
		defer c.keepalives.mu.Unlock()
		if len(c.keepalives.queue) < n-maxFlights {
			return fmt.Errorf("%d queued", len(c.keepalives.queue))
		}
		return nil
	})
	release()
	wg.Wait()
	if s.singles.Load() != maxFlights || s.batches.Load() != 1 || s.batchItems.Load() != n-maxFlights {
		t.Fatalf("%d single and %d batch requests (%d items), want %d and 1 (%d)", s.singles.Load(), s.batches.Load(), s.batchItems.Load(), maxFlights, n-maxFlights)
	}
	for i := range n {
		switch {
		case i == 3:
			if !errors.Is(errs[i], ErrForbidden) {
				t.Errorf("refused holder: %+v %v", outs[i], errs[i])
			}
		case errs[i] != nil || outs[i].Holder != holder(i) || outs[i].Renewed == nil:
			t.Errorf("caller %d: %+v %v", i, outs[i], errs[i])
		}
	}
}

// inFlight waits until n single calls reached the server (and wait at its
// gate).
func inFlight(t *testing.T, s *coalesceServer, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if got := s.singles.Load(); got < int32(n) {
			return fmt.Errorf("%d single calls in flight, want %d", got, n)
		}
		return nil
	})
}

// queued waits until exactly n calls wait behind the ones in flight: as
// many as were queued, or as are left once a caller gave up (waiting for
// at least n would see a caller that gave up as still queued).
func queued(t *testing.T, c *Client, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		c.verifies.mu.Lock()
		defer c.verifies.mu.Unlock()
		live := 0
		for _, w := range c.verifies.queue {
			if !w.gone {
				live++
			}
		}
		if live != n {
			return fmt.Errorf("%d calls queued, want %d", live, n)
		}
		return nil
	})
}

// TestClientCoalescesVerifies: calls made while maxFlights are in flight go out as
// one batch, each caller gets its own answer, and one caller's bad input or
// cancelled context fails no other.
func TestClientCoalescesVerifies(t *testing.T) {
	s := &coalesceServer{gate: make(chan struct{})}
	srv := httptest.NewServer(s)
	defer srv.Close()
	release := sync.OnceFunc(func() { close(s.gate) })
	defer release() // before srv.Close, so a failed test does not hang
	c := New([]string{srv.URL})
	ctx := context.Background()

	const n = 32
	type answer struct {
		v   VerifyResponse
		err error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	call := func(i int, ctx context.Context, tok string) {
		defer wg.Done()
		v, err := c.Verify(ctx, fmt.Sprintf("key-%d", i), tok, "")
		answers[i] = answer{v, err}
	}
	for i := range maxFlights {
		wg.Add(1)
		go call(i, ctx, "1")
		inFlight(t, s, i+1)
	}
	// The first queued caller gives up; the second's token is malformed.
	cancelled, bad := maxFlights, maxFlights+1
	cctx, cancel := context.WithCancel(ctx)
	for i := maxFlights; i < n; i++ {
		wg.Add(1)
		switch i {
		case cancelled:
			go call(i, cctx, "1")
		case bad:
			go call(i, ctx, "bad")
		default:
			go call(i, ctx, "1")
		}
	}
	queued(t, c, n-maxFlights)
	cancel()
	queued(t, c, n-maxFlights-1)
	release()
	wg.Wait()
	if s.singles.Load() != maxFlights || s.batches.Load() != 1 || s.batchItems.Load() != n-maxFlights-1 {
		t.Fatalf("%d calls made %d single and %d batch requests (%d items), want %d and 1 (%d)", n, s.singles.Load(), s.batches.Load(), s.batchItems.Load(), maxFlights, n-maxFlights-1)
	}
	for i, a := range answers {
		switch i {
		case cancelled:
			if a.v.Allow || !errors.Is(a.err, ErrUnavailable) {
				t.Errorf("cancelled caller: %+v %v", a.v, a.err)
			}
		case bad:
			if a.v.Reason != "malformed" || !errors.Is(a.err, ErrMalformedToken) {
				t.Errorf("bad token: %+v %v", a.v, a.err)
			}
		default:
			if a.err != nil || a.v.Holder != fmt.Sprintf("key-%d", i) {
				t.Errorf("caller %d got %+v %v", i, a.v, a.err)
			}
		}
	}
}

// TestClientCancelInBatch: a caller that gives up while its batch is in
// flight returns at once; the others of the batch get their answers.
func TestClientCancelInBatch(t *testing.T) {
	s := &coalesceServer{gate: make(chan struct{}), batchGate: make(chan struct{})}
	srv := httptest.NewServer(s)
	defer srv.Close()
	release := sync.OnceFunc(func() { close(s.gate) })
	defer release() // before srv.Close, so a failed test does not hang
	releaseBatch := sync.OnceFunc(func() { close(s.batchGate) })
	defer releaseBatch()
	c := New([]string{srv.URL})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, maxFlights+3)
	cancelled := maxFlights + 1 // the second of the batch
	cctx, cancel := context.WithCancel(ctx)
	for i := range errs {
		wg.Add(1)
		cx := ctx
		if i == cancelled {
			cx = cctx
		}
		go func() {
			defer wg.Done()
			_, errs[i] = c.Verify(cx, "k", "1", "")
		}()
		if i < maxFlights {
			inFlight(t, s, i+1)
		}
	}
	queued(t, c, 3)
	release() // the batch goes out and waits at the server
	eventually(t, 10*time.Second, func() error {
		if s.batches.Load() == 0 {
			return errors.New("batch not sent")
		}
		return nil
	})
	cancel()
	eventually(t, 10*time.Second, func() error {
		c.verifies.mu.Lock()
		defer c.verifies.mu.Unlock()
		if c.verifies.queue != nil && len(c.verifies.queue) > 0 {
			return errors.New("still queued")
		}
		return nil
	})
	releaseBatch()
	wg.Wait()
	for i, err := range errs {
		if (i == cancelled) != (err != nil) {
			t.Errorf("caller %d: %v", i, err)
		}
	}
}

// TestClientFallsBackWithoutBatchRoute: against a node that does not know
// the batch route, coalesced calls are sent singly, and the client stops
// trying batches.
func TestClientFallsBackWithoutBatchRoute(t *testing.T) {
	s := &coalesceServer{gate: make(chan struct{}), noBatch: true}
	srv := httptest.NewServer(s)
	defer srv.Close()
	release := sync.OnceFunc(func() { close(s.gate) })
	defer release() // before srv.Close, so a failed test does not hang
	c := New([]string{srv.URL})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.Verify(context.Background(), fmt.Sprintf("k%d", i), "1", "")
			if err == nil && v.Holder != fmt.Sprintf("k%d", i) {
				err = fmt.Errorf("answer of another call: %+v", v)
			}
			errs[i] = err
		}()
		if i < maxFlights {
			inFlight(t, s, i+1)
		}
	}
	queued(t, c, len(errs)-maxFlights)
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if s.batches.Load() != 1 || s.singles.Load() != int32(len(errs)) {
		t.Fatalf("%d batch and %d single requests, want 1 and %d", s.batches.Load(), s.singles.Load(), len(errs))
	}
	if time.Now().UnixNano() >= c.verifies.offUntil.Load() {
		t.Fatal("the client did not remember that the node has no batch route")
	}
}
