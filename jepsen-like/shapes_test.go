package main

import (
	"testing"
	"time"

	"github.com/fenced/fenced/jepsen-like/checker"
	"github.com/fenced/fenced/jepsen-like/nemesis"
	"github.com/fenced/fenced/jepsen-like/runner"
	"github.com/fenced/fenced/jepsen-like/workload"
)

// TestShapes runs each lock shape's workload (semaphore permits, shared
// and exclusive grants, multi-key sets) beside a light mutex workload,
// across a leader kill, a leader pause and (on netns) a leader partition:
// every checker must pass, the shape's own among them. Then its positive
// control, across a leader kill, where the shape's checker must fail: one
// permit too many (semaphore-overcommit), writers holding shared grants
// (rw-writer-shared), a multi-key set taken one key at a time
// (multi-sequential).
func TestShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs; skipped with -short")
	}
	bin := fencedBinary(t)
	healthy := []string{nemesis.KillLeader, nemesis.PauseLeader}
	if runner.DefaultBackend() == "netns" {
		healthy = append(healthy, nemesis.PartitionLeader)
	}
	for _, c := range []struct {
		shape, broken, checker string
	}{
		{workload.ShapeSemaphore, "", checker.PermitCountName},
		{workload.ShapeSemaphore, workload.BrokenSemaphoreOvercommit, checker.PermitCountName},
		{workload.ShapeRW, "", checker.RWExclusionName},
		{workload.ShapeRW, workload.BrokenRWWriterShared, checker.RWExclusionName},
		{workload.ShapeMulti, "", checker.MultiAtomicityName},
		{workload.ShapeMulti, workload.BrokenMultiSequential, checker.MultiAtomicityName},
	} {
		t.Run(c.shape+"/broken="+c.broken, func(t *testing.T) {
			cfg := runner.Config{Schedule: "short", Seed: 3, Nodes: 3, Backend: runner.DefaultBackend(), Results: resultsDir(t),
				Binary: bin, Shape: c.shape, Broken: c.broken, Faults: healthy, Clients: 3, Keys: 1, LinearizableTimeout: 30 * time.Second}
			if c.broken != "" {
				cfg.Seed, cfg.Faults = 7, []string{nemesis.KillLeader}
			}
			res, out := runSuite(t, cfg)
			var found *checker.Result
			for i, r := range res.Results {
				if r.Name == c.checker {
					found = &res.Results[i]
				}
			}
			if found == nil {
				t.Fatalf("no %s checker in the results:\n%s", c.checker, out)
			}
			t.Logf("%d faults, %d operations of the shape workload; %s: %s %s", res.Faults, res.ShapeOps, found.Name, found.Summary, firstLine(found.Violations))
			if c.broken == "" {
				if res.Failed > 0 {
					t.Fatalf("%d checkers failed:\n%s", res.Failed, out)
				}
				return
			}
			if found.Pass {
				t.Fatalf("positive control %s did not make %s fail:\n%s", c.broken, c.checker, out)
			}
		})
	}
}
