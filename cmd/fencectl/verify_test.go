package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/internal/testutil"
)

// TestVerifyExitCodes runs fencectl verify against a real cluster for every
// verdict: exit 0 only for ALLOW, 3 for every refusal (with the reason on
// stderr) including a cluster that cannot be reached, 2 only for wrong usage.
func TestVerifyExitCodes(t *testing.T) {
	t.Parallel()
	cl := shared.get(t)
	c, ctx := cl.Client(), testCtx(t, time.Minute)
	eps := endpoints(cl)
	key, short, never := testKey(t), testKey(t)+"-short", testKey(t)+"-never"

	g1, err := c.Acquire(ctx, client.AcquireRequest{Key: key, Holder: "alice", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	t1 := g1.Token.String()
	gs, err := c.Acquire(ctx, client.AcquireRequest{Key: short, Holder: "alice", TTL: "200ms"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if v, _ := c.Verify(ctx, short, gs.Token.String(), ""); v.Reason != string(cluster.ReasonExpired) {
			return testutil.Errorf("short grant not expired yet: %+v", v)
		}
		return nil
	})
	deadPort := closedPort(t)

	type verifyCase struct {
		name   string
		args   []string
		code   int
		reason string // expected on stderr for refusals
	}
	check := func(t *testing.T, tc verifyCase) {
		t.Helper()
		args := tc.args
		if !strings.Contains(strings.Join(args, " "), "--endpoints") {
			args = append([]string{"--endpoints", eps}, args...)
		}
		code, stdout, stderr := runCtl(t, nil, args...)
		if code != tc.code {
			t.Fatalf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", tc.args, code, tc.code, stdout, stderr)
		}
		if tc.code == exitRefused && !strings.Contains(stderr, "REFUSE "+tc.reason+":") {
			t.Fatalf("%v: stderr %q does not give the reason %s", tc.args, stderr, tc.reason)
		}
		if tc.code == exitOK && !strings.HasPrefix(stdout, "ALLOW") {
			t.Fatalf("%v: stdout %q", tc.args, stdout)
		}
	}
	for _, tc := range []verifyCase{
		{"allow", []string{"verify", key, t1}, exitOK, ""},
		{"allow with holder", []string{"verify", key, t1, "--holder", "alice"}, exitOK, ""},
		{"holder mismatch", []string{"verify", key, t1, "--holder", "bob"}, exitRefused, "holder_mismatch"},
		{"not granted yet", []string{"verify", key, (g1.Token + 1).String()}, exitRefused, "not_granted_yet"},
		{"far-future epoch", []string{"verify", key, "9223372032559808513"}, exitRefused, "not_granted_yet"},
		{"expired", []string{"verify", short, gs.Token.String()}, exitRefused, "expired"},
		{"unknown key", []string{"verify", never, t1}, exitRefused, "unknown_key"},
		{"malformed letters", []string{"verify", key, "abc"}, exitRefused, "malformed"},
		{"malformed leading zero", []string{"verify", key, "0" + t1}, exitRefused, "malformed"},
		{"malformed zero", []string{"verify", key, "0"}, exitRefused, "malformed"},
		{"malformed too large", []string{"verify", key, "9223372036854775808"}, exitRefused, "malformed"},
		{"malformed empty key", []string{"verify", "", t1}, exitRefused, "malformed"},
		{"unreachable cluster", []string{"verify", key, t1, "--endpoints", deadPort, "--timeout", "500ms"}, exitRefused, "unavailable"},
		{"missing token", []string{"verify", key}, exitUsage, ""},
		{"missing both", []string{"verify"}, exitUsage, ""},
		{"extra argument", []string{"verify", key, t1, "more"}, exitUsage, ""},
		{"unknown flag", []string{"verify", key, t1, "--bogus"}, exitUsage, ""},
		{"bad output", []string{"verify", key, t1, "-o", "yaml"}, exitUsage, ""},
	} {
		t.Run(tc.name, func(t *testing.T) { check(t, tc) })
	}

	// JSON: the verdict on stdout for allow and refuse alike.
	_, stdout, _ := runCtl(t, nil, "--endpoints", eps, "-o", "json", "verify", key, t1)
	var r verifyResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || !r.Allow || r.Reason != "ok" || r.CurrentToken != g1.Token {
		t.Fatalf("json allow: %+v, %v\n%s", r, err, stdout)
	}

	// After a release, then a new grant: released, then superseded.
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: key, Holder: "alice", Token: g1.Token}); err != nil {
		t.Fatal(err)
	}
	t.Run("released", func(t *testing.T) {
		check(t, verifyCase{"released", []string{"verify", key, t1}, exitRefused, "released"})
	})
	g2, err := c.Acquire(ctx, client.AcquireRequest{Key: key, Holder: "bob", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("superseded", func(t *testing.T) {
		check(t, verifyCase{"superseded", []string{"verify", key, t1}, exitRefused, "superseded"})
	})
	code, stdout, _ := runCtl(t, nil, "--endpoints", eps, "-o", "json", "verify", key, t1)
	r = verifyResult{}
	if err := json.Unmarshal([]byte(stdout), &r); code != exitRefused || err != nil || r.Allow || r.Reason != "superseded" ||
		r.CurrentToken != g2.Token || r.CurrentHolder != "bob" {
		t.Fatalf("json refuse: exit %d %+v, %v\n%s", code, r, err, stdout)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
