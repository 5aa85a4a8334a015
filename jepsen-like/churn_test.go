package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/jepsen-like/checker"
	"github.com/fenced/fenced/jepsen-like/nemesis"
	"github.com/fenced/fenced/jepsen-like/runner"
	"github.com/fenced/fenced/jepsen-like/workload"
)

// TestChurnReclaim runs the many-short-lived-keys workload with a two-second
// retention across leader kills, pauses and restarts: the cluster reclaims
// idle keys and grants them again, and every checker, the churn's token
// order among them, must pass.
func TestChurnReclaim(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run; skipped with -short")
	}
	bin := fencedBinary(t)
	faults := []string{nemesis.KillLeader, nemesis.PauseLeader, nemesis.RollingRestart}
	if runner.DefaultBackend() == "netns" {
		faults = append(faults, nemesis.PartitionLeader)
	}
	res, out := runSuite(t, runner.Config{Schedule: "short", Seed: 11, Nodes: 3, Backend: runner.DefaultBackend(), Results: resultsDir(t),
		Binary: bin, Faults: faults, Churn: 4, KeyRetention: 2 * time.Second, LinearizableTimeout: time.Minute})
	t.Logf("\n%s", out)
	if res.Failed > 0 {
		t.Fatalf("%d checkers failed", res.Failed)
	}
	for _, r := range res.Results {
		if r.Name == "reclaim-final-churn" {
			if strings.Contains(r.Summary, " 0 of them reclaimed") {
				t.Fatalf("no churn key was reclaimed: %s", r.Summary)
			}
			return
		}
	}
	t.Fatal("no churn checker in the results")
}

// TestChurnPositiveControl runs the churn workload on a cluster that
// reclaims without the epoch rule: a reclaimed key's next grant in the same
// term restarts at seq 1, and the churn's token-order checker must fail.
func TestChurnPositiveControl(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run; skipped with -short")
	}
	bin, err := proccluster.FencedChaos()
	if err != nil {
		t.Fatal(err)
	}
	res, out := runSuite(t, runner.Config{Schedule: "short", Seed: 7, Nodes: 3, Backend: runner.DefaultBackend(), Results: resultsDir(t),
		Binary: bin, Broken: workload.BrokenReclaimNoEpoch, Faults: []string{nemesis.KillLeader}, LinearizableTimeout: 30 * time.Second})
	for _, r := range res.Results {
		if r.Name == "token-order-churn" {
			if r.Pass {
				t.Fatalf("reclamation without the epoch rule did not make token-order-churn fail:\n%s", out)
			}
			t.Logf("caught: %s\n%s", r.Summary, firstLine(r.Violations))
			return
		}
	}
	t.Fatalf("no churn checker in the results:\n%s", out)
}

func firstLine(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// TestFlapLeaders hands leadership on every 1-2 s while a holder that
// stopped renewing waits to lose its key: lease-bound must pass, and with
// a full re-arm at every election (the chaos build's
// --unsafe-lease-rearm-full) it must fail, the key kept for as long as the
// flapping lasted.
func TestFlapLeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run; skipped with -short")
	}
	for _, broken := range []string{"", workload.BrokenLeaseRearmFull} {
		t.Run("broken="+broken, func(t *testing.T) {
			bin, err := proccluster.Fenced()
			if broken != "" {
				bin, err = proccluster.FencedChaos()
			}
			if err != nil {
				t.Fatal(err)
			}
			res, out := runSuite(t, runner.Config{Schedule: "short", Seed: 5, Nodes: 3, Backend: runner.DefaultBackend(), Results: resultsDir(t),
				Binary: bin, Broken: broken, Faults: []string{nemesis.FlapLeaders}, LinearizableTimeout: 30 * time.Second})
			for _, r := range res.Results {
				if r.Name != checker.LeaseBoundName {
					continue
				}
				if r.Pass == (broken != "") {
					t.Fatalf("lease-bound passed %v with broken=%q:\n%s", r.Pass, broken, out)
				}
				t.Logf("%s: %s %s", r.Name, r.Summary, firstLine(r.Violations))
				return
			}
			t.Fatalf("no %s checker in the results:\n%s", checker.LeaseBoundName, out)
		})
	}
}
