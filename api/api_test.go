package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/metrics"
)

// testNode is an in-process node with its HTTP API on a real socket.
type testNode struct {
	node *cluster.Node
	srv  *httptest.Server
	url  string
}

func startCluster(t testing.TB, size int) []*testNode {
	t.Helper()
	return startClusterWith(t, size, nil)
}

// startClusterWith is startCluster with each node's configuration edited
// by tweak first.
func startClusterWith(t testing.TB, size int, tweak func(*cluster.Config)) []*testNode {
	t.Helper()
	raftAddrs := testutil.FreeAddrs(t, size)
	var peers []cluster.Peer
	for i, a := range raftAddrs {
		peers = append(peers, cluster.Peer{ID: fmt.Sprintf("n%d", i+1), Addr: a})
	}
	base := t.TempDir()
	var out []*testNode
	for _, p := range peers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		log := hclog.New(&hclog.LoggerOptions{Name: p.ID, Level: hclog.Error})
		cfg := cluster.Config{
			ID: p.ID, DataDir: filepath.Join(base, p.ID), RaftBind: p.Addr, HTTPAdvertise: ln.Addr().String(), Peers: peers,
			HeartbeatTimeout: 800 * time.Millisecond, ElectionTimeout: 800 * time.Millisecond, LeaderLeaseTimeout: 400 * time.Millisecond,
			Logger: log,
		}
		if tweak != nil {
			tweak(&cfg)
		}
		n, err := cluster.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(NewServer(n, log))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		tn := &testNode{node: n, srv: srv, url: srv.URL}
		out = append(out, tn)
		t.Cleanup(func() { n.Close(); srv.Close() })
	}
	// Ready when a leader is ready and every node knows the leader's address.
	testutil.Eventually(t, 15*time.Second, func() error {
		for _, tn := range out {
			if _, h := tn.node.Leader(); h == "" {
				return errors.New("leader address not known everywhere")
			}
		}
		return nil
	})
	return out
}

func leaderOf(t testing.TB, nodes []*testNode) (lead *testNode, follower *testNode) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() error {
		lead, follower = nil, nil
		for _, tn := range nodes {
			if tn.node.Ready() {
				lead = tn
			} else {
				follower = tn
			}
		}
		if lead == nil || follower == nil {
			return errors.New("no ready leader yet")
		}
		return nil
	})
	return lead, follower
}

func post(t *testing.T, url, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: not JSON: %s", path, data)
	}
	return resp.StatusCode, m
}

func TestThroughFollower(t *testing.T) {
	nodes := startCluster(t, 3)
	_, fol := leaderOf(t, nodes)
	c := client.New([]string{fol.url}) // only the follower: everything is forwarded
	ctx := context.Background()
	g1, err := c.Acquire(ctx, client.AcquireRequest{Key: "db", Holder: "a", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if g1.Epoch != g1.Token.Epoch() || g1.Seq != 1 {
		t.Fatalf("grant %+v", g1)
	}
	// Retrying the same request id returns the same grant.
	again, err := c.Acquire(ctx, client.AcquireRequest{Key: "db", Holder: "a", TTL: "30s"})
	if err != nil || again.Token != g1.Token || !again.Renewed {
		t.Fatalf("retry: %+v %v", again, err)
	}
	_, err = c.Acquire(ctx, client.AcquireRequest{Key: "db", Holder: "b"})
	var apiErr *client.Error
	if !errors.Is(err, client.ErrHeld) || !errors.As(err, &apiErr) || apiErr.HeldBy != "a" || apiErr.RetryAfter == "" || apiErr.RetryAfter == "1s" {
		t.Fatalf("acquire of a held key: %v", err)
	}
	if _, err := c.Renew(ctx, "db", "a", g1.Token); err != nil {
		t.Fatal(err)
	}
	if ka, err := c.Keepalive(ctx, "a"); err != nil || len(ka.Renewed) != 1 {
		t.Fatalf("keepalive: %+v %v", ka, err)
	}
	if _, err := c.Renew(ctx, "db", "b", g1.Token); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("renew by non-holder: %v", err)
	}
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "db", Holder: "b", Token: g1.Token}); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("release by non-holder: %v", err)
	}
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "db", Holder: "a", Token: g1.Token}); err != nil {
		t.Fatal(err)
	}
	g2, err := c.Acquire(ctx, client.AcquireRequest{Key: "db", Holder: "b"})
	if err != nil || g2.Token <= g1.Token {
		t.Fatalf("second grant %+v %v", g2, err)
	}
	cases := []struct {
		tok, holder, reason string
		allow               bool
	}{
		{g2.Token.String(), "", "ok", true},
		{g2.Token.String(), "b", "ok", true},
		{g2.Token.String(), "a", "holder_mismatch", false},
		{g1.Token.String(), "", "superseded", false},
		{(g2.Token + 1).String(), "", "not_granted_yet", false},
		{"12abc", "", "malformed", false},
	}
	for _, tc := range cases {
		v, _ := c.Verify(ctx, "db", tc.tok, tc.holder)
		if v.Allow != tc.allow || v.Reason != tc.reason {
			t.Errorf("verify %s/%s = %+v, want %v %s", tc.tok, tc.holder, v, tc.allow, tc.reason)
		}
	}
	if v, _ := c.Verify(ctx, "nokey", g2.Token.String(), ""); v.Allow || v.Reason != "unknown_key" {
		t.Errorf("unknown key: %+v", v)
	}
	k, err := c.Key(ctx, "db")
	if err != nil || k.Holder != "b" || k.Token != g2.Token || k.State != "held" || k.LeaseRemaining == "" {
		t.Fatalf("key: %+v %v", k, err)
	}
	if _, err := c.Key(ctx, "nokey"); !errors.Is(err, client.ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
	if ks, err := c.Keys(ctx, "d", 0); err != nil || len(ks) != 1 {
		t.Fatalf("keys: %+v %v", ks, err)
	}
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "db", Force: true}); err != nil {
		t.Fatalf("force release: %v", err)
	}
	if v, _ := c.Verify(ctx, "db", g2.Token.String(), ""); v.Allow || v.Reason != "released" {
		t.Errorf("released: %+v", v)
	}
}

// Every bad-input rule is answered by 400 with a JSON error and changes
// nothing: the state after all of them equals the state before.
func TestBadInputChangesNothing(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, _ := leaderOf(t, nodes)
	c := client.New([]string{lead.url})
	ctx := context.Background()
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: "k", Holder: "h", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := c.Keys(ctx, "", 0)
	applied := lead.node.FSM().Applied()
	long := strings.Repeat("x", client.MaxKeyLen+1)
	tok := g.Token.String()
	bad := []struct{ path, body string }{
		{"/v1/acquire", `{"key":"a","holder":"h","extra":1}`},
		{"/v1/acquire", `{"key":"","holder":"h"}`},
		{"/v1/acquire", `{"key":"a","holder":""}`},
		{"/v1/acquire", `{"key":"` + long + `","holder":"h"}`},
		{"/v1/acquire", `{"key":"a","holder":"` + strings.Repeat("h", client.MaxHolderLen+1) + `"}`},
		{"/v1/acquire", `{"key":"a\u0007","holder":"h"}`},
		{"/v1/acquire", `{"key":"a","holder":"h\n"}`},
		{"/v1/acquire", "{\"key\":\"a\xff\",\"holder\":\"h\"}"},
		{"/v1/acquire", `{"key":"a","holder":"h","ttl":"10"}`},
		{"/v1/acquire", `{"key":"a","holder":"h","ttl":"1ms"}`},
		{"/v1/acquire", `{"key":"a","holder":"h","ttl":"48h"}`},
		{"/v1/acquire", `{"key":"a","holder":"h","ttl":"-1s"}`},
		{"/v1/acquire", `{"key":"a","holder":"h","wait":"1h"}`},
		{"/v1/acquire", `{"key":"a","holder":"h"} {"key":"b"}`},
		{"/v1/acquire", `not json`},
		{"/v1/acquire", `{"key":"a","holder":"h","request_id":"` + strings.Repeat("r", client.MaxRequestIDLen+1) + `"}`},
		{"/v1/acquire", `{"key":"a","holder":"h","pad":"` + strings.Repeat("p", client.MaxBodyBytes) + `"}`},
		{"/v1/release", `{"key":"k","holder":"h","token":` + tok + `}`},
		{"/v1/release", `{"key":"k","holder":"h","token":"0x1"}`},
		{"/v1/release", `{"key":"k","holder":"h","token":"-1"}`},
		{"/v1/release", `{"key":"k","holder":"h","token":" ` + tok + `"}`},
		{"/v1/release", `{"key":"k","holder":"h","token":"0` + tok + `"}`},
		{"/v1/release", `{"key":"k","holder":"h","token":"99999999999999999999"}`},
		{"/v1/release", `{"key":"k","holder":"h"}`},
		{"/v1/renew", `{"key":"k","holder":"h","token":"1e9"}`},
		{"/v1/keepalive", `{"holder":""}`},
		{"/v1/verify", `{"key":"k","token":"` + tok + `x"}`},
		{"/v1/verify", `{"key":"k","token":` + tok + `}`},
		{"/v1/verify", `{"key":"","token":"` + tok + `"}`},
		{"/v1/verify", `{"key":"k","token":"` + tok + `","bogus":true}`},
		{"/v1/cluster/join", `{"id":"","raft_addr":"x"}`},
	}
	for _, b := range bad {
		code, m := post(t, lead.url, b.path, b.body)
		if code != http.StatusBadRequest || m["code"] == "" || m["message"] == "" {
			t.Errorf("%s %.60q: status %d body %v", b.path, b.body, code, m)
		}
		if b.path == "/v1/verify" && (m["allow"] != false || m["reason"] != "malformed") {
			t.Errorf("verify %.60q: a refused verify must carry allow=false reason=malformed: %v", b.body, m)
		}
	}
	after, _ := c.Keys(ctx, "", 0)
	if !reflect.DeepEqual(stripLease(before), stripLease(after)) || lead.node.FSM().Applied() != applied {
		t.Fatalf("bad input changed state:\n%+v\n%+v (applied %d -> %d)", before, after, applied, lead.node.FSM().Applied())
	}
	resp, err := http.Get(lead.url + "/v1/acquire")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/acquire: %d", resp.StatusCode)
	}
}

func stripLease(ks []client.KeyInfo) []client.KeyInfo {
	out := append([]client.KeyInfo(nil), ks...)
	for i := range out {
		out[i].LeaseRemaining = ""
	}
	return out
}

func TestVerifyUnreachableIsRefusal(t *testing.T) {
	c := client.New([]string{"127.0.0.1:1"})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	v, err := c.Verify(ctx, "k", "4294967297", "")
	if v.Allow || v.Reason != "unavailable" || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%+v %v", v, err)
	}
}

func TestLeaseKeepsAliveAndEnds(t *testing.T) {
	nodes := startCluster(t, 3)
	c := client.New([]string{nodes[0].url, nodes[1].url, nodes[2].url})
	ctx := context.Background()
	l, err := c.Lease(ctx, "lease", "a", client.LeaseOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The lease outlives several TTLs thanks to its keepalive.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-l.Done():
			t.Fatalf("lease lost: %v", l.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if v, _ := c.Verify(ctx, "lease", l.Token().String(), "a"); !v.Allow {
		t.Fatalf("kept lease not allowed: %+v", v)
	}
	h := http.Header{}
	l.SetHeader(h)
	if h.Get("Fencing-Token") != l.Token().String() {
		t.Fatal("header not set")
	}
	// An operator ends the grant: the lease notices and closes Done.
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "lease", Force: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), client.ErrLeaseLost) {
			t.Fatalf("err = %v", l.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("lease did not notice its grant ended")
	}
	if err := l.Release(ctx); err != nil && !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("release of an ended lease: %v", err)
	}
}

func TestTokenIsNeverAJSONNumber(t *testing.T) {
	b, _ := json.Marshal(client.Grant{Token: fence.MaxToken})
	if !bytes.Contains(b, []byte(`"token":"9223372036854775807"`)) {
		t.Fatalf("%s", b)
	}
}

func TestBackupRestoreAndTransferOverHTTP(t *testing.T) {
	nodes := startCluster(t, 3)
	_, fol := leaderOf(t, nodes)
	c := client.New([]string{fol.url})
	ctx := context.Background()
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: "b", Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	data, meta, err := c.Backup(ctx)
	if err != nil || meta.Keys != 1 || len(data) == 0 {
		t.Fatalf("backup: %d bytes, %+v, %v", len(data), meta, err)
	}
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "b", Holder: "a", Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	g2, err := c.Acquire(ctx, client.AcquireRequest{Key: "b", Holder: "b"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Restore(ctx, data, 0, 0)
	for errors.Is(err, client.ErrUnknownOutcome) {
		// The documented answer when leadership moves during the restore:
		// it may have been applied. Its floor says whether it was; if not,
		// it is restored again.
		st, serr := c.Status(ctx)
		if serr != nil {
			t.Fatal(serr)
		}
		if st.EpochFloor > before.EpochFloor {
			t.Logf("restore outcome unknown, then seen applied (floor %d -> %d)", before.EpochFloor, st.EpochFloor)
			res, err = &client.RestoreResult{SameCluster: true}, nil
			break
		}
		res, err = c.Restore(ctx, data, 0, 0)
	}
	if err != nil || !res.SameCluster {
		t.Fatalf("restore: %+v %v", res, err)
	}
	g3, err := c.Acquire(ctx, client.AcquireRequest{Key: "b", Holder: "c"})
	if err != nil || g3.Token <= g2.Token {
		t.Fatalf("after restore: %+v %v (before: %s)", g3, err, g2.Token)
	}
	if _, err := c.Restore(ctx, []byte("junk"), 0, 0); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("junk restore: %v", err)
	}
	lead, _ := leaderOf(t, nodes)
	var target string
	for _, tn := range nodes {
		if tn != lead {
			target = tn.node.ID()
			break
		}
	}
	leader, err := c.Transfer(ctx, target)
	if err != nil || leader != target {
		t.Fatalf("transfer to %s: %q %v", target, leader, err)
	}
}

// A lease whose acquire waited longer than its TTL is not lost on arrival.
func TestLeaseAfterLongWait(t *testing.T) {
	nodes := startCluster(t, 3)
	c := client.New([]string{nodes[0].url, nodes[1].url, nodes[2].url})
	ctx := context.Background()
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "w", Holder: "first", TTL: "1500ms"}); err != nil {
		t.Fatal(err)
	}
	l, err := c.Lease(ctx, "w", "second", client.LeaseOptions{TTL: 600 * time.Millisecond, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	select {
	case <-l.Done():
		t.Fatalf("lease lost right after a long wait: %v", l.Err())
	case <-time.After(time.Second):
	}
}

func TestMetrics(t *testing.T) {
	if err := metrics.InstallRaftSink(); err != nil {
		t.Fatal(err)
	}
	nodes := startCluster(t, 3)
	lead, _ := leaderOf(t, nodes)
	c := client.New([]string{lead.url})
	ctx := context.Background()
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: "m", Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Verify(ctx, "m", g.Token.String(), "")
	_, _ = c.Acquire(ctx, client.AcquireRequest{Key: "m", Holder: "b"})
	resp, err := http.Get(lead.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"fenced_grants_total", `fenced_verifies_total{reason="ok",result="allow"}`, `fenced_refusals_total{reason="held"}`,
		`fenced_apply_seconds_bucket{command="acquire"`, "fenced_is_leader 1", "fenced_leadership_confirm_seconds",
		`fenced_http_requests_total{code="200",route="POST /v1/acquire"}`,
		`fenced_http_request_seconds_bucket{route="POST /v1/acquire",le="`,
		"fenced_raft_apply", // hashicorp/raft's own, through the go-metrics sink
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A client given every node learns the leader from any answer and sends
// later requests to it directly.
func TestClientLearnsLeader(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, fol := leaderOf(t, nodes)
	// The follower is reached through a proxy that counts what it is sent.
	target, err := url.Parse(fol.url)
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
	}))
	defer proxy.Close()
	c := client.New([]string{proxy.URL, lead.url})
	if _, err := c.Acquire(context.Background(), client.AcquireRequest{Key: "l", Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	before := sent.Load()
	for i := range 5 {
		if _, err := c.Acquire(context.Background(), client.AcquireRequest{Key: fmt.Sprintf("l%d", i), Holder: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := sent.Load() - before; n != 0 {
		t.Fatalf("%d later requests went to the follower listed first, want every one sent to the leader %s", n, lead.url)
	}
}
