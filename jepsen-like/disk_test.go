package main

import (
	"os"
	"testing"
	"time"

	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/jepsen-like/nemesis"
	"github.com/fenced/fenced/jepsen-like/runner"
)

// TestFillDisk runs the disk nemesis (each node on a 256 MiB ext4 file system
// of its own; the leader's is filled, held full, and freed) and requires every
// checker to pass: no acknowledged grant is lost, and the cluster serves new
// grants again once the space is freed.
func TestFillDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the disk nemesis needs root (a loop device per node)")
	}
	bin, err := proccluster.Fenced()
	if err != nil {
		t.Fatal(err)
	}
	res, out := runSuite(t, runner.Config{Schedule: "short", Seed: 3, Nodes: 3, Backend: runner.DefaultBackend(), Results: resultsDir(t),
		Binary: bin, Faults: []string{nemesis.FillDisk}, LinearizableTimeout: 30 * time.Second})
	t.Logf("\n%s", out)
	if len(res.Skipped) > 0 {
		t.Fatalf("the disk nemesis was skipped: %v", res.Skipped)
	}
	if res.Failed > 0 {
		t.Fatalf("%d checkers failed", res.Failed)
	}
	if res.Faults < 1 {
		t.Fatal("no disk fault recorded")
	}
}

// TestSlowDisk runs the slow-disk nemesis (every raft log fsync of the
// leader takes 3 s longer, past its 2 s --log-stall-bound) on a chaos build
// and requires every checker to pass: the leader steps down, the others
// serve, and it catches up once its disk is fast again.
func TestSlowDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run; skipped with -short")
	}
	bin, err := proccluster.FencedChaos()
	if err != nil {
		t.Fatal(err)
	}
	res, out := runSuite(t, runner.Config{Schedule: "short", Seed: 3, Nodes: 3, Backend: runner.DefaultBackend(), Results: resultsDir(t),
		Binary: bin, Faults: []string{nemesis.SlowDisk}, LinearizableTimeout: 30 * time.Second})
	t.Logf("\n%s", out)
	if len(res.Skipped) > 0 {
		t.Fatalf("the slow-disk nemesis was skipped: %v", res.Skipped)
	}
	if res.Failed > 0 {
		t.Fatalf("%d checkers failed", res.Failed)
	}
	if res.Faults < 1 {
		t.Fatal("no disk fault recorded")
	}
}
