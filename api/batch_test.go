package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/internal/testutil"
)

// postRaw posts body and returns the status and the raw answer.
func postRaw(t *testing.T, url, path, body, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// singleVerify is what POST /v1/verify answers for c, as a batch result.
func singleVerify(t *testing.T, url string, c VerifyRequest) VerifyResult {
	t.Helper()
	status, data := postRaw(t, url, "/v1/verify", jsonOf(c), "")
	var r VerifyResult
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("verify %+v: %d %s", c, status, data)
	}
	r.Status = status
	return r
}

func verifyBatchOf(t *testing.T, url string, checks []VerifyRequest) (int, VerifyBatchResponse) {
	t.Helper()
	status, data := postRaw(t, url, "/v1/verify/batch", jsonOf(VerifyBatchRequest{Checks: checks}), "")
	var out VerifyBatchResponse
	if status == http.StatusOK {
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("verify batch: %v: %s", err, data)
		}
	}
	return status, out
}

// TestVerifyBatchItems: each check of a batch gets what the single route
// answers for it, in order, whatever mix of valid and invalid checks.
func TestVerifyBatchItems(t *testing.T) {
	nodes := startCluster(t, 1)
	url := nodes[0].url
	c := NewClient([]string{url})
	ctx := context.Background()
	g, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "alice", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, ReleaseRequest{Key: "k", Holder: "alice", Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	if g, err = c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "alice", TTL: "30s"}); err != nil {
		t.Fatal(err)
	}
	tok := g.Token
	cases := []struct {
		name   string
		check  VerifyRequest
		status int
		reason string
	}{
		{"current grant", VerifyRequest{Key: "k", Token: tok.String()}, 200, "ok"},
		{"malformed token", VerifyRequest{Key: "k", Token: "-1"}, 400, "malformed"},
		{"current grant and holder", VerifyRequest{Key: "k", Token: tok.String(), Holder: "alice"}, 200, "ok"},
		{"other holder", VerifyRequest{Key: "k", Token: tok.String(), Holder: "bob"}, 200, "holder_mismatch"},
		{"older token", VerifyRequest{Key: "k", Token: (tok - 1).String()}, 200, "superseded"},
		{"newer token", VerifyRequest{Key: "k", Token: (tok + 1).String()}, 200, "not_granted_yet"},
		{"unknown key", VerifyRequest{Key: "nope", Token: tok.String()}, 200, "unknown_key"},
		{"no key", VerifyRequest{Token: tok.String()}, 400, "malformed"},
		{"control character", VerifyRequest{Key: "a\x01", Token: tok.String()}, 400, "malformed"},
	}
	checks := make([]VerifyRequest, len(cases))
	for i, tc := range cases {
		checks[i] = tc.check
	}
	status, out := verifyBatchOf(t, url, checks)
	if status != 200 || len(out.Results) != len(cases) {
		t.Fatalf("batch: %d, %d results for %d checks", status, len(out.Results), len(cases))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := out.Results[i]
			if got.Status != tc.status || got.Reason != tc.reason || got.Allow != (tc.reason == "ok") {
				t.Errorf("result %+v, want status %d reason %s", got, tc.status, tc.reason)
			}
			if want := singleVerify(t, url, tc.check); got != want {
				t.Errorf("batch result %+v, single route %+v", got, want)
			}
		})
	}
}

// TestVerifyBatchEqualsSingle: for random checks against a fixed state, the
// batched verdicts are the single route's, in order.
func TestVerifyBatchEqualsSingle(t *testing.T) {
	nodes := startCluster(t, 1)
	url := nodes[0].url
	c := NewClient([]string{url}, WithBatching(false))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	var keys []string
	var toks []fence.Token
	for i := range 6 {
		key := fmt.Sprintf("k%d", i)
		holder := fmt.Sprintf("h%d", i%3)
		for range 1 + rng.IntN(3) { // several grants: superseded tokens
			g, err := c.Acquire(ctx, AcquireRequest{Key: key, Holder: holder, TTL: "1m"})
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, g.Token)
			if _, err := c.Release(ctx, ReleaseRequest{Key: key, Holder: holder, Token: g.Token}); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(2) == 0 {
			g, err := c.Acquire(ctx, AcquireRequest{Key: key, Holder: holder, TTL: "1m"})
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, g.Token)
		}
		keys = append(keys, key)
	}
	pick := func() VerifyRequest {
		key := keys[rng.IntN(len(keys))]
		if rng.IntN(8) == 0 {
			key = "unknown"
		}
		tok := toks[rng.IntN(len(toks))]
		text := (tok + fence.Token(rng.IntN(3)) - 1).String()
		if rng.IntN(10) == 0 {
			text = []string{"", "x", "-3", "0"}[rng.IntN(4)]
		}
		holder := []string{"", "h0", "h1", "h2"}[rng.IntN(4)]
		return VerifyRequest{Key: key, Token: text, Holder: holder}
	}
	for round := range 5 {
		checks := make([]VerifyRequest, 1+rng.IntN(40))
		for i := range checks {
			checks[i] = pick()
		}
		status, out := verifyBatchOf(t, url, checks)
		if status != 200 || len(out.Results) != len(checks) {
			t.Fatalf("round %d: %d, %d results for %d checks", round, status, len(out.Results), len(checks))
		}
		for i, ch := range checks {
			if want := singleVerify(t, url, ch); out.Results[i] != want {
				t.Fatalf("round %d, check %d %+v: batch %+v, single %+v", round, i, ch, out.Results[i], want)
			}
		}
	}
}

// batchStub is a node for the batch routes' whole-batch behaviour: it
// counts what reaches it and fails as told.
type batchStub struct {
	Node
	ready, leader bool
	err           error
	calls         atomic.Int32
}

func (n *batchStub) Ready() bool { return n.ready }
func (n *batchStub) Leader() (string, string) {
	if n.leader {
		return "n1", "127.0.0.1:1"
	}
	return "", ""
}
func (n *batchStub) VerifyBatch(_ context.Context, checks []cluster.VerifyCheck) ([]cluster.Verdict, error) {
	n.calls.Add(1)
	out := make([]cluster.Verdict, len(checks))
	for i := range out {
		out[i] = cluster.Verdict{Allow: n.err == nil, Reason: cluster.ReasonOK}
		if n.err != nil {
			out[i].Reason = cluster.ReasonUnavailable
		}
	}
	return out, n.err
}
func (n *batchStub) KeepaliveBatch(_ context.Context, holders []string) ([][]cluster.RenewedLease, error) {
	n.calls.Add(1)
	if n.err != nil {
		return nil, n.err
	}
	return make([][]cluster.RenewedLease, len(holders)), nil
}

// TestBatchLimitsAndWholeBatchErrors: a batch over a limit is refused with
// 400 and reaches no node; a batch the node cannot serve as a whole gets the
// single route's answer.
func TestBatchLimitsAndWholeBatchErrors(t *testing.T) {
	checks := func(n int) string {
		return jsonOf(VerifyBatchRequest{Checks: make([]VerifyRequest, n)})
	}
	holders := func(n int, h string) string {
		hs := make([]string, n)
		for i := range hs {
			hs[i] = h
		}
		return jsonOf(KeepaliveBatchRequest{Holders: hs})
	}
	cases := []struct {
		name       string
		node       *batchStub
		path, body string
		status     int
		code       string // of the whole answer, or of each result
		reached    bool
	}{
		{"no checks", &batchStub{ready: true}, "/v1/verify/batch", `{"checks":[]}`, 400, "bad_request", false},
		{"checks missing", &batchStub{ready: true}, "/v1/verify/batch", `{}`, 400, "bad_request", false},
		{"too many checks", &batchStub{ready: true}, "/v1/verify/batch", checks(MaxBatchItems + 1), 400, "bad_request", false},
		{"body too large", &batchStub{ready: true}, "/v1/verify/batch", `{"checks":[{"key":"` + strings.Repeat("a", MaxBodyBytes) + `","token":"1"}]}`, 400, "bad_request", false},
		{"unknown field", &batchStub{ready: true}, "/v1/verify/batch", `{"checks":[{"key":"k","token":"1","x":1}]}`, 400, "bad_request", false},
		{"no holders", &batchStub{ready: true}, "/v1/keepalive/batch", `{"holders":[]}`, 400, "bad_request", false},
		{"too many holders", &batchStub{ready: true}, "/v1/keepalive/batch", holders(MaxBatchItems+1, "h"), 400, "bad_request", false},
		{"only invalid holders", &batchStub{ready: true}, "/v1/keepalive/batch", `{"holders":["","a//b"]}`, 200, "bad_request", false},
		{"most checks", &batchStub{ready: true}, "/v1/verify/batch", strings.NewReplacer(`"key":""`, `"key":"k"`, `"token":""`, `"token":"4294967297"`).Replace(checks(MaxBatchItems)), 200, "", true},
		{"verify, not confirmed", &batchStub{ready: true, err: cluster.ErrBusy}, "/v1/verify/batch", `{"checks":[{"key":"k","token":"1"}]}`, 200, "", true},
		{"verify, no leader", &batchStub{}, "/v1/verify/batch", `{"checks":[{"key":"k","token":"1"}]}`, 200, "", false},
		{"keepalive, not confirmed", &batchStub{ready: true, err: cluster.ErrLeadershipLost}, "/v1/keepalive/batch", `{"holders":["h"]}`, 504, "outcome_unknown", true},
		{"keepalive, busy", &batchStub{ready: true, err: cluster.ErrBusy}, "/v1/keepalive/batch", `{"holders":["h"]}`, 503, "busy", true},
		{"keepalive, no leader", &batchStub{}, "/v1/keepalive/batch", `{"holders":["h"]}`, 503, "unavailable", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(NewServer(tc.node, hclog.NewNullLogger()))
			defer srv.Close()
			status, data := postRaw(t, srv.URL, tc.path, tc.body, "")
			if status != tc.status {
				t.Fatalf("status %d, want %d: %.300s", status, tc.status, data)
			}
			if reached := tc.node.calls.Load() > 0; reached != tc.reached {
				t.Errorf("reached the node: %v, want %v", reached, tc.reached)
			}
			if status != 200 {
				var e ErrorResponse
				if json.Unmarshal(data, &e) != nil || e.Code != tc.code {
					t.Errorf("answer %.300s, want code %s", data, tc.code)
				}
				return
			}
			var out struct {
				Results []struct {
					Status int
					Code   string
					Allow  bool
					Reason string
				}
			}
			if err := json.Unmarshal(data, &out); err != nil {
				t.Fatal(err)
			}
			for i, r := range out.Results {
				if r.Code != tc.code || (r.Allow && tc.node.err != nil) {
					t.Fatalf("result %d: %+v, want code %q", i, r, tc.code)
				}
				if tc.path == "/v1/verify/batch" && tc.node.err != nil && r.Reason != "unavailable" {
					t.Fatalf("result %d: %+v, want the verdict unavailable", i, r)
				}
			}
		})
	}
}

// TestKeepaliveBatchAuthorizationAndRateLimit: a holder the client may not
// act as gets its own 403 and is not renewed; the others are; and every
// holder counts against the rate limit.
func TestKeepaliveBatchAuthorizationAndRateLimit(t *testing.T) {
	tn := startSecureNode(t, cluster.Limits{}, ServerOptions{RateLimit: 0.001, RateBurst: 4})
	c := NewClient([]string{tn.url}, WithBearerToken(testClientToken), WithBatching(false))
	ctx := context.Background()
	if _, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "bob/w", TTL: "30s"}); err != nil {
		t.Fatal(err)
	}
	status, data := postRaw(t, tn.url, "/v1/keepalive/batch", `{"holders":["bob/w","alice","ops","bob"]}`, testClientToken)
	var out KeepaliveBatchResponse
	if status != 200 || json.Unmarshal(data, &out) != nil || len(out.Results) != 4 {
		t.Fatalf("%d %s", status, data)
	}
	want := []struct {
		status  int
		code    string
		renewed int
	}{{200, "", 1}, {403, "forbidden", 0}, {403, "forbidden", 0}, {200, "", 0}}
	for i, w := range want {
		r := out.Results[i]
		if r.Status != w.status || r.Code != w.code || len(r.Renewed) != w.renewed {
			t.Errorf("result %d: %+v, want %+v", i, r, w)
		}
		if r.Status == 403 && (r.Holder != "" || strings.Contains(r.Message, "bob/w")) {
			t.Errorf("result %d tells of another holder's state: %+v", i, r)
		}
	}
	// Burst 4: the acquire took one, the batch of four the rest and more.
	status, _ = postRaw(t, tn.url, "/v1/verify", `{"key":"k","token":"1"}`, testClientToken)
	if status != http.StatusTooManyRequests {
		t.Fatalf("a request after a batch that spent the burst: %d, want 429", status)
	}
}

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
	c := NewClient([]string{srv.URL})
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
	testutil.Eventually(t, 10*time.Second, func() error {
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
	testutil.Eventually(t, 10*time.Second, func() error {
		if got := s.singles.Load(); got < int32(n) {
			return fmt.Errorf("%d single calls in flight, want %d", got, n)
		}
		return nil
	})
}

// queued waits until n calls wait behind the ones in flight.
func queued(t *testing.T, c *Client, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() error {
		c.verifies.mu.Lock()
		defer c.verifies.mu.Unlock()
		live := 0
		for _, w := range c.verifies.queue {
			if !w.gone {
				live++
			}
		}
		if live < n {
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
	c := NewClient([]string{srv.URL})
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
	c := NewClient([]string{srv.URL})
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
	testutil.Eventually(t, 10*time.Second, func() error {
		if s.batches.Load() == 0 {
			return errors.New("batch not sent")
		}
		return nil
	})
	cancel()
	testutil.Eventually(t, 10*time.Second, func() error {
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
	c := NewClient([]string{srv.URL})
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

// TestBatchAgainstCutOffLeader: over real TCP, a leader cut off from its
// followers answers no batch from its own state: no verify of a live grant
// is allowed, and keepalives fail as a whole once it stepped down.
func TestBatchAgainstCutOffLeader(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, _ := leaderOf(t, nodes)
	c := NewClient([]string{lead.url})
	ctx := context.Background()
	g, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	checks := []VerifyRequest{{Key: "k", Token: g.Token.String()}, {Key: "k", Token: g.Token.String(), Holder: "h"}}
	if _, out := verifyBatchOf(t, lead.url, checks); len(out.Results) != 2 || !out.Results[0].Allow {
		t.Fatalf("before the cut: %+v", out)
	}
	for _, n := range nodes {
		if n != lead {
			n.node.Close()
			n.srv.Close()
		}
	}
	// At once, and until it knows it no longer leads.
	for {
		status, out := verifyBatchOf(t, lead.url, checks)
		if status != 200 || len(out.Results) != 2 {
			t.Fatalf("cut-off leader: %d %+v", status, out)
		}
		for _, r := range out.Results {
			if r.Allow || r.Reason != "unavailable" {
				t.Fatalf("cut-off leader answered %+v", r)
			}
		}
		if !lead.node.Ready() {
			break
		}
	}
	status, data := postRaw(t, lead.url, "/v1/keepalive/batch", `{"holders":["h","x"]}`, "")
	if status != http.StatusServiceUnavailable || !bytes.Contains(data, []byte(`"code"`)) {
		t.Fatalf("keepalive batch on a deposed leader: %d %s", status, data)
	}
}
