package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
)

// TestEndpointsCheckedUpFront: a bad scheme, a port out of range or a
// missing port is a usage error (exit 2) before any network call.
func TestEndpointsCheckedUpFront(t *testing.T) {
	for _, ep := range []string{"ftp://127.0.0.1:7700", "127.0.0.1:99999", "127.0.0.1", "http://127.0.0.1", "127.0.0.1:7700/v1"} {
		t.Run(ep, func(t *testing.T) {
			e, _, stderr := testEnv(map[string]string{"FENCE_TIMEOUT": "1s"})
			code := run(context.Background(), e, []string{"--endpoints", ep, "status"})
			if code != exitUsage || !strings.Contains(stderr.String(), "endpoint") {
				t.Fatalf("--endpoints %s: exit %d, stderr %q; want a usage error", ep, code, stderr)
			}
		})
	}
}

// readyAfter is a fake node n2. Until a transfer it follows n1; after it,
// it leads but is not ready until its status was asked for n times. It
// counts the status answers that said ready.
type readyAfter struct {
	srv         *httptest.Server
	n           int64
	transferred atomic.Bool
	calls       atomic.Int64
	readySeen   atomic.Int64
}

func newReadyAfter(t *testing.T, n int64, transferred bool) *readyAfter {
	f := &readyAfter{n: n}
	f.transferred.Store(transferred)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply := func(v any) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		}
		members := []client.Member{{ID: "n1", Voter: true}, {ID: "n2", Voter: true, HTTPAddr: strings.TrimPrefix(f.srv.URL, "http://")}}
		switch r.URL.Path {
		case "/v1/cluster":
			if !f.transferred.Load() {
				reply(client.Status{ID: "n2", State: "Follower", LeaderID: "n1", Members: members})
				return
			}
			ready := f.calls.Add(1) > f.n
			if ready {
				f.readySeen.Add(1)
			}
			reply(client.Status{ID: "n2", State: "Leader", LeaderID: "n2", Ready: ready, Members: members})
		case "/readyz":
			reply(map[string]string{"status": "ready"})
		case "/v1/cluster/transfer":
			f.transferred.Store(true)
			reply(map[string]string{"leader": "n2"})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// TestLeaderTransferWaitsForReady: leader transfer returns only once the
// new leader answers that it is ready.
func TestLeaderTransferWaitsForReady(t *testing.T) {
	f := newReadyAfter(t, 3, false)
	e, stdout, stderr := testEnv(map[string]string{"FENCE_ENDPOINTS": f.srv.URL})
	if code := run(context.Background(), e, []string{"leader", "transfer", "n2"}); code != 0 {
		t.Fatalf("leader transfer: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if f.readySeen.Load() == 0 {
		t.Fatalf("leader transfer returned before the new leader said it was ready: %s", stdout)
	}
}

// TestStatusWait: status --wait returns 0 once a node answers that it is
// the ready leader, however many polls that takes within the duration.
func TestStatusWait(t *testing.T) {
	f := newReadyAfter(t, 5, true)
	e, stdout, stderr := testEnv(map[string]string{"FENCE_ENDPOINTS": f.srv.URL})
	if code := run(context.Background(), e, []string{"status", "--wait", "20s"}); code != 0 {
		t.Fatalf("status --wait: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if f.readySeen.Load() == 0 {
		t.Fatal("status --wait returned before the leader said it was ready")
	}
}

// TestVersionCommand: fencectl version prints the module version and the
// VCS revision the binary was built from (or that they are unknown).
func TestVersionCommand(t *testing.T) {
	e, stdout, stderr := testEnv(nil)
	if code := run(context.Background(), e, []string{"version"}); code != 0 {
		t.Fatalf("version: exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(stdout.String(), "fencectl ") || !strings.Contains(stdout.String(), "revision") {
		t.Fatalf("version printed %q", stdout)
	}
}

// TestBenchUnknownWorkload: an unknown workload is a usage error before the
// cluster is contacted.
func TestBenchUnknownWorkload(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	e, _, stderr := testEnv(map[string]string{"FENCE_ENDPOINTS": srv.URL, "FENCE_TIMEOUT": "1s"})
	if code := run(context.Background(), e, []string{"bench", "nosuch", "--duration", "1s", "--clients", "1"}); code != exitUsage {
		t.Fatalf("bench nosuch: exit %d, stderr %q; want %d", code, stderr, exitUsage)
	}
	if hits.Load() != 0 {
		t.Fatalf("bench nosuch made %d requests", hits.Load())
	}
}

// TestBenchProgressOnlyOnTerminal: the progress bar (carriage returns and
// escape sequences) is not written to a stderr that is not a terminal.
func TestBenchProgressOnlyOnTerminal(t *testing.T) {
	e, _, stderr := testEnv(nil)
	p := progressFor(e, "verify", 1, time.Second)
	if p != nil {
		p(1, 1)
	}
	if strings.ContainsAny(stderr.String(), "\r\033") {
		t.Fatalf("progress written to a non-terminal: %q", stderr)
	}
}

// TestKeepaliveNothingToRenewOneStream: a one-shot keepalive with nothing to
// renew says so once, on stderr, and exits 1; stdout stays empty.
func TestKeepaliveNothingToRenewOneStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(client.KeepaliveResponse{Holder: "h"})
	}))
	defer srv.Close()
	e, stdout, stderr := testEnv(map[string]string{"FENCE_ENDPOINTS": srv.URL})
	if code := run(context.Background(), e, []string{"keepalive", "--holder", "h"}); code != exitErr {
		t.Fatalf("keepalive: exit %d", code)
	}
	if stdout.Len() != 0 || stderr.Len() == 0 {
		t.Fatalf("keepalive with nothing to renew: stdout %q, stderr %q; want stderr only", stdout, stderr)
	}
}

// TestKeysSaysWhenCut: a listing cut at --limit says so on stderr with the
// --after that continues it, and --after is passed to the API.
func TestKeysSaysWhenCut(t *testing.T) {
	var afters []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		afters = append(afters, r.URL.Query().Get("after"))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(client.KeysResponse{Keys: []client.KeyInfo{{Key: "a/2", State: "released", Token: 4294967297}}, Truncated: true, Next: "a/2"})
	}))
	defer srv.Close()
	e, stdout, stderr := testEnv(map[string]string{"FENCE_ENDPOINTS": srv.URL})
	if code := run(context.Background(), e, []string{"keys", "a/", "--limit", "1", "--after", "a/1"}); code != 0 {
		t.Fatalf("keys: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout.String(), "a/2") || !strings.Contains(stderr.String(), "--after a/2") {
		t.Fatalf("cut listing: stdout %q, stderr %q", stdout, stderr)
	}
	if len(afters) != 1 || afters[0] != "a/1" {
		t.Fatalf("after sent: %q", afters)
	}
}
