package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
)

// testTicker stands in for the clock of progress lines: the test sends each
// tick, and a send returns once the reporter took it, so after two ticks
// the first line is out. made counts the reporters started.
type testTicker struct {
	c    chan time.Time
	made atomic.Int32
}

func newTestTicker() *testTicker { return &testTicker{c: make(chan time.Time)} }

func (tt *testTicker) ticker(time.Duration) (<-chan time.Time, func()) {
	tt.made.Add(1)
	return tt.c, func() {}
}

func (tt *testTicker) tick(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case tt.c <- time.Now():
	case <-done:
		t.Fatal("the command ended before it reported progress")
	case <-time.After(30 * time.Second):
		t.Fatal("no progress reporter took a tick within 30s")
	}
}

// stalledNode answers status as a ready leader and holds backups and
// restores until the request ends.
func stalledNode(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/cluster":
			writeTestJSON(w, client.Status{ID: "n1", LeaderID: "n1", Ready: true, Term: 3})
		default:
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func writeTestJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = printJSON(w, v)
}

// TestProgressOnLongWaits: status --wait, snapshot save and snapshot
// restore say on stderr that they are still waiting, with --progress or when
// stderr is a terminal; never on stdout.
func TestProgressOnLongWaits(t *testing.T) {
	backup := filepath.Join(t.TempDir(), "b.fenced")
	if err := os.WriteFile(backup, testBackup(t), 0o600); err != nil {
		t.Fatal(err)
	}
	stalled := stalledNode(t)
	for _, tc := range []struct {
		name     string
		args     []string
		terminal bool
		want     string
	}{
		{"status --wait", []string{"--endpoints", refusedAddr(t), "status", "--wait", "1h", "--progress"}, false, "waiting for a ready leader: "},
		{"status --wait on a terminal", []string{"--endpoints", refusedAddr(t), "status", "--wait", "1h"}, true, "waiting for a ready leader: "},
		{"snapshot save", []string{"--endpoints", stalled, "--timeout", "1h", "--attempt-timeout", "1h", "snapshot", "save",
			filepath.Join(t.TempDir(), "s.fenced"), "--progress"}, false, "snapshot save: waiting for the backup: "},
		{"snapshot restore", []string{"--endpoints", stalled, "--timeout", "1h", "snapshot", "restore", backup, "--yes"}, true,
			"snapshot restore: waiting for the restore: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tt := newTestTicker()
			e, stdout, stderr := testEnv(nil)
			e.stderrTerminal, e.ticker = func() bool { return tc.terminal }, tt.ticker
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				run(ctx, e, tc.args)
			}()
			tt.tick(t, done)
			tt.tick(t, done)
			cancel()
			<-done
			if !strings.Contains(stderr.String(), "fencectl: "+tc.want) {
				t.Errorf("stderr has no progress line %q: %s", tc.want, stderr)
			}
			if strings.Contains(stdout.String(), "waiting") {
				t.Errorf("progress on stdout: %s", stdout)
			}
		})
	}
}

// TestNoProgressUnasked: without --progress and a terminal, with
// --progress=false, and with -o json even with --progress, no progress
// reporter starts and no line is printed.
func TestNoProgressUnasked(t *testing.T) {
	refused := refusedAddr(t)
	for _, tc := range []struct {
		args     []string
		terminal bool
	}{
		{[]string{"status", "--wait", "300ms"}, false},
		{[]string{"status", "--wait", "300ms", "--progress=false"}, true},
		{[]string{"status", "--wait", "300ms", "--progress", "-o", "json"}, true},
		{[]string{"snapshot", "save", filepath.Join(t.TempDir(), "s.fenced"), "--progress", "-o", "json"}, true},
	} {
		tt := newTestTicker()
		e, stdout, stderr := testEnv(nil)
		e.stderrTerminal, e.ticker = func() bool { return tc.terminal }, tt.ticker
		code := run(context.Background(), e, append([]string{"--endpoints", refused}, tc.args...))
		if code != exitErr || tt.made.Load() != 0 || strings.Contains(stderr.String()+stdout.String(), "waiting") {
			t.Errorf("%q (terminal %v): exit %d, %d progress reporters\nstdout: %s\nstderr: %s", tc.args, tc.terminal, code, tt.made.Load(), stdout, stderr)
		}
	}
}
