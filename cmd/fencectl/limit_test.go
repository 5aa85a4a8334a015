package main

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
)

// TestAcquireAndLockWithLimit: acquire --limit takes permits of a
// semaphore key up to its limit and is refused past it or with another
// limit; lock --limit runs its command under a permit of its own beside
// another holder's, with its own token, and frees it afterwards.
func TestAcquireAndLockWithLimit(t *testing.T) {
	cl := shared.get(t)
	c, ctx := cl.Client(), testCtx(t, time.Minute)
	key := testKey(t)
	eps := endpoints(cl)
	acquire := func(holder string, extra ...string) (int, client.Grant, string) {
		args := append([]string{"--endpoints", eps, "-o", "json", "acquire", key, "--holder", holder, "--ttl", "30s"}, extra...)
		code, stdout, stderr := runCtl(t, nil, args...)
		var g client.Grant
		if code == 0 {
			if err := json.Unmarshal([]byte(stdout), &g); err != nil {
				t.Fatalf("acquire output %q: %v", stdout, err)
			}
		}
		return code, g, stderr
	}
	code, a, stderr := acquire("a", "--limit", "2")
	if code != 0 || a.Limit != 2 {
		t.Fatalf("first permit: exit %d %+v\n%s", code, a, stderr)
	}
	code, b, stderr := acquire("b", "--limit", "2")
	if code != 0 || b.Token <= a.Token {
		t.Fatalf("second permit: exit %d %+v\n%s", code, b, stderr)
	}
	if code, _, stderr := acquire("c", "--limit", "2"); code == 0 || !strings.Contains(stderr, "held") {
		t.Fatalf("third permit of two: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := acquire("c", "--limit", "3"); code == 0 || !strings.Contains(stderr, "limit") {
		t.Fatalf("another limit: exit %d\n%s", code, stderr)
	}
	for _, bad := range [][]string{{"--limit", "0"}, {"--limit", "1025"}} {
		if code, _, stderr := acquire("c", bad...); code != 2 || !strings.Contains(stderr, "--l") {
			t.Fatalf("%v: exit %d\n%s", bad, code, stderr)
		}
	}

	// lock --limit 2 runs beside a's permit once b's is released.
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: key, Holder: "b", Token: b.Token}); err != nil {
		ki, _ := c.Key(ctx, key)
		t.Fatalf("release b: %v (%+v)", err, ki)
	}
	out := filepath.Join(t.TempDir(), "env")
	var stdout string
	code, stdout, stderr = runCtl(t, helperEnv("env", out), lockArgs(eps, key, "h1", "--limit", "2")...)
	if code != 0 {
		t.Fatalf("lock --limit: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	tok, err := fence.Parse(readEnvFile(t, out)["FENCE_TOKEN"])
	if err != nil || tok <= b.Token {
		t.Fatalf("FENCE_TOKEN %v: %v", tok, err)
	}
	ki, err := c.Key(ctx, key)
	if err != nil || ki.Limit != 2 || len(ki.Permits) != 1 || ki.Permits[0].Holder != "a" {
		t.Fatalf("after lock --limit: %+v %v", ki, err)
	}
}

// TestAcquireShared: --shared grants coexist, an exclusive acquire is
// refused beside them, and --shared with --limit is a usage error.
func TestAcquireShared(t *testing.T) {
	cl := shared.get(t)
	key, eps := testKey(t), endpoints(cl)
	run := func(holder string, extra ...string) (int, client.Grant, string) {
		args := append([]string{"--endpoints", eps, "-o", "json", "acquire", key, "--holder", holder, "--ttl", "30s"}, extra...)
		code, stdout, stderr := runCtl(t, nil, args...)
		var g client.Grant
		if code == 0 {
			_ = json.Unmarshal([]byte(stdout), &g)
		}
		return code, g, stderr
	}
	code, r1, stderr := run("r1", "--shared")
	if code != 0 || r1.Mode != client.ModeShared {
		t.Fatalf("reader: exit %d %+v\n%s", code, r1, stderr)
	}
	if code, r2, stderr := run("r2", "--shared"); code != 0 || r2.Token <= r1.Token {
		t.Fatalf("second reader: exit %d %+v\n%s", code, r2, stderr)
	}
	if code, _, stderr := run("w"); code == 0 || !strings.Contains(stderr, "held") {
		t.Fatalf("a writer beside readers: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := run("w", "--shared", "--limit", "2"); code != 2 {
		t.Fatalf("--shared with --limit: exit %d\n%s", code, stderr)
	}
}

// TestAcquireSeveralKeys: acquire K1 K2 takes both at once, each with its
// own token; a set with a key held by another fails naming it and takes
// none.
func TestAcquireSeveralKeys(t *testing.T) {
	cl := shared.get(t)
	c, ctx := cl.Client(), testCtx(t, time.Minute)
	k1, k2, k3 := testKey(t), testKey(t), testKey(t)
	eps := endpoints(cl)
	code, stdout, stderr := runCtl(t, nil, "--endpoints", eps, "-o", "json", "acquire", k1, k2, "--holder", "m", "--ttl", "30s")
	var mg client.MultiGrant
	if code != 0 || json.Unmarshal([]byte(stdout), &mg) != nil || len(mg.Grants) != 2 || mg.Grants[1].Key != k2 {
		t.Fatalf("acquire %s %s: exit %d %s\n%s", k1, k2, code, stdout, stderr)
	}
	code, _, stderr = runCtl(t, nil, "--endpoints", eps, "acquire", k3, k2, "--holder", "o", "--ttl", "30s")
	if code == 0 || !strings.Contains(stderr, "held") {
		t.Fatalf("a set with a held key: exit %d\n%s", code, stderr)
	}
	if _, err := c.Key(ctx, k3); !errors.Is(err, client.ErrUnknownKey) {
		t.Fatalf("a refused set took %s: %v", k3, err)
	}
	if code, _, stderr := runCtl(t, nil, "--endpoints", eps, "acquire", k1, k1); code != 2 {
		t.Fatalf("a key twice: exit %d\n%s", code, stderr)
	}
}

// TestRenewAndReleaseSeveralKeys: renew and release with several KEY
// TOKEN pairs act on the set, all or none: a set with a stale token fails
// naming its key and changes nothing; the good set is renewed, then
// released in one step; bad pairs are usage errors (exit 2).
func TestRenewAndReleaseSeveralKeys(t *testing.T) {
	cl := shared.get(t)
	c, ctx := cl.Client(), testCtx(t, time.Minute)
	k1, k2 := testKey(t), testKey(t)
	eps := endpoints(cl)
	mg, err := c.AcquireMulti(ctx, client.AcquireMultiRequest{Keys: []string{k1, k2}, Holder: "m", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	t1, t2 := mg.Grants[0].Token.String(), mg.Grants[1].Token.String()
	stale := (mg.Grants[1].Token + 1).String()
	for _, cmd := range []string{"renew", "release"} {
		code, _, stderr := runCtl(t, nil, "--endpoints", eps, cmd, k1, t1, k2, stale, "--holder", "m")
		if code != 1 || !strings.Contains(stderr, k2) {
			t.Fatalf("%s of a set with a stale token: exit %d\n%s", cmd, code, stderr)
		}
	}
	if k, err := c.Key(ctx, k1); err != nil || k.State != "held" {
		t.Fatalf("a refused set released %s: %+v %v", k1, k, err)
	}
	code, stdout, stderr := runCtl(t, nil, "--endpoints", eps, "-o", "json", "renew", k1, t1, k2, t2, "--holder", "m")
	var rn client.RenewMultiResponse
	if code != 0 || json.Unmarshal([]byte(stdout), &rn) != nil || len(rn.Renewed) != 2 {
		t.Fatalf("renew the set: exit %d %s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCtl(t, nil, "--endpoints", eps, "release", k1, t1, k2, t2, "--holder", "m")
	if code != 0 || strings.Count(stdout, "released") != 2 {
		t.Fatalf("release the set: exit %d %s\n%s", code, stdout, stderr)
	}
	for _, k := range []string{k1, k2} {
		if st, err := c.Key(ctx, k); err != nil || st.State != "released" {
			t.Fatalf("%s after the set's release: %+v %v", k, st, err)
		}
	}
	for _, bad := range [][]string{
		{"release", k1, t1, k2, "--holder", "m"},
		{"release", k1, t1, k1, t1, "--holder", "m"},
		{"release", k1, t1, k2, t2},
		{"renew", k1, t1, k2, "x", "--holder", "m"},
		{"release", "--force", k1, t1, k2},
	} {
		if code, _, stderr := runCtl(t, nil, append([]string{"--endpoints", eps}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d\n%s", bad, code, stderr)
		}
	}
}
