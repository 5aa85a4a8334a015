package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/internal/testutil"
)

const (
	testClientToken = "client-token-0123456789"
	testAdminToken  = "admin-token-0123456789"
)

// startSecureNode starts a single-node cluster whose API has the given
// security options, with tokens for bob (client) and ops (admin).
func startSecureNode(t *testing.T, limits cluster.Limits, o ServerOptions) *testNode {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(testClientToken+" client bob\n"+testAdminToken+" admin ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	o.Tokens = tokens
	return serveNode(t, limits, o)
}

// serveNode starts a single-node cluster whose API has the security
// options o, and waits until it serves.
func serveNode(t *testing.T, limits cluster.Limits, o ServerOptions) *testNode {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	tn := startNode(t, limits, func(n *cluster.Node, log hclog.Logger) *httptest.Server {
		srv.Config.Handler = NewSecureServer(n, log, o)
		srv.Start()
		return srv
	})
	return tn
}

// startNode starts a single-node cluster, serves its API with the server
// serve returns, and waits until the node serves.
func startNode(t *testing.T, limits cluster.Limits, serve func(*cluster.Node, hclog.Logger) *httptest.Server) *testNode {
	t.Helper()
	addr := testutil.FreeAddrs(t, 1)[0]
	log := hclog.New(&hclog.LoggerOptions{Name: "n1", Level: hclog.Error})
	n, err := cluster.New(cluster.Config{
		ID: "n1", DataDir: t.TempDir(), RaftBind: addr, Bootstrap: true, Limits: limits,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond, LeaderLeaseTimeout: 150 * time.Millisecond,
		Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(n, log)
	t.Cleanup(func() { srv.Close(); n.Close() })
	testutil.Eventually(t, 15*time.Second, func() error {
		if !n.Ready() {
			return errors.New("not ready")
		}
		return nil
	})
	return &testNode{node: n, srv: srv, url: srv.URL}
}

// send posts (or gets, without a body) with an optional bearer token and
// returns the status and the error body.
func send(t *testing.T, url, method, path, body, token string, hdr ...string) (int, client.ErrorResponse, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var er client.ErrorResponse
	if resp.StatusCode/100 != 2 {
		if err := decodeLoose(data, &er); err != nil {
			t.Fatalf("%s %s: %d, body not JSON: %s", method, path, resp.StatusCode, data)
		}
	}
	return resp.StatusCode, er, resp.Header
}

func decodeLoose(data []byte, v any) error {
	return json.Unmarshal(data, v)
}

// TestRoleTable checks every route against every role: what the roles table
// of docs/SECURITY.md says each may do.
func TestRoleTable(t *testing.T) {
	tn := startSecureNode(t, cluster.Limits{}, ServerOptions{})
	tn.srv.Config.Handler.(*Server).EnableConsole() // as fenced does unless --ui=false
	type route struct {
		method, path, body string
		need               access
	}
	// Bodies an allowed caller gets past authorization with, without
	// hurting the single node (membership calls are malformed on purpose).
	routes := []route{
		{"POST", "/v1/acquire", `{"key":"k","holder":"bob/1","ttl":"1m"}`, accessClient},
		{"POST", "/v1/acquire/multi", `{"keys":["k9"],"holder":"bob/1","ttl":"1m"}`, accessClient},
		{"POST", "/v1/renew", `{"key":"k","holder":"bob/1","token":"1"}`, accessClient},
		{"POST", "/v1/keepalive", `{"holder":"bob/1"}`, accessClient},
		{"POST", "/v1/release", `{"key":"nope","holder":"bob/1","token":"1"}`, accessClient},
		{"POST", "/v1/release/multi", `{"keys":[{"key":"nope","token":"1"}],"holder":"bob/1"}`, accessClient},
		{"POST", "/v1/renew/multi", `{"keys":[{"key":"nope","token":"1"}],"holder":"bob/1"}`, accessClient},
		{"POST", "/v1/verify", `{"key":"k","token":"1"}`, accessClient},
		{"POST", "/v1/verify/batch", `{"checks":[{"key":"k","token":"1"}]}`, accessClient},
		{"POST", "/v1/keepalive/batch", `{"holders":["bob/1"]}`, accessClient},
		{"GET", "/v1/keys", "", accessClient},
		{"GET", "/v1/keys/k", "", accessClient},
		{"GET", "/v1/watch?from=not-an-index", "", accessClient}, // refused after authorization: no stream
		{"GET", "/v1/watch/index", "", accessClient},
		{"GET", "/v1/cluster", "", accessStatus},
		{"POST", "/v1/cluster/join", `{}`, accessMember},
		{"POST", "/v1/cluster/remove", `{}`, accessMember},
		{"POST", "/v1/cluster/transfer", `{"id":"no-such-member"}`, accessAdmin},
		{"POST", "/v1/acl/check", `{"identity":"bob","right":"lock","key":"k"}`, accessAdmin},
		{"GET", "/v1/snapshot", "", accessAdmin},
		{"POST", "/v1/snapshot/restore", "not a backup", accessAdmin},
		{"POST", "/v1/release", `{"key":"nope","force":true}`, accessAdmin}, // force-release
		{"GET", "/healthz", "", accessOpen},
		{"GET", "/readyz", "", accessOpen},
		{"GET", "/metrics", "", accessOpen},
		{"GET", "/v1/openapi.yaml", "", accessOpen},
		{"GET", "/v1/signing-keys", "", accessOpen},
		{"GET", "/ui/", "", accessOpen}, // the page; what it reads needs a token
		{"POST", "/v1/signing-keys/rotate", `{"overlap":"forever"}`, accessAdmin},
	}
	covered := map[string]bool{}
	for _, r := range routes {
		req, _ := http.NewRequest(r.method, "http://x"+r.path, nil)
		_, pattern := tn.srv.Config.Handler.(*Server).mux.Handler(req)
		covered[pattern] = true
		for _, who := range []struct {
			name, token string
			role        Role
		}{{"anonymous", "", ""}, {"client", testClientToken, RoleClient}, {"admin", testAdminToken, RoleAdmin}} {
			status, er, _ := send(t, tn.url, r.method, r.path, r.body, who.token)
			var allowed bool
			switch r.need {
			case accessOpen:
				allowed = true
			case accessStatus, accessClient:
				allowed = who.role != ""
			case accessMember, accessAdmin:
				allowed = who.role == RoleAdmin
			}
			denied := status == http.StatusUnauthorized || status == http.StatusForbidden
			if allowed == denied {
				t.Errorf("%s %s as %s: %d %s (%s), allowed=%v", r.method, r.path, who.name, status, er.Code, er.Message, allowed)
			}
			if who.role == "" && !allowed && (status != http.StatusUnauthorized || er.Code != "unauthenticated") {
				t.Errorf("%s %s anonymously: %d %s, want 401 unauthenticated", r.method, r.path, status, er.Code)
			}
			if who.role == RoleClient && !allowed && (status != http.StatusForbidden || er.Code != "forbidden") {
				t.Errorf("%s %s as client: %d %s, want 403 forbidden", r.method, r.path, status, er.Code)
			}
		}
	}
	for pattern := range routeAccess {
		if !covered[pattern] && pattern != "/" {
			t.Errorf("route %s is not in the role table test", pattern)
		}
	}
}

// TestForgedIdentityIgnored sends the headers a forwarding node sends,
// without a peer certificate: the identity is ignored and the request is
// authenticated by its own credentials, if any.
func TestForgedIdentityIgnored(t *testing.T) {
	tn := startSecureNode(t, cluster.Limits{}, ServerOptions{})
	forged := encodeIdentity(Identity{Name: "root", Role: RoleAdmin})
	status, er, _ := send(t, tn.url, "POST", "/v1/cluster/transfer", `{}`, "", forwardedHeader, "1", identityHeader, forged)
	if status != http.StatusUnauthorized || er.Code != "unauthenticated" {
		t.Fatalf("forged identity without credentials: %d %s, want 401", status, er.Code)
	}
	status, er, _ = send(t, tn.url, "POST", "/v1/release", `{"key":"k","force":true}`, testClientToken, forwardedHeader, "1", identityHeader, forged)
	if status != http.StatusForbidden || er.Code != "forbidden" {
		t.Fatalf("forged admin identity with a client token: %d %s, want 403", status, er.Code)
	}
}

// TestBadTokensFile checks the tokens file format's errors.
func TestBadTokensFile(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"short client bob\n", "shorter than"},
		{"0123456789abcdefgh superuser bob\n", "is not client or admin"},
		{"0123456789abcdefgh client\n", "want \"TOKEN ROLE NAME\""},
		{"0123456789abcdefgh client a\n0123456789abcdefgh admin b\n", "given twice"},
		{"0123456789abcdefgh client bob/\n", "not a valid holder name"},
		{"0123456789abcdefgh client bob/../ops\n", "not a valid holder name"},
	} {
		if _, err := ParseTokens(strings.NewReader(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.text, err, tc.want)
		}
	}
	m, err := ParseTokens(strings.NewReader("# comment\n\n  0123456789abcdefgh   admin   ops  \n"))
	if err != nil || len(m) != 1 {
		t.Fatalf("valid file: %v %v", m, err)
	}
}

// TestRateLimit gives each client identity 5 requests at once and 5 per
// second: the sixth at once is refused with 429 and a retry hint, another
// identity is not affected, and open endpoints are never limited.
func TestRateLimit(t *testing.T) {
	tn := startSecureNode(t, cluster.Limits{}, ServerOptions{RateLimit: 5, RateBurst: 5})
	for i := 0; i < 5; i++ {
		if status, er, _ := send(t, tn.url, "GET", "/v1/cluster", "", testClientToken); status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, status, er.Code)
		}
	}
	status, er, hdr := send(t, tn.url, "GET", "/v1/cluster", "", testClientToken)
	if status != http.StatusTooManyRequests || er.Code != "rate_limited" || er.RetryAfter == "" || hdr.Get("Retry-After") == "" {
		t.Fatalf("sixth request: %d %+v %v", status, er, hdr)
	}
	if d, err := time.ParseDuration(er.RetryAfter); err != nil || d <= 0 || d > time.Second {
		t.Fatalf("retry_after %q", er.RetryAfter)
	}
	if status, er, _ := send(t, tn.url, "GET", "/v1/cluster", "", testAdminToken); status != http.StatusOK {
		t.Fatalf("another identity: %d %s", status, er.Code)
	}
	for i := 0; i < 20; i++ {
		if status, _, _ := send(t, tn.url, "GET", "/healthz", "", testClientToken); status != http.StatusOK {
			t.Fatalf("healthz was limited: %d", status)
		}
	}
	c := client.New([]string{tn.url}, client.WithBearerToken(testClientToken))
	if _, err := c.Status(context.Background()); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("the client's error: %v, want ErrRateLimited", err)
	}
}

// TestKeyAndWaiterLimits checks the per-holder key limit and the per-key
// waiter limit: refusals are 429 with their codes and a retry hint, and
// change nothing.
func TestKeyAndWaiterLimits(t *testing.T) {
	tn := startSecureNode(t, cluster.Limits{MaxKeysPerHolder: 2, MaxWaitersPerKey: 1}, ServerOptions{})
	ctx := context.Background()
	admin := client.New([]string{tn.url}, client.WithBearerToken(testAdminToken))
	bob := client.New([]string{tn.url}, client.WithBearerToken(testClientToken))
	g1, err := bob.Acquire(ctx, client.AcquireRequest{Key: "k1", Holder: "bob", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Acquire(ctx, client.AcquireRequest{Key: "k2", Holder: "bob", TTL: "1m"}); err != nil {
		t.Fatal(err)
	}
	before, _ := admin.Keys(ctx, "", 0)
	status, er, hdr := send(t, tn.url, "POST", "/v1/acquire", `{"key":"k3","holder":"bob","ttl":"1m"}`, testClientToken)
	if status != http.StatusTooManyRequests || er.Code != "too_many_keys" || er.RetryAfter == "" || hdr.Get("Retry-After") == "" {
		t.Fatalf("third key: %d %+v", status, er)
	}
	if _, err := bob.Acquire(ctx, client.AcquireRequest{Key: "k3", Holder: "bob", TTL: "1m"}); !errors.Is(err, client.ErrTooManyKeys) {
		t.Fatalf("client error: %v, want ErrTooManyKeys", err)
	}
	// Renewing what it holds is not a new key; another holder has its own count.
	if g, err := bob.Acquire(ctx, client.AcquireRequest{Key: "k1", Holder: "bob", TTL: "1m"}); err != nil || !g.Renewed {
		t.Fatalf("renewal at the limit: %+v %v", g, err)
	}
	if _, err := bob.Acquire(ctx, client.AcquireRequest{Key: "k3", Holder: "bob/other", TTL: "1m"}); err != nil {
		t.Fatalf("another holder: %v", err)
	}
	after, _ := admin.Keys(ctx, "", 0)
	if len(after) != len(before)+1 {
		t.Fatalf("keys before %d after %d: a refused acquire changed the state", len(before), len(after))
	}

	// One waiter may queue for k1; the second is refused at once.
	waited := make(chan error, 1)
	go func() {
		_, err := admin.Acquire(ctx, client.AcquireRequest{Key: "k1", Holder: "ops/w1", TTL: "1m", Wait: "30s"})
		waited <- err
	}()
	testutil.Eventually(t, 5*time.Second, func() error {
		if st := tn.node.Status(); st.Waiters != 1 {
			return fmt.Errorf("%d waiters", st.Waiters)
		}
		return nil
	})
	start := time.Now()
	_, err = admin.Acquire(ctx, client.AcquireRequest{Key: "k1", Holder: "ops/w2", TTL: "1m", Wait: "30s"})
	if !errors.Is(err, client.ErrTooManyWaiters) || time.Since(start) > 5*time.Second {
		t.Fatalf("second waiter: %v after %v, want ErrTooManyWaiters at once", err, time.Since(start))
	}
	if _, err := bob.Release(ctx, client.ReleaseRequest{Key: "k1", Holder: "bob", Token: g1.Token}); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
}

// TestSlowBody checks that a client that stops sending its body is cut off
// after the body timeout, and that a waiting acquire, which takes longer
// than that timeout once its body is in, is not.
func TestSlowBody(t *testing.T) {
	tn := startSecureNode(t, cluster.Limits{}, ServerOptions{BodyTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(tn.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"key\":", testAdminToken)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the slow client: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("slow body: %d, want 408", resp.StatusCode)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the slow client held the connection for %v", d)
	}

	ctx := context.Background()
	admin := client.New([]string{tn.url}, client.WithBearerToken(testAdminToken))
	if _, err := admin.Acquire(ctx, client.AcquireRequest{Key: "busy", Holder: "ops/a", TTL: "1m"}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = admin.Acquire(ctx, client.AcquireRequest{Key: "busy", Holder: "ops/b", TTL: "1m", Wait: "1500ms"})
	if !errors.Is(err, client.ErrHeld) || time.Since(start) < time.Second {
		t.Fatalf("waiting acquire: %v after %v, want held after its wait", err, time.Since(start))
	}
}

// TestIdentityMayActAs pins the holder binding.
func TestIdentityMayActAs(t *testing.T) {
	bob := Identity{Name: "bob", Role: RoleClient}
	for holder, want := range map[string]bool{"bob": true, "bob/1": true, "bob/a/b": true, "bobby": false, "alice": false, "": false, "/bob": false} {
		if got := bob.MayActAs(holder); got != want {
			t.Errorf("bob as %q: %v", holder, got)
		}
	}
	if !(Identity{Name: "ops", Role: RoleAdmin}).MayActAs("anyone") {
		t.Error("an admin may act as any holder")
	}
	if (Identity{}).MayActAs("") {
		t.Error("an anonymous identity may not act as the empty holder")
	}
	id, err := decodeIdentity(encodeIdentity(Identity{Name: "a b&c=d", Role: RoleClient}))
	if err != nil || !reflect.DeepEqual(id, Identity{Name: "a b&c=d", Role: RoleClient, Method: "forwarded"}) {
		t.Fatalf("identity header round trip: %+v %v", id, err)
	}
}

// TestHolderPathSegments: a holder name is a path of segments under a
// namespace; empty segments, "." and ".." are refused with 400 on every
// route that names a holder, for admins and clients alike, so "bob/../alice"
// can never mean alice to one reader and bob's namespace to another.
func TestHolderPathSegments(t *testing.T) {
	tn := startSecureNode(t, cluster.Limits{}, ServerOptions{})
	bad := []string{"bob/../alice", "bob/", "bob//w", "bob/.", "bob/./w", "./bob", "../bob", "/bob", "..", "."}
	for _, h := range bad {
		for _, tc := range []struct{ path, body, token string }{
			{"/v1/acquire", fmt.Sprintf(`{"key":"k","holder":%q,"ttl":"10s"}`, h), testClientToken},
			{"/v1/acquire", fmt.Sprintf(`{"key":"k","holder":%q,"ttl":"10s"}`, h), testAdminToken},
			{"/v1/renew", fmt.Sprintf(`{"key":"k","holder":%q,"token":"1"}`, h), testClientToken},
			{"/v1/keepalive", fmt.Sprintf(`{"holder":%q}`, h), testAdminToken},
			{"/v1/release", fmt.Sprintf(`{"key":"k","holder":%q,"token":"1"}`, h), testAdminToken},
		} {
			status, er, _ := send(t, tn.url, "POST", tc.path, tc.body, tc.token)
			if status != http.StatusBadRequest || er.Code != "bad_request" {
				t.Errorf("%s holder %q: %d %s (%s), want 400 bad_request", tc.path, h, status, er.Code, er.Message)
			}
		}
	}
	// A verify naming such a holder is refused too (a verdict, never allow).
	status, er, _ := send(t, tn.url, "POST", "/v1/verify", `{"key":"k","token":"1","holder":"bob/../alice"}`, testClientToken)
	if status != http.StatusBadRequest {
		t.Errorf("verify with holder bob/../alice: %d %s", status, er.Code)
	}
	if ks, _ := client.New([]string{tn.url}, client.WithBearerToken(testAdminToken)).Keys(context.Background(), "", 0); len(ks) != 0 {
		t.Fatalf("refused acquires left keys: %+v", ks)
	}
	for _, h := range []string{"bob", "bob/w", "bob/w.1/..x", "bob/...", "ops/a b"} {
		if status, er, _ := send(t, tn.url, "POST", "/v1/acquire", fmt.Sprintf(`{"key":%q,"holder":%q,"ttl":"10s"}`, h, h), testAdminToken); status != http.StatusOK {
			t.Errorf("holder %q: %d %s (%s), want 200", h, status, er.Code, er.Message)
		}
	}
}

// TestIdentityLimits: the key and waiter limits count everything one
// authenticated identity holds or waits for, whatever holder names under its
// namespace it uses, so bob cannot grow the cluster's state by inventing
// holders.
func TestIdentityLimits(t *testing.T) {
	tn := startSecureNode(t, cluster.Limits{MaxKeysPerHolder: 100, MaxKeysPerIdentity: 2, MaxWaitersPerIdentity: 1}, ServerOptions{})
	ctx := context.Background()
	admin := client.New([]string{tn.url}, client.WithBearerToken(testAdminToken))
	bob := client.New([]string{tn.url}, client.WithBearerToken(testClientToken))
	var grants []client.Grant
	for i, h := range []string{"bob/a", "bob/b"} {
		g, err := bob.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprint("k", i), Holder: h, TTL: "1m"})
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, *g)
	}
	status, er, hdr := send(t, tn.url, "POST", "/v1/acquire", `{"key":"k2","holder":"bob/c","ttl":"1m"}`, testClientToken)
	if status != http.StatusTooManyRequests || er.Code != "too_many_keys" || !strings.Contains(er.Message, "bob") || hdr.Get("Retry-After") == "" {
		t.Fatalf("bob's third key under a new holder: %d %+v, want 429 too_many_keys naming bob", status, er)
	}
	// The admin is not bob: its own holders are not counted against him,
	// and renewing what bob holds is not a new key.
	if _, err := admin.Acquire(ctx, client.AcquireRequest{Key: "k2", Holder: "ops/c", TTL: "1m"}); err != nil {
		t.Fatalf("admin: %v", err)
	}
	if g, err := bob.Acquire(ctx, client.AcquireRequest{Key: "k0", Holder: "bob/a", TTL: "1m"}); err != nil || !g.Renewed {
		t.Fatalf("renewal at the limit: %+v %v", g, err)
	}

	// One waiter of bob's may queue; a second, for another key under another
	// holder, is refused at once (bob is under his key limit by then).
	if _, err := bob.Release(ctx, client.ReleaseRequest{Key: "k1", Holder: "bob/b", Token: grants[1].Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Acquire(ctx, client.AcquireRequest{Key: "busy1", Holder: "ops/x", TTL: "1m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Acquire(ctx, client.AcquireRequest{Key: "busy2", Holder: "ops/x", TTL: "1m"}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = bob.Acquire(wctx, client.AcquireRequest{Key: "busy1", Holder: "bob/a", TTL: "1m", Wait: "30s"})
	}()
	testutil.Eventually(t, 5*time.Second, func() error {
		if st := tn.node.Status(); st.Waiters != 1 {
			return fmt.Errorf("%d waiters", st.Waiters)
		}
		return nil
	})
	status, er, _ = send(t, tn.url, "POST", "/v1/acquire", `{"key":"busy2","holder":"bob/other","ttl":"1m","wait":"30s"}`, testClientToken)
	if status != http.StatusTooManyRequests || er.Code != "too_many_waiters" || !strings.Contains(er.Message, "bob") {
		t.Fatalf("bob's second waiter: %d %+v, want 429 too_many_waiters naming bob", status, er)
	}
	cancel()
	<-done
}
