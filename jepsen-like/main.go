// Command jepsen-like runs fenced's chaos suite: real fenced processes under
// partitions, crashes and pauses, a recorded history of lock and fenced
// resource operations, and checkers that judge it. It ends with the line
// "N passed, N failed" and exits non-zero when a checker failed.
//
//	go run ./jepsen-like --schedule short --seed 1
//	go run ./jepsen-like --backend docker                 # the compose cluster
//	go run ./jepsen-like --schedule full --time 10m --nodes 5 --faults all
//	go run ./jepsen-like --broken stale-verify --faults client-pause
//	go run ./jepsen-like --tenants --faults kill-leader,partition-leader
//	go run ./jepsen-like --shape semaphore --faults kill-leader,pause-leader
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/fenced/fenced/jepsen-like/nemesis"
	"github.com/fenced/fenced/jepsen-like/runner"
	"github.com/fenced/fenced/jepsen-like/workload"
)

// recheck is the --check directory.
var recheck string

func main() {
	os.Exit(run(os.Args[1:]))
}

func parse(args []string) (runner.Config, string, error) {
	var cfg runner.Config
	var faults, logLevel string
	fs := pflag.NewFlagSet("jepsen-like", pflag.ContinueOnError)
	fs.StringVar(&recheck, "check", "", "run no cluster: check the recorded run in this results directory again and rewrite its reports")
	fs.DurationVar(&cfg.Time, "time", 5*time.Minute, "length of a full schedule (the short schedule takes what its faults need)")
	fs.StringVar(&faults, "faults", "all", "faults to inject, comma-separated, or all ("+strings.Join(nemesis.All, ",")+"); also "+strings.Join(nemesis.Extra, ","))
	fs.Int64Var(&cfg.Seed, "seed", 0, "random seed of the schedule and the clients (0: from the clock)")
	fs.IntVar(&cfg.Nodes, "nodes", 3, "cluster size: 3 or 5")
	fs.StringVar(&cfg.Backend, "backend", runner.DefaultBackend(), "netns (root: a network namespace per node, partitions with iptables), local (loopback, no partitions) or docker (the compose cluster; partitions as root)")
	fs.StringVar(&cfg.Image, "image", "", "fenced image of the docker backend (default: built from this module, removed afterwards)")
	fs.StringVar(&cfg.Results, "results", "", "results directory (default results/<timestamp>)")
	fs.StringVar(&cfg.Broken, "broken", "", "positive control, which must make its checker fail: "+strings.Join(workload.BrokenModes, ", "))
	fs.StringVar(&cfg.Schedule, "schedule", "short", "short (every fault once) or full (random faults for --time)")
	fs.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "lease TTL of every grant")
	fs.IntVar(&cfg.Clients, "clients", 9, "concurrent clients")
	fs.IntVar(&cfg.Keys, "keys", 3, "keys the clients contend for")
	fs.DurationVar(&cfg.Hold, "hold", 5*time.Second, "how long each fault stays before its heal")
	fs.DurationVar(&cfg.OpTimeout, "op-timeout", 4*time.Second, "bound on one client operation, retries included (shorter: more unknown outcomes)")
	fs.DurationVar(&cfg.AvailabilityMargin, "availability-margin", runner.DefaultAvailabilityMargin, "while a quorum is healthy, no client may go longer than the election timeout plus this without service")
	fs.DurationVar(&cfg.RecoveryLimit, "recovery-limit", 10*time.Second, "the cluster must serve again within this time after the final heal")
	fs.DurationVar(&cfg.LinearizableTimeout, "check-timeout", 2*time.Minute, "bound on the linearizability check (porcupine)")
	fs.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", 32, "fenced --snapshot-threshold (low, so restarts go through snapshots)")
	fs.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", time.Second, "fenced --snapshot-interval")
	fs.Uint64Var(&cfg.TrailingLogs, "trailing-logs", 64, "fenced --trailing-logs (low, so a lagging follower is sent a snapshot; not passed to a fenced without the flag)")
	fs.StringVar(&cfg.Binary, "fenced", "", "fenced binary to test (default: built from this module)")
	fs.IntVar(&cfg.Churn, "churn", 0, "clients of the many-short-lived-keys workload, whose keys the cluster reclaims and grants again (0: none)")
	fs.IntVar(&cfg.ChurnKeys, "churn-keys", 200, "distinct keys the churn clients draw from")
	fs.DurationVar(&cfg.KeyRetention, "key-retention", 2*time.Second, "fenced --key-retention of a churn run")
	fs.BoolVar(&cfg.Tenants, "tenants", false, "two tenants: authentication and key ACLs on, the workload as client alice on the jepsen/ keys, and client mallory flooding (watches past its share, request ids, waiters, ended keys, alice's keys); the tenant-isolation checker judges it")
	fs.StringVar(&cfg.Shape, "shape", "", "add the workload of another lock shape on keys of its own, judged by its checkers: "+strings.Join(workload.Shapes, ", "))
	fs.StringVar(&logLevel, "log-level", "info", "harness log level")
	if err := fs.Parse(args); err != nil {
		return cfg, "", err
	}
	if fs.NArg() > 0 {
		return cfg, "", fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if faults != "all" {
		for _, f := range strings.Split(faults, ",") {
			if f = strings.TrimSpace(f); f != "" {
				cfg.Faults = append(cfg.Faults, f)
			}
		}
		if len(cfg.Faults) == 0 {
			return cfg, "", errors.New("--faults names no fault")
		}
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano() % 1_000_000
	}
	return cfg, logLevel, nil
}

func run(args []string) int {
	cfg, level, err := parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-like:", err)
		return 2
	}
	if recheck != "" {
		res, err := runner.Recheck(recheck, os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "jepsen-like:", err)
			return 2
		}
		if res.Failed > 0 {
			return 1
		}
		return 0
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "jepsen", Level: hclog.LevelFromString(level), Output: os.Stderr})
	// SIGINT/SIGTERM end the schedule early; the run still heals, checks
	// what it recorded and removes its namespaces. A second signal kills.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	defer stop()
	res, err := runner.Run(ctx, cfg, os.Stdout, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen-like:", err)
		fmt.Println("0 passed, 1 failed")
		return 2
	}
	if res.Failed > 0 {
		return 1
	}
	return 0
}
