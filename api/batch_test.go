package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
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
func singleVerify(t *testing.T, url string, c client.VerifyRequest) client.VerifyResult {
	t.Helper()
	status, data := postRaw(t, url, "/v1/verify", jsonOf(c), "")
	var r client.VerifyResult
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("verify %+v: %d %s", c, status, data)
	}
	r.Status = status
	return r
}

func verifyBatchOf(t *testing.T, url string, checks []client.VerifyRequest) (int, client.VerifyBatchResponse) {
	t.Helper()
	status, data := postRaw(t, url, "/v1/verify/batch", jsonOf(client.VerifyBatchRequest{Checks: checks}), "")
	var out client.VerifyBatchResponse
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
	c := client.New([]string{url})
	ctx := context.Background()
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: "k", Holder: "alice", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "k", Holder: "alice", Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	if g, err = c.Acquire(ctx, client.AcquireRequest{Key: "k", Holder: "alice", TTL: "30s"}); err != nil {
		t.Fatal(err)
	}
	tok := g.Token
	cases := []struct {
		name   string
		check  client.VerifyRequest
		status int
		reason string
	}{
		{"current grant", client.VerifyRequest{Key: "k", Token: tok.String()}, 200, "ok"},
		{"malformed token", client.VerifyRequest{Key: "k", Token: "-1"}, 400, "malformed"},
		{"current grant and holder", client.VerifyRequest{Key: "k", Token: tok.String(), Holder: "alice"}, 200, "ok"},
		{"other holder", client.VerifyRequest{Key: "k", Token: tok.String(), Holder: "bob"}, 200, "holder_mismatch"},
		{"older token", client.VerifyRequest{Key: "k", Token: (tok - 1).String()}, 200, "superseded"},
		{"newer token", client.VerifyRequest{Key: "k", Token: (tok + 1).String()}, 200, "not_granted_yet"},
		{"unknown key", client.VerifyRequest{Key: "nope", Token: tok.String()}, 200, "unknown_key"},
		{"no key", client.VerifyRequest{Token: tok.String()}, 400, "malformed"},
		{"control character", client.VerifyRequest{Key: "a\x01", Token: tok.String()}, 400, "malformed"},
	}
	checks := make([]client.VerifyRequest, len(cases))
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
	c := client.New([]string{url}, client.WithBatching(false))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	var keys []string
	var toks []fence.Token
	for i := range 6 {
		key := fmt.Sprintf("k%d", i)
		holder := fmt.Sprintf("h%d", i%3)
		for range 1 + rng.IntN(3) { // several grants: superseded tokens
			g, err := c.Acquire(ctx, client.AcquireRequest{Key: key, Holder: holder, TTL: "1m"})
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, g.Token)
			if _, err := c.Release(ctx, client.ReleaseRequest{Key: key, Holder: holder, Token: g.Token}); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(2) == 0 {
			g, err := c.Acquire(ctx, client.AcquireRequest{Key: key, Holder: holder, TTL: "1m"})
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, g.Token)
		}
		keys = append(keys, key)
	}
	pick := func() client.VerifyRequest {
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
		return client.VerifyRequest{Key: key, Token: text, Holder: holder}
	}
	for round := range 5 {
		checks := make([]client.VerifyRequest, 1+rng.IntN(40))
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
func (n *batchStub) KeepaliveBatch(_ context.Context, holders []string, _ func(string) bool) ([][]cluster.RenewedLease, error) {
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
		return jsonOf(client.VerifyBatchRequest{Checks: make([]client.VerifyRequest, n)})
	}
	holders := func(n int, h string) string {
		hs := make([]string, n)
		for i := range hs {
			hs[i] = h
		}
		return jsonOf(client.KeepaliveBatchRequest{Holders: hs})
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
		{"too many checks", &batchStub{ready: true}, "/v1/verify/batch", checks(client.MaxBatchItems + 1), 400, "bad_request", false},
		{"body too large", &batchStub{ready: true}, "/v1/verify/batch", `{"checks":[{"key":"` + strings.Repeat("a", client.MaxBodyBytes) + `","token":"1"}]}`, 400, "bad_request", false},
		{"unknown field", &batchStub{ready: true}, "/v1/verify/batch", `{"checks":[{"key":"k","token":"1","x":1}]}`, 400, "bad_request", false},
		{"no holders", &batchStub{ready: true}, "/v1/keepalive/batch", `{"holders":[]}`, 400, "bad_request", false},
		{"too many holders", &batchStub{ready: true}, "/v1/keepalive/batch", holders(client.MaxBatchItems+1, "h"), 400, "bad_request", false},
		{"only invalid holders", &batchStub{ready: true}, "/v1/keepalive/batch", `{"holders":["","a//b"]}`, 200, "bad_request", false},
		{"most checks", &batchStub{ready: true}, "/v1/verify/batch", strings.NewReplacer(`"key":""`, `"key":"k"`, `"token":""`, `"token":"4294967297"`).Replace(checks(client.MaxBatchItems)), 200, "", true},
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
				var e client.ErrorResponse
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
	c := client.New([]string{tn.url}, client.WithBearerToken(testClientToken), client.WithBatching(false))
	ctx := context.Background()
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "k", Holder: "bob/w", TTL: "30s"}); err != nil {
		t.Fatal(err)
	}
	status, data := postRaw(t, tn.url, "/v1/keepalive/batch", `{"holders":["bob/w","alice","ops","bob"]}`, testClientToken)
	var out client.KeepaliveBatchResponse
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

// TestBatchAgainstCutOffLeader: over real TCP, a leader cut off from its
// followers answers no batch from its own state once its last quorum
// contact is older than a renewal may rest on (250 ms: no newer leader can
// serve before 300 ms): no verify asked later is allowed, and keepalives
// fail as a whole once it stepped down.
func TestBatchAgainstCutOffLeader(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, _ := leaderOf(t, nodes)
	c := client.New([]string{lead.url})
	ctx := context.Background()
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: "k", Holder: "h", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	checks := []client.VerifyRequest{{Key: "k", Token: g.Token.String()}, {Key: "k", Token: g.Token.String(), Holder: "h"}}
	if _, out := verifyBatchOf(t, lead.url, checks); len(out.Results) != 2 || !out.Results[0].Allow {
		t.Fatalf("before the cut: %+v", out)
	}
	for _, n := range nodes {
		if n != lead {
			n.node.Close()
			n.srv.Close()
		}
	}
	cut := time.Now()
	// From 250 ms after the cut on, and until it knows it no longer leads.
	for {
		asked := time.Now()
		status, out := verifyBatchOf(t, lead.url, checks)
		if status != 200 || len(out.Results) != 2 {
			t.Fatalf("cut-off leader: %d %+v", status, out)
		}
		for _, r := range out.Results {
			if asked.Sub(cut) > 250*time.Millisecond && (r.Allow || r.Reason != "unavailable") {
				t.Fatalf("cut-off leader answered %+v to a batch asked %v after the cut", r, asked.Sub(cut))
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
