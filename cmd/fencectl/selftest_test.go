package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/api"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/internal/testutil"
)

// TestSelftestPassesOnHealthyCluster: every check passes against real nodes.
func TestSelftestPassesOnHealthyCluster(t *testing.T) {
	t.Parallel()
	cl := shared.get(t)
	code, stdout, stderr := runCtl(t, nil, "--endpoints", endpoints(cl), "selftest")
	if code != 0 || strings.Contains(stdout, "✗") || !strings.Contains(stdout, "✓ fresh token is allowed (positive control)") {
		t.Fatalf("selftest exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	key := testKey(t)
	code, stdout, _ = runCtl(t, nil, "--endpoints", endpoints(cl), "-o", "json", "selftest", "--key", key)
	var rep selftestReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 0 || !rep.Pass || rep.Key != key || len(rep.Checks) < 10 {
		t.Fatalf("json selftest: exit %d %+v %v\n%s", code, rep, err, stdout)
	}
}

// allowAll is a real node whose verify allows every token: the broken guard
// a selftest must catch.
type allowAll struct{ *cluster.Node }

func (allowAll) Verify(context.Context, string, fence.Token, string) (cluster.Verdict, error) {
	return cluster.Verdict{Allow: true, Reason: cluster.ReasonOK}, nil
}

// TestSelftestFailsWhenVerifyAllowsEverything: against a server whose verify
// always allows, selftest reports the refusals that did not happen and exits 1.
func TestSelftestFailsWhenVerifyAllowsEverything(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n, err := cluster.New(cluster.Config{
		ID: "broken", DataDir: filepath.Join(dir, "broken"), RaftBind: testutil.FreeAddrs(t, 1)[0], Bootstrap: true,
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
		NoSync: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	testutil.Eventually(t, 15*time.Second, func() error {
		if !n.Ready() {
			return testutil.Errorf("node not ready")
		}
		return nil
	})
	srv := httptest.NewServer(api.NewServer(allowAll{n}, hclog.NewNullLogger()))
	t.Cleanup(srv.Close)

	code, stdout, stderr := runCtl(t, nil, "--endpoints", srv.URL, "selftest")
	if code != exitErr {
		t.Fatalf("selftest against an allow-all verify: exit %d, want %d\nstdout: %s\nstderr: %s", code, exitErr, stdout, stderr)
	}
	for _, want := range []string{"✓ fresh token is allowed (positive control)", "✗ superseded token is refused", "✗ released token is refused", "FAIL"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "FAILED") {
		t.Errorf("stderr: %s", stderr)
	}
}
