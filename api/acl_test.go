package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
)

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
	opsToken   = "ops-token-0123456789ab"
)

// testACL gives alice and bob their own prefixes, lets everyone verify
// anything, and lets bob read (not lock) shared/.
const testACL = `alice lock,read alice/
bob   lock,read bob/
bob   read      shared/
*     verify    ""
`

// aclTestNode is a node with tokens and a key ACL file.
type aclTestNode struct {
	*testNode
	path string // of the ACL file, to rewrite it
	acl  *ACL
}

// aclNode is a single-node cluster with tokens for alice and bob (clients)
// and ops (admin), and the ACL file rules.
func aclNode(t *testing.T, rules string) aclTestNode {
	t.Helper()
	dir := t.TempDir()
	tokens, aclPath := filepath.Join(dir, "tokens"), filepath.Join(dir, "acl")
	if err := os.WriteFile(tokens, []byte(aliceToken+" client alice\n"+bobToken+" client bob\n"+opsToken+" admin ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(aclPath, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	tk, err := LoadTokens(tokens)
	if err != nil {
		t.Fatal(err)
	}
	a, err := LoadACL(aclPath)
	if err != nil {
		t.Fatal(err)
	}
	tn := serveNode(t, cluster.Limits{}, ServerOptions{Tokens: tk, ACL: a})
	return aclTestNode{testNode: tn, path: aclPath, acl: a}
}

func verifyBatchOfToken(t *testing.T, url string, checks []client.VerifyRequest, token string) (int, client.VerifyBatchResponse) {
	t.Helper()
	status, data := postRaw(t, url, "/v1/verify/batch", jsonOf(client.VerifyBatchRequest{Checks: checks}), token)
	var out client.VerifyBatchResponse
	if status == http.StatusOK {
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("verify batch: %v: %s", err, data)
		}
	}
	return status, out
}

func forbidden(err error, right, key string) bool {
	var ae *client.Error
	return errors.As(err, &ae) && ae.Status == http.StatusForbidden && errors.Is(err, client.ErrForbidden) &&
		strings.Contains(ae.Message, right) && strings.Contains(ae.Message, key)
}

// TestACLKeepsTeamsApart: with an ACL file, bob cannot lock, wait for,
// release or read alice's keys (403 naming the right and the key, nothing
// changed), his listings and watches never show them, and what no rule
// allows is refused; verify follows its own rule; an admin may do anything.
func TestACLKeepsTeamsApart(t *testing.T) {
	tn := aclNode(t, testACL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := client.New([]string{tn.url}, client.WithBearerToken(aliceToken))
	bob := client.New([]string{tn.url}, client.WithBearerToken(bobToken))
	ops := client.New([]string{tn.url}, client.WithBearerToken(opsToken))

	ga, err := alice.Acquire(ctx, client.AcquireRequest{Key: "alice/db", Holder: "alice", TTL: "1m", Value: "alice's secret"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Acquire(ctx, client.AcquireRequest{Key: "bob/db", Holder: "bob", TTL: "1m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.Acquire(ctx, client.AcquireRequest{Key: "shared/x", Holder: "ops", TTL: "1m"}); err != nil {
		t.Fatal(err)
	}

	// Lock: refused, with and without waiting, and nothing changed.
	for _, req := range []client.AcquireRequest{
		{Key: "alice/db", Holder: "bob", TTL: "24h"},
		{Key: "alice/other", Holder: "bob", TTL: "1m", Wait: "1s"},
		{Key: "shared/x", Holder: "bob", TTL: "1m"}, // read is not lock
		{Key: "nobody/x", Holder: "bob"},            // no rule at all
	} {
		if _, err := bob.Acquire(ctx, req); !forbidden(err, "lock", req.Key) {
			t.Errorf("bob acquires %s: %v; want 403 naming lock and the key", req.Key, err)
		}
	}
	if _, err := bob.Release(ctx, client.ReleaseRequest{Key: "alice/db", Holder: "bob", Token: ga.Token}); !forbidden(err, "lock", "alice/db") {
		t.Errorf("bob releases alice/db: %v", err)
	}
	if k, err := alice.Key(ctx, "alice/db"); err != nil || k.Holder != "alice" || k.Token != ga.Token {
		t.Fatalf("alice/db after bob's attempts: %+v %v", k, err)
	}
	if ks, err := ops.Keys(ctx, "alice/", 0); err != nil || len(ks) != 1 {
		t.Fatalf("alice/ after bob's attempts: %+v %v (a refused waiting acquire must leave no key)", ks, err)
	}

	// Read: a key of alice is refused, existing or not; listings show
	// only bob's and shared/.
	for _, key := range []string{"alice/db", "alice/never-granted"} {
		if _, err := bob.Key(ctx, key); !forbidden(err, "read", key) {
			t.Errorf("bob reads %s: %v", key, err)
		}
	}
	ks, err := bob.Keys(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range ks {
		names = append(names, k.Key)
		if strings.Contains(k.Value, "alice") || k.Holder == "alice" {
			t.Errorf("bob's listing shows alice's %+v", k)
		}
	}
	if !slices.Equal(names, []string{"bob/db", "shared/x"}) {
		t.Errorf("bob lists %v, want [bob/db shared/x]", names)
	}

	// Verify: everyone may verify (the * rule).
	if v, err := bob.Verify(ctx, "alice/db", ga.Token.String(), ""); err != nil || !v.Allow {
		t.Errorf("bob verifies alice's token: %+v %v", v, err)
	}
	// Admins have every right.
	if _, err := ops.Key(ctx, "alice/db"); err != nil {
		t.Errorf("ops reads alice/db: %v", err)
	}
}

// TestACLFiltersWatches: a prefix watch of bob over every key carries only
// the keys he may read; an exact watch of alice's key is refused.
func TestACLFiltersWatches(t *testing.T) {
	tn := aclNode(t, testACL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := client.New([]string{tn.url}, client.WithBearerToken(aliceToken))
	bob := client.New([]string{tn.url}, client.WithBearerToken(bobToken))
	if _, err := alice.Acquire(ctx, client.AcquireRequest{Key: "alice/a", Holder: "alice", Value: "v"}); err != nil {
		t.Fatal(err)
	}
	ch := bob.Watch(ctx, client.WatchOptions{Prefix: ""})
	var seen []client.WatchEvent
	sawSync := false
	for !sawSync {
		ev := <-ch
		seen = append(seen, ev)
		sawSync = ev.Type == client.WatchSync
	}
	if _, err := alice.Acquire(ctx, client.AcquireRequest{Key: "alice/b", Holder: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Acquire(ctx, client.AcquireRequest{Key: "bob/b", Holder: "bob"}); err != nil {
		t.Fatal(err)
	}
	for {
		ev := <-ch
		seen = append(seen, ev)
		if ev.Key == "bob/b" {
			break
		}
	}
	for _, ev := range seen {
		if strings.HasPrefix(ev.Key, "alice/") {
			t.Fatalf("bob's watch carried %+v", ev)
		}
	}
	evs := collect(t, bob.Watch(ctx, client.WatchOptions{Key: "alice/a"}), 10*time.Second, func(evs []client.WatchEvent) bool { return len(evs) > 0 })
	if evs[0].Type != client.WatchError || !strings.Contains(evs[0].Reason, "read") {
		t.Fatalf("bob's exact watch of alice/a: %+v; want refused", evs)
	}
}

// TestACLJudgesBatchItemsOneByOne: a verify batch answers a check of a key
// the identity may not verify with its own 403, and the others as usual;
// a keepalive renews only the keys the identity may still lock.
func TestACLJudgesBatchItemsOneByOne(t *testing.T) {
	tn := aclNode(t, "bob lock,verify bob/\nbob lock other/\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bob := client.New([]string{tn.url}, client.WithBearerToken(bobToken), client.WithBatching(false))
	g, err := bob.Acquire(ctx, client.AcquireRequest{Key: "bob/k", Holder: "bob", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Acquire(ctx, client.AcquireRequest{Key: "other/k", Holder: "bob", TTL: "1m"}); err != nil {
		t.Fatal(err)
	}
	status, out := verifyBatchOfToken(t, tn.url, []client.VerifyRequest{{Key: "bob/k", Token: g.Token.String()}, {Key: "other/k", Token: g.Token.String()}}, bobToken)
	if status != http.StatusOK || len(out.Results) != 2 || !out.Results[0].Allow ||
		out.Results[1].Status != http.StatusForbidden || out.Results[1].Code != "forbidden" || out.Results[1].Allow || out.Results[1].Reason != reasonForbidden {
		t.Fatalf("batch: %d %+v", status, out)
	}
	// The lock right on other/ is withdrawn: keepalives renew bob/k only.
	if err := os.WriteFile(tn.path, []byte("bob lock,verify bob/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tn.acl.Reload(); err != nil {
		t.Fatal(err)
	}
	ka, err := bob.Keepalive(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if len(ka.Renewed) != 1 || ka.Renewed[0].Key != "bob/k" {
		t.Fatalf("keepalive after the reload renewed %+v, want bob/k only", ka.Renewed)
	}
}
