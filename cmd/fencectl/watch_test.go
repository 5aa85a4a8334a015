package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
)

// jsonLines decodes the JSON objects of out, one a line, into T values.
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var vs []T
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		vs = append(vs, v)
	}
	return vs
}

// TestElectAndWatchCommands: elect runs its command as leader with the
// token, publishing its value; watch -o json prints the grant and its end;
// elect --observe prints the leader and then no leader.
func TestElectAndWatchCommands(t *testing.T) {
	cl := shared.get(t)
	key := testKey(t)
	eps := endpoints(cl)
	watch := startCtl(t, nil, "--endpoints", eps, "-o", "json", "watch", "--key", key)
	observe := startCtl(t, nil, "--endpoints", eps, "-o", "json", "elect", key, "--observe")
	testutil.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(watch.stdout.String(), `"type":"sync"`) {
			return fmt.Errorf("watch has not started: %s %s", watch.stdout, watch.stderr)
		}
		return nil
	})
	out := filepath.Join(t.TempDir(), "events")
	code, stdout, stderr := runCtl(t, helperEnv("start", out), append([]string{"--endpoints", eps, "elect", key, "--holder", "h1",
		"--value", "http://10.0.0.1:8080"}, append(lockTimingArgs, "--", os.Args[0])...)...)
	if code != 0 {
		t.Fatalf("elect: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	start := waitEvent(t, out, "start", 10*time.Second)
	tok := mustToken(t, start.rest)
	testutil.Eventually(t, 30*time.Second, func() error {
		evs := jsonLines[client.WatchEvent](t, watch.stdout.String())
		var granted, released bool
		for _, ev := range evs {
			granted = granted || ev.Type == "granted" && ev.Token == tok && ev.Holder == "h1" && ev.Value == "http://10.0.0.1:8080"
			released = released || ev.Type == "released" && ev.Token == tok
		}
		if !granted || !released {
			return fmt.Errorf("watch printed %s", watch.stdout)
		}
		ls := jsonLines[leaderLine](t, observe.stdout.String())
		if len(ls) != 2 || ls[0].Leader != "h1" || ls[0].Token != tok.String() || ls[0].Value != "http://10.0.0.1:8080" ||
			ls[1].Leader != "" || ls[1].Token != tok.String() {
			return fmt.Errorf("observe printed %s", observe.stdout)
		}
		return nil
	})
}

// TestElectCampaignsWhileAnotherLeads: elect waits while another candidate
// leads and runs its command once that one resigns, with a higher token.
func TestElectCampaignsWhileAnotherLeads(t *testing.T) {
	cl := shared.get(t)
	c, ctx := cl.Client(), testCtx(t, time.Minute)
	key := testKey(t)
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: key, Holder: "other", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "events")
	elect := startCtl(t, helperEnv("start", out), append([]string{"--endpoints", endpoints(cl), "elect", key, "--holder", "h2"},
		append(lockTimingArgs, "--", os.Args[0])...)...)
	// Whether the campaign is queued at the server yet or not, it is not
	// elected while "other" leads, and is elected after it resigns.
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: key, Holder: "other", Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	start := waitEvent(t, out, "start", 30*time.Second)
	if tok := mustToken(t, start.rest); tok <= g.Token {
		t.Fatalf("the new leader's token %s is not above %s", tok, g.Token)
	}
	if code := elect.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("elect: exit %d\n%s", code, elect.stderr)
	}
}

// TestLostLeadershipSaysSo: when the leadership of elect, or the lock of
// lock, is ended under it (here by a forced release), fencectl says which
// was lost, with its key and token, and exits 4.
func TestLostLeadershipSaysSo(t *testing.T) {
	cl := shared.get(t)
	c, ctx := cl.Client(), testCtx(t, time.Minute)
	for _, tc := range []struct {
		cmd, want string
	}{
		{"elect", "leadership of election %s (token %s) lost"},
		{"lock", "lock on key %s (token %s) lost"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			key, out := testKey(t), filepath.Join(t.TempDir(), "events")
			run := startCtl(t, helperEnv("ticker", out), append([]string{"--endpoints", endpoints(cl), tc.cmd, key, "--holder", "h1"},
				append(lockTimingArgs, "--", os.Args[0])...)...)
			killGroupAtCleanup(t, out)
			tok := waitEvent(t, out, "start", 30*time.Second).rest
			if _, err := c.Release(ctx, client.ReleaseRequest{Key: key, Force: true, Token: mustToken(t, tok)}); err != nil {
				t.Fatal(err)
			}
			if code := run.wait(t, 30*time.Second); code != exitLockLost {
				t.Fatalf("%s: exit %d, want %d\nstderr: %s", tc.cmd, code, exitLockLost, run.stderr)
			}
			want := fmt.Sprintf(tc.want, key, tok)
			if !strings.Contains(run.stderr.String(), want) {
				t.Fatalf("%s: stderr does not say %q: %s", tc.cmd, want, run.stderr)
			}
			if tc.cmd == "elect" && strings.Contains(run.stderr.String(), "lock on") {
				t.Fatalf("elect speaks of a lock: %s", run.stderr)
			}
		})
	}
}
