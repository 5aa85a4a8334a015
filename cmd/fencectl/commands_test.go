package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
)

// TestGrantCommands drives acquire, key, keys, renew, keepalive and release
// through the real binary and a real cluster, checking outputs, error
// messages and exit codes.
func TestGrantCommands(t *testing.T) {
	t.Parallel()
	cl := shared.get(t)
	eps := endpoints(cl)
	key := testKey(t)
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return runCtl(t, nil, append([]string{"--endpoints", eps}, args...)...)
	}
	expect := func(code int, stdout, stderr string, wantCode int, want ...string) {
		t.Helper()
		if code != wantCode {
			t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, wantCode, stdout, stderr)
		}
		for _, w := range want {
			if !strings.Contains(stdout+stderr, w) {
				t.Fatalf("output lacks %q\nstdout: %s\nstderr: %s", w, stdout, stderr)
			}
		}
	}

	code, stdout, stderr := ctl("-o", "json", "acquire", key, "--holder", "alice", "--ttl", "30s")
	expect(code, stdout, stderr, 0)
	var g client.Grant
	if err := json.Unmarshal([]byte(stdout), &g); err != nil || g.Holder != "alice" || g.Token == 0 || g.Epoch != g.Token.Epoch() {
		t.Fatalf("acquire json: %+v, %v", g, err)
	}
	tok := g.Token.String()
	code, stdout, stderr = ctl("acquire", key, "--holder", "alice", "--ttl", "30s")
	expect(code, stdout, stderr, 0, "renewed:  yes", fmt.Sprintf("token:    %s (epoch %d, seq %d)", tok, g.Epoch, g.Seq))
	code, stdout, stderr = ctl("acquire", key, "--holder", "bob")
	expect(code, stdout, stderr, exitErr, "fencectl: key "+key+" is held by alice; retry after")
	if strings.Count(stderr, "\n") != 1 {
		t.Fatalf("error is not one line: %q", stderr)
	}

	code, stdout, stderr = ctl("key", key)
	expect(code, stdout, stderr, 0, "holder:     alice", "state:      held", "token:      "+tok)
	code, stdout, stderr = ctl("keys", "test/")
	expect(code, stdout, stderr, 0, "KEY", "REMAINING")
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `\s+alice\s+` + tok + `\s+\d+\s+\d+\s+held\s+30s\s+\S+s$`).MatchString(stdout) {
		t.Fatalf("keys row for %s not found:\n%s", key, stdout)
	}
	code, stdout, stderr = ctl("-o", "json", "keys", key)
	var ks client.KeysResponse
	if err := json.Unmarshal([]byte(stdout), &ks); err != nil || len(ks.Keys) != 1 || ks.Keys[0].Key != key {
		t.Fatalf("keys json: exit %d %+v %v\n%s", code, ks, err, stdout)
	}

	code, stdout, stderr = ctl("renew", key, tok, "--holder", "alice")
	expect(code, stdout, stderr, 0, "ttl:     30s")
	code, stdout, stderr = ctl("renew", key, tok, "--holder", "bob")
	expect(code, stdout, stderr, exitErr, "is not held by bob")
	code, stdout, stderr = ctl("keepalive", "--holder", "alice")
	expect(code, stdout, stderr, 0, key, tok)
	code, stdout, stderr = ctl("keepalive", "--holder", "nobody-"+randomHex(3))
	expect(code, stdout, stderr, exitErr, "has no live grant")

	code, stdout, stderr = ctl("release", key, tok, "--holder", "alice")
	expect(code, stdout, stderr, 0, "state:  released")
	code, stdout, stderr = ctl("release", key, tok, "--holder", "alice")
	expect(code, stdout, stderr, 0, "state:  released") // a repeated release succeeds
	code, stdout, stderr = ctl("renew", key, tok, "--holder", "alice")
	expect(code, stdout, stderr, exitErr, "no live lease")

	code, stdout, stderr = ctl("acquire", key)
	host, _ := os.Hostname()
	expect(code, stdout, stderr, 0, fmt.Sprintf("holder:   %s/", host))
	code, stdout, stderr = ctl("release", "--force", key)
	expect(code, stdout, stderr, 0, "state:   released", fmt.Sprintf("holder:  %s/", host), "token:   ")
	code, stdout, stderr = ctl("key", key+"-never")
	expect(code, stdout, stderr, exitErr, "never granted")
}

// TestStatus shows members and health, marks a dead member unreachable, and
// exits 1 once no leader is left.
func TestStatus(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 3)
	eps := endpoints(cl)

	testutil.Eventually(t, 20*time.Second, func() error {
		code, stdout, stderr := runCtl(t, nil, "--endpoints", eps, "status")
		if code != 0 || readyRows(stdout) != 3 || !strings.Contains(stdout, "leader: n") {
			return testutil.Errorf("status exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		return nil
	})
	code, stdout, _ := runCtl(t, nil, "--endpoints", eps, "-o", "json", "status")
	var h clusterHealth
	if err := json.Unmarshal([]byte(stdout), &h); err != nil || code != 0 || h.Leader == "" || h.Term == 0 || len(h.Members) != 3 {
		t.Fatalf("status json: exit %d %+v %v\n%s", code, h, err, stdout)
	}
	for _, m := range h.Members {
		if m.Health != healthReady || m.Status == nil || m.Status.CommitIndex == 0 || m.Status.AppliedIndex == 0 {
			t.Fatalf("member %+v", m)
		}
	}

	leader, err := cl.Leader(testCtx(t, time.Minute), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var followers []string
	for _, n := range cl.Nodes {
		if n != leader {
			followers = append(followers, n.ID)
		}
	}
	cl.Kill(cl.Node(followers[0]))
	code, stdout, stderr := runCtl(t, nil, "--endpoints", eps, "--timeout", "4s", "status")
	if code != 0 || !regexp.MustCompile(`(?m)^`+followers[0]+`\s.*unreachable`).MatchString(stdout) || readyRows(stdout) != 2 {
		t.Fatalf("status with %s dead: exit %d\nstdout: %s\nstderr: %s", followers[0], code, stdout, stderr)
	}

	cl.Kill(cl.Node(followers[1])) // no quorum: the last node cannot lead
	testutil.Eventually(t, 20*time.Second, func() error {
		code, stdout, stderr := runCtl(t, nil, "--endpoints", eps, "--timeout", "2s", "status")
		if code != exitErr || !strings.Contains(stderr, "no leader") {
			return testutil.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		return nil
	})
}

// readyRows counts the member rows of a status table whose health is ready.
func readyRows(table string) int {
	return len(regexp.MustCompile(`(?m)\sready$`).FindAllString(table, -1))
}
