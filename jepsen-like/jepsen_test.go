package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/jepsen-like/checker"
	"github.com/fenced/fenced/jepsen-like/nemesis"
	"github.com/fenced/fenced/jepsen-like/runner"
	"github.com/fenced/fenced/jepsen-like/workload"
)

var summaryLine = regexp.MustCompile(`(?m)^\d+ passed, \d+ failed$`)

// resultsDir is kept when the test fails, so its artefacts can be read, and
// removed when it passes.
func resultsDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fenced-jepsen-"+filepath.Base(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("artefacts kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

func fencedBinary(t *testing.T) string {
	t.Helper()
	bin, err := proccluster.Fenced()
	if err != nil {
		t.Skipf("cannot build fenced here, so no cluster can run: %v", err)
	}
	return bin
}

func runSuite(t *testing.T, cfg runner.Config) (*runner.Result, string) {
	t.Helper()
	var out bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Name: "jepsen", Level: hclog.Warn, Output: os.Stderr})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := runner.Run(ctx, cfg, &out, log)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !summaryLine.MatchString(out.String()) {
		t.Errorf("no 'N passed, N failed' line in the report:\n%s", out.String())
	}
	return res, out.String()
}

// TestShortSchedule injects every fault once, with a fixed seed, into a
// three-node cluster (netns backend as root, local otherwise) and requires
// every checker to pass.
func TestShortSchedule(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run of a few minutes; skipped with -short")
	}
	bin := fencedBinary(t)
	be := runner.DefaultBackend()
	if be == "local" {
		t.Log("netns backend unavailable (needs root, ip and iptables): running on the local backend, partitions skipped")
	}
	res, out := runSuite(t, runner.Config{Schedule: "short", Seed: 1, Nodes: 3, Backend: be, Results: resultsDir(t), Binary: bin})
	t.Logf("\n%s", out)
	if res.Failed > 0 {
		t.Fatalf("%d checkers failed", res.Failed)
	}
	want := len(nemesis.All) - len(res.Skipped)
	if res.Faults < want {
		t.Fatalf("%d faults recorded, want at least %d (every supported nemesis once)", res.Faults, want)
	}
	if res.Ops < 1000 {
		t.Fatalf("only %d operations recorded: the workload barely ran", res.Ops)
	}
}

// TestPositiveControls runs each deliberately broken variant and requires the
// checker that guards against it to fail: a checker that never fails proves
// nothing.
func TestPositiveControls(t *testing.T) {
	if testing.Short() {
		t.Skip("runs five short clusters; skipped with -short")
	}
	bin := fencedBinary(t)
	cases := []struct {
		broken, fault, checker string
	}{
		// A paused holder writes with its stale token: only a resource that
		// checks tokens refuses it.
		{workload.BrokenResourceNoCheck, nemesis.ClientPause, "resource"},
		// The resource requires proofs but never checks them: the hostile
		// client's made-up tokens are admitted.
		{workload.BrokenResourceSkipProof, nemesis.ClientPause, checker.HostileTokensName},
		// Every node restarts; tokens that restart at 1 go backwards.
		{workload.BrokenTokenReset, nemesis.KillAll, "token-order"},
		// Verifies answered from earlier verdicts allow superseded tokens.
		{workload.BrokenStaleVerify, nemesis.ClientPause, "stale-verify"},
		// Renewals acknowledged after the grant ended (as by a deposed
		// leader that never checked) promise leases a newer grant overtook.
		{workload.BrokenStaleRenew, nemesis.ClientPause, "lease-no-early-expiry"},
		// Attempts that wait for the whole operation's deadline: a frozen
		// follower listed first holds every client past the bound.
		{workload.BrokenNoAttemptDeadline, nemesis.FreezeFollower, checker.AvailabilityName},
		// A forced release retried after a lost answer looks the current
		// token up again and ends the grant its first attempt handed to a
		// waiter.
		{workload.BrokenForceReleaseLookup, nemesis.LostAnswers, "release-intent"},
		// Watchers that drop grants, or get an old event again.
		{workload.BrokenWatchDrop, nemesis.KillLeader, "watch-complete"},
		{workload.BrokenWatchReplay, nemesis.KillLeader, "watch-order"},
	}
	for _, c := range cases {
		t.Run(c.broken, func(t *testing.T) {
			res, out := runSuite(t, runner.Config{Schedule: "short", Seed: 7, Nodes: 3, Backend: runner.DefaultBackend(),
				Results: resultsDir(t), Binary: bin, Broken: c.broken, Faults: []string{c.fault},
				LinearizableTimeout: 30 * time.Second})
			for _, r := range res.Results {
				if r.Name == c.checker {
					if r.Pass {
						t.Fatalf("positive control %s did not make checker %s fail:\n%s", c.broken, c.checker, out)
					}
					return
				}
			}
			t.Fatalf("no checker %s in the results", c.checker)
		})
	}
}

func TestParseFlags(t *testing.T) {
	cfg, _, err := parse([]string{"--faults", "kill-all, pause-leader", "--seed", "5", "--nodes", "5", "--schedule", "full", "--time", "90s"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Faults) != 2 || cfg.Faults[1] != "pause-leader" || cfg.Seed != 5 || cfg.Nodes != 5 || cfg.Time != 90*time.Second {
		t.Fatalf("parsed %+v", cfg)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"--nodes", "4"}, {"--faults", "nope"}, {"--broken", "nope"}, {"--schedule", "long"}, {"--shape", "nope"},
		{"--shape", "rw", "--broken", "multi-sequential"}} {
		cfg, _, err := parse(bad)
		if err == nil {
			cfg.Defaults()
			err = cfg.Validate()
		}
		if err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
