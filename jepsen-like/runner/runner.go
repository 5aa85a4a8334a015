// Package runner runs one chaos test of fenced end to end: start a cluster on
// a backend, run the workload while the nemeses hurt it, heal, observe
// recovery and convergence, check the history and write the artefacts.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence/proof"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/jepsen-like/backend"
	"github.com/fenced/fenced/jepsen-like/checker"
	"github.com/fenced/fenced/jepsen-like/history"
	"github.com/fenced/fenced/jepsen-like/nemesis"
	"github.com/fenced/fenced/jepsen-like/report"
	"github.com/fenced/fenced/jepsen-like/resource"
	"github.com/fenced/fenced/jepsen-like/workload"
)

// Config is one run's configuration. It is written to config.json.
type Config struct {
	// Schedule is "short" (each fault once) or "full" (random faults for Time).
	Schedule string `json:"schedule"`
	// Time is the length of a full schedule.
	Time   time.Duration `json:"time"`
	Faults []string      `json:"faults"`
	Seed   int64         `json:"seed"`
	Nodes  int           `json:"nodes"`
	// Backend is "netns", "local" or "docker".
	Backend string `json:"backend"`
	// Image is the fenced image of the docker backend; built from the
	// module when empty.
	Image   string `json:"image,omitempty"`
	Results string `json:"results"`
	// Broken is a positive-control mode, or "".
	Broken  string        `json:"broken,omitempty"`
	TTL     time.Duration `json:"ttl"`
	Clients int           `json:"clients"`
	Keys    int           `json:"keys"`
	// Hold is how long each fault stays; Quiet the calm before each.
	Hold  time.Duration `json:"hold"`
	Quiet time.Duration `json:"quiet"`
	// fenced's own timing and snapshots.
	HeartbeatTimeout  time.Duration `json:"heartbeat_timeout"`
	ElectionTimeout   time.Duration `json:"election_timeout"`
	SnapshotThreshold uint64        `json:"snapshot_threshold"`
	SnapshotInterval  time.Duration `json:"snapshot_interval"`
	// TrailingLogs is fenced's --trailing-logs: low, so a follower that
	// fell behind is sent a snapshot (InstallSnapshot). Not passed to a
	// fenced without the flag.
	TrailingLogs uint64 `json:"trailing_logs"`
	// RecoveryLimit is the stated time within which the cluster must serve
	// again after the final heal; ConvergeLimit bounds the wait for every
	// node to reach the same state.
	RecoveryLimit       time.Duration `json:"recovery_limit"`
	ConvergeLimit       time.Duration `json:"converge_limit"`
	LinearizableTimeout time.Duration `json:"linearizable_timeout"`
	OpTimeout           time.Duration `json:"op_timeout"`
	// AvailabilityMargin is added to ElectionTimeout to bound a client's
	// time without service while a quorum is healthy (the availability
	// checker).
	AvailabilityMargin time.Duration `json:"availability_margin"`
	// Binary is the fenced binary; built from the module when empty.
	Binary string `json:"binary,omitempty"`
	// Churn adds the many-short-lived-keys workload (churn.go) with this
	// many clients; 0: none.
	Churn     int `json:"churn,omitempty"`
	ChurnKeys int `json:"churn_keys,omitempty"`
	// KeyRetention is fenced's --key-retention; 0: fenced's default.
	KeyRetention time.Duration `json:"key_retention,omitempty"`
	// Tenants runs the cluster with authentication and key ACLs, the
	// workload as the client identity alice (on the jepsen/ keys), and a
	// second identity, mallory, flooding it (tenants.go).
	Tenants bool `json:"tenants,omitempty"`
	// Shape adds a workload of another lock shape beside the mutex's
	// (workload.Shapes: semaphore, rw, multi), on keys of its own, judged
	// by that shape's checkers (shapes.go).
	Shape string `json:"shape,omitempty"`
}

// Defaults fills the zero fields.
func (c *Config) Defaults() {
	if c.Schedule == "" {
		c.Schedule = "short"
	}
	if c.Time == 0 {
		c.Time = 5 * time.Minute
	}
	if len(c.Faults) == 0 {
		c.Faults = nemesis.All
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Backend == "" {
		c.Backend = DefaultBackend()
	}
	if c.Results == "" {
		c.Results = filepath.Join("results", time.Now().Format("20060102-150405"))
	}
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	if c.Keys == 0 {
		c.Keys = 3
	}
	if c.Clients == 0 {
		c.Clients = 3 * c.Keys
	}
	if c.Hold == 0 {
		c.Hold = 5 * time.Second
	}
	if c.Quiet == 0 {
		c.Quiet = 2 * time.Second
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = 500 * time.Millisecond
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = 500 * time.Millisecond
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 32
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = time.Second
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 64
	}
	if c.RecoveryLimit == 0 {
		c.RecoveryLimit = 10 * time.Second
	}
	if c.ConvergeLimit == 0 {
		c.ConvergeLimit = 30 * time.Second
	}
	if c.LinearizableTimeout == 0 {
		c.LinearizableTimeout = 2 * time.Minute
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 4 * time.Second
	}
	if c.AvailabilityMargin == 0 {
		c.AvailabilityMargin = DefaultAvailabilityMargin
	}
}

// DefaultBackend is netns where it can run (root, ip, iptables), else local.
func DefaultBackend() string {
	if backend.NetnsUsable() == nil {
		return "netns"
	}
	return "local"
}

// Validate refuses a configuration that cannot run.
func (c *Config) Validate() error {
	if c.Schedule != "short" && c.Schedule != "full" {
		return fmt.Errorf("--schedule must be short or full, not %q", c.Schedule)
	}
	if c.Nodes != 3 && c.Nodes != 5 {
		return fmt.Errorf("--nodes must be 3 or 5, not %d", c.Nodes)
	}
	if c.Backend != "netns" && c.Backend != "local" && c.Backend != "docker" {
		return fmt.Errorf("--backend must be netns, local or docker, not %q", c.Backend)
	}
	if c.Broken != "" {
		ok := false
		for _, m := range workload.BrokenModes {
			ok = ok || m == c.Broken
		}
		if !ok {
			return fmt.Errorf("--broken must be one of %s, not %q", strings.Join(workload.BrokenModes, ", "), c.Broken)
		}
	}
	for _, f := range c.Faults {
		ok := false
		for _, n := range nemesis.Known() {
			ok = ok || n == f
		}
		if !ok {
			return fmt.Errorf("unknown fault %q (known: %s, or all)", f, strings.Join(nemesis.Known(), ", "))
		}
	}
	if c.Shape != "" && !workload.IsShape(c.Shape) {
		return fmt.Errorf("--shape must be one of %s, not %q", strings.Join(workload.Shapes, ", "), c.Shape)
	}
	if s := workload.ShapeOfBroken(c.Broken); s != "" && c.Shape != "" && c.Shape != s {
		return fmt.Errorf("--broken %s is a control of the %s workload, not of %s", c.Broken, s, c.Shape)
	}
	if tenantsOn(*c) && c.Backend == "docker" {
		return errors.New("--tenants runs on the netns or local backend (the compose cluster has no tokens file)")
	}
	if c.Clients < 1 || c.Keys < 1 || c.TTL < 100*time.Millisecond {
		return errors.New("need at least one client and one key, and a TTL of at least 100ms")
	}
	return nil
}

// Result is the outcome of a run.
type Result struct {
	Dir     string
	Results []checker.Result
	Passed  int
	Failed  int
	Ops     int
	// ShapeOps counts the shape workload's operations (shapes-history.jsonl).
	ShapeOps int
	Faults   int
	Skipped  []string
	Duration time.Duration
}

// Run runs one test. out receives the human report, ending with the line
// "N passed, N failed". An error means the run itself could not be carried
// out (no cluster); checker failures are in the Result.
func Run(ctx context.Context, cfg Config, out io.Writer, log hclog.Logger) (*Result, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	began := time.Now()
	if err := os.MkdirAll(cfg.Results, 0o755); err != nil {
		return nil, fmt.Errorf("results dir: %w", err)
	}
	if err := writeJSON(filepath.Join(cfg.Results, "config.json"), cfg); err != nil {
		return nil, err
	}
	args := []string{
		"--heartbeat-timeout", cfg.HeartbeatTimeout.String(), "--election-timeout", cfg.ElectionTimeout.String(),
		"--snapshot-threshold", fmt.Sprint(cfg.SnapshotThreshold), "--snapshot-interval", cfg.SnapshotInterval.String(),
		"--trailing-logs", fmt.Sprint(cfg.TrailingLogs),
		"--log-level", "debug",
	}
	args = append(args, churnArgs(cfg)...)
	if cfg.Broken == workload.BrokenLeaseRearmFull {
		args = append(args, "--unsafe-lease-rearm-full")
	}
	// The docker backend runs the image (and checks its flags itself).
	if cfg.Binary == "" && cfg.Backend != "docker" {
		build := proccluster.Fenced
		if cfg.Broken == workload.BrokenReclaimNoEpoch || cfg.Broken == workload.BrokenLeaseRearmFull {
			build = proccluster.FencedChaos // the only build with the unsafe flags
		}
		bin, err := build()
		if err != nil {
			return nil, fmt.Errorf("build fenced: %w", err)
		}
		cfg.Binary = bin
	}
	if cfg.Backend != "docker" {
		help, _ := exec.Command(cfg.Binary, "--help").CombinedOutput()
		var dropped []string
		if args, dropped = backend.KnownFlags(string(help), args); len(dropped) > 0 {
			log.Warn("this fenced does not know these flags: not passed", "flags", dropped)
		}
	}
	dataDir, err := os.MkdirTemp("", "fenced-jepsen-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dataDir)
	tenants, tenantArgs, err := setupTenants(cfg, dataDir)
	if err != nil {
		return nil, fmt.Errorf("tenants: %w", err)
	}
	args = append(args, tenantArgs...)
	if slices.Contains(cfg.Faults, nemesis.SlowDisk) {
		// The slow disk's control file; the flag needs a chaos build.
		args = append(args, "--unsafe-fsync-delay-file", backend.SlowFsyncFile)
	}

	bcfg := backend.Config{Nodes: cfg.Nodes, Binary: cfg.Binary, Dir: dataDir, Args: args, Image: cfg.Image, Token: tenants.adminToken()}
	if slices.Contains(cfg.Faults, nemesis.FillDisk) {
		// Each node on a file system of its own, large enough for a 64 MiB
		// WAL segment, its snapshots and the 64 MiB free-space floor.
		bcfg.DiskSize = "256M"
	}
	var b backend.Backend
	switch cfg.Backend {
	case "netns":
		b = backend.NewNetns(bcfg, log)
	case "docker":
		b = backend.NewDocker(bcfg, log)
	default:
		b = backend.NewLocal(bcfg)
	}
	// The backend is torn down whatever happens: an error, a panic, or a
	// signal (which cancels ctx).
	defer func() {
		if err := b.Close(); err != nil {
			log.Warn("backend cleanup", "error", err)
		}
	}()
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = b.Start(startCtx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start %s cluster: %w", b.Name(), err)
	}
	log.Info("cluster up", "backend", b.Name(), "nodes", cfg.Nodes, "endpoints", b.Endpoints())

	// The clients reach the nodes through proxies that can lose answers
	// (lost-answers); everything else of the harness talks to the nodes.
	px, err := backend.NewProxies(b.Endpoints(), cfg.Seed, log.Named("proxy"))
	if err != nil {
		return nil, err
	}
	defer px.Close()
	if tenants != nil {
		px.SetBearer(tenants.tokens[tenantVictim])
	}
	rec := history.NewRecorder()
	res := resource.New(cfg.Broken != workload.BrokenResourceNoCheck)
	pinKeys(ctx, b.Endpoints(), cfg, res, log)
	wl := workload.New(workload.Config{
		Endpoints: px.Endpoints(), Clients: cfg.Clients, Keys: cfg.Keys, TTL: cfg.TTL,
		OpTimeout: cfg.OpTimeout, AttemptTimeout: attemptTimeout(cfg), Broken: cfg.Broken, Seed: cfg.Seed, Log: log.Named("workload"),
		HolderPrefix: tenants.holderPrefix(),
	}, rec, res)
	env := &nemesis.Env{B: b, Rec: rec, W: wl, Rng: rand.New(rand.NewSource(cfg.Seed)), Log: log.Named("nemesis"),
		Hold: cfg.Hold, ElectionTimeout: cfg.ElectionTimeout, TTL: cfg.TTL, OnRestart: wl.NodeRestarted, Answers: px,
		Status: tenants.status(b)}

	var names, skipped []string
	for _, f := range cfg.Faults {
		if err := env.Supported(f); err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", f, err))
			fmt.Fprintf(out, "skipping nemesis %s: %v\n", f, err)
			continue
		}
		names = append(names, f)
	}

	churn := startChurn(ctx, cfg, b.Endpoints(), rec)
	shapes := startShapes(ctx, cfg, b.Endpoints(), rec)
	wl.Start(ctx)
	watchers := workload.StartWatchers(ctx, b.Endpoints(), cfg.Broken, rec.Now, log.Named("watch"), tenants.victim()...)
	tenants.start(ctx, cfg, b.Endpoints(), log.Named("flood"))
	if len(names) > 0 {
		for _, err := range env.Schedule(ctx, cfg.Schedule, names, cfg.Time, cfg.Quiet) {
			log.Warn("nemesis", "error", err)
		}
	} else {
		hold(ctx, cfg.Time)
	}

	// The final heal (each nemesis heals its own fault; this is the safety
	// net), then the cluster must serve again within the limit, counted from
	// the end of the last fault.
	healCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if err := env.HealAll(healCtx); err != nil {
		log.Warn("final heal", "error", err)
	}
	cancel()
	healedAt := time.Now()
	final := &checker.Final{RecoveryLimit: cfg.RecoveryLimit, ConvergeLimit: cfg.ConvergeLimit}
	probe(rec, b.Endpoints(), cfg, healedAt, final, cfg.Clients, tenants.admin())
	log.Info("recovery", "recovered", final.Recovered, "after", final.RecoveryTime)
	// The clients go on for a while on the healed cluster: what a fault
	// broke often shows only in the operations after it.
	hold(ctx, 2*cfg.Quiet)
	wl.Stop()
	churn.stop()
	shapes.stop()
	tenants.stop()
	converge(b, cfg, final, tenants.admin())
	readFinal(rec, b, final, tenants.admin())

	streams, observers := watchers.Stop(b.Endpoints(), 30*time.Second)
	ops, faults := rec.Ops(), rec.Faults()
	ops, hostileOps := splitKind(ops, workload.HostileWrite)
	ops, churnOps := checker.SplitPrefix(ops, workload.ChurnPrefix)
	ops, flapOps := checker.SplitPrefix(ops, nemesis.FlapPrefix)
	ops, shapeOps := checker.SplitPrefix(ops, workload.ShapesPrefix)
	final.Reclaim = churn != nil
	if churn != nil {
		final.Churning = workload.ChurnPrefix
	}
	results := checker.All(ops, final, checker.Options{TTL: cfg.TTL, LinearizableTimeout: cfg.LinearizableTimeout, Faults: faults, Availability: availability(cfg)})
	results = append(results, churn.check(cfg, churnOps, final, log)...)
	results = append(results, shapes.check(cfg, shapeOps, cfg.TTL, log)...)
	if len(flapOps) > 0 || slices.Contains(names, nemesis.FlapLeaders) {
		results = append(results, checker.LeaseBound(flapOps, nemesis.LeaseEnd, leaseBound(cfg)))
	}
	results = append(results, checker.Watch(ops, streams, observers)...)
	results = append(results, tenants.check(cfg, ops, log)...)
	if res.RequiresProofs() {
		results = append(results, checker.HostileTokens(hostileOps, workload.HostileWrite))
	}
	ops = append(ops, hostileOps...) // recorded with the run's history
	r := &Result{Dir: cfg.Results, Results: results, Ops: len(ops), ShapeOps: len(shapeOps), Faults: len(faults), Skipped: skipped}
	for _, c := range results {
		if c.Pass {
			r.Passed++
		} else {
			r.Failed++
		}
	}
	r.Duration = time.Since(began)
	if cfg.Broken != "" {
		fmt.Fprintf(out, "positive control %s: %d answers forged (or attempts held) by the harness\n", cfg.Broken, wl.BrokenAnswers()+shapes.broken())
	}
	if err := writeArtefacts(cfg, b, ops, faults, watchers.Deliveries(), final, results, r); err != nil {
		log.Warn("artefacts", "error", err)
	}
	printReport(out, r)
	return r, nil
}

// Recheck runs the checkers again on a recorded run's history, fault
// timeline and final observation, and rewrites its results and reports: for
// reading an old run with newer checkers. The run's config.json gives the TTL.
func Recheck(dir string, out io.Writer) (*Result, error) {
	var cfg Config
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	cfg.Results = dir
	cfg.Defaults()
	ops, err := history.ReadJSONL[history.Op](filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("history.jsonl: %w", err)
	}
	faults, err := history.ReadJSONL[history.Fault](filepath.Join(dir, "faults.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("faults.jsonl: %w", err)
	}
	var final *checker.Final
	if data, err := os.ReadFile(filepath.Join(dir, "final.json")); err == nil {
		final = &checker.Final{}
		if err := json.Unmarshal(data, final); err != nil {
			return nil, fmt.Errorf("final.json: %w", err)
		}
	}
	results := checker.All(ops, final, checker.Options{TTL: cfg.TTL, LinearizableTimeout: cfg.LinearizableTimeout, Faults: faults, Availability: availability(cfg)})
	r := &Result{Dir: dir, Results: results, Ops: len(ops), Faults: len(faults)}
	for _, c := range results {
		if c.Pass {
			r.Passed++
		} else {
			r.Failed++
		}
	}
	// The run's own length, as the history spans it.
	r.Duration = 0
	for _, o := range ops {
		r.Duration = max(r.Duration, time.Duration(o.Complete))
	}
	if err := writeReports(cfg, ops, faults, final, results, r, nil); err != nil {
		return r, err
	}
	printReport(out, r)
	return r, nil
}

func hold(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// probe measures recovery: the time from the final heal until an acquire, a
// verify of its token and its release all succeed. The probe's operations go
// into the history (their own key, their own client id).
func probe(rec *history.Recorder, endpoints []string, cfg Config, healed time.Time, final *checker.Final, clientID int, opts []client.Option) {
	cl := client.New(endpoints, append([]client.Option{client.WithHTTPClient(&http.Client{Timeout: 1500 * time.Millisecond})}, opts...)...)
	key, holder := "jepsen/probe", "probe"
	deadline := healed.Add(cfg.RecoveryLimit)
	err := testutil.Poll(time.Until(deadline), func() error {
		ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(time.Second))
		defer cancel()
		return probeOnce(ctx, rec, cl, key, holder, clientID)
	})
	final.RecoveryTime = time.Since(healed)
	if err != nil {
		final.RecoveryDetail = err.Error()
		return
	}
	final.Recovered = final.RecoveryTime <= cfg.RecoveryLimit
}

func probeOnce(ctx context.Context, rec *history.Recorder, cl *client.Client, key, holder string, clientID int) error {
	op := rec.Invoke(history.Op{Client: clientID, Kind: history.Acquire, Key: key, Holder: holder})
	g, err := cl.Acquire(ctx, client.AcquireRequest{Key: key, Holder: holder, TTL: "5s"})
	rec.Complete(op, func(o *history.Op) {
		if err != nil {
			// Conservatively unknown: a probe's failure is not analysed.
			o.Outcome, o.Code, o.Error = history.Info, "probe", err.Error()
			return
		}
		o.Outcome, o.Granted = history.OK, g.Token
	})
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	vop := rec.Invoke(history.Op{Client: clientID, Kind: history.Verify, Key: key, Holder: holder, Token: g.Token, Own: true})
	v, err := cl.Verify(ctx, key, g.Token.String(), holder)
	rec.Complete(vop, func(o *history.Op) {
		if err != nil || v.Reason == "unavailable" {
			o.Outcome, o.Code = history.Info, "unavailable"
			return
		}
		o.Outcome, o.Allow, o.Code, o.Current, o.CurrentHolder = history.OK, v.Allow, v.Reason, v.CurrentToken, v.Holder
	})
	if err != nil || !v.Allow {
		return fmt.Errorf("verify of the probe's own token: allow=%v reason=%s err=%v", v.Allow, v.Reason, err)
	}
	rop := rec.Invoke(history.Op{Client: clientID, Kind: history.Release, Key: key, Holder: holder, Token: g.Token})
	_, err = cl.Release(ctx, client.ReleaseRequest{Key: key, Holder: holder, Token: g.Token})
	rec.Complete(rop, func(o *history.Op) {
		if err != nil {
			o.Outcome, o.Code, o.Error = history.Info, "probe", err.Error()
			return
		}
		o.Outcome = history.OK
	})
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// converge waits until every node reports, locally, the same commit index,
// applied index, last index and key count, with everything committed applied.
func converge(b backend.Backend, cfg Config, final *checker.Final, opts []client.Option) {
	cl := client.New(nil, append([]client.Option{client.WithHTTPClient(&http.Client{Timeout: time.Second})}, opts...)...)
	start := time.Now()
	err := testutil.Poll(cfg.ConvergeLimit, func() error {
		statuses := map[string]*client.Status{}
		var detail []string
		same := true
		var ref *client.Status
		for _, id := range b.Nodes() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cl.NodeStatus(ctx, "http://"+b.Endpoint(id))
			cancel()
			statuses[id] = st
			if err != nil {
				same = false
				detail = append(detail, fmt.Sprintf("%s: %v", id, err))
				continue
			}
			detail = append(detail, fmt.Sprintf("%s: %s term %d commit %d applied %d last %d keys %d",
				id, st.State, st.Term, st.CommitIndex, st.AppliedIndex, st.LastIndex, st.Keys))
			if st.AppliedIndex != st.CommitIndex {
				same = false
			}
			if ref == nil {
				ref = st
			} else if st.AppliedIndex != ref.AppliedIndex || st.CommitIndex != ref.CommitIndex || st.LastIndex != ref.LastIndex || st.Keys != ref.Keys {
				same = false
			}
		}
		final.Statuses = statuses
		final.ConvergeDetail = strings.Join(detail, "; ")
		if !same {
			return errors.New("nodes differ")
		}
		return nil
	})
	final.Converged, final.ConvergeWait = err == nil, time.Since(start)
}

// readFinal reads every key linearizably through each node.
func readFinal(rec *history.Recorder, b backend.Backend, final *checker.Final, opts []client.Option) {
	final.At = rec.Now()
	final.Keys = map[string][]client.KeyInfo{}
	for _, id := range b.Nodes() {
		cl := client.New([]string{b.Endpoint(id)}, opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		keys, err := cl.Keys(ctx, "", 0)
		cancel()
		if err == nil {
			final.Keys[id] = keys
		}
	}
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func writeArtefacts(cfg Config, b backend.Backend, ops []history.Op, faults []history.Fault, deliveries []history.Delivery, final *checker.Final, results []checker.Result, r *Result) error {
	dir := cfg.Results
	var errs []error
	errs = append(errs, history.WriteJSONL(filepath.Join(dir, "history.jsonl"), ops))
	errs = append(errs, history.WriteJSONL(filepath.Join(dir, "faults.jsonl"), faults))
	errs = append(errs, history.WriteJSONL(filepath.Join(dir, deliveriesFile), deliveries))
	errs = append(errs, writeJSON(filepath.Join(dir, "final.json"), final))
	logDir := filepath.Join(dir, "nodes")
	errs = append(errs, os.MkdirAll(logDir, 0o755))
	paths := b.LogPaths()
	var ids []string
	for id := range paths {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		errs = append(errs, copyFile(paths[id], filepath.Join(logDir, id+".log")))
	}
	errs = append(errs, writeReports(cfg, ops, faults, final, results, r, ids))
	return errors.Join(errs...)
}

// deliveriesFile holds when each watch stream received each grant.
const deliveriesFile = "deliveries.jsonl"

// writeReports writes results.json, the porcupine visualisation and the
// summary page.
func writeReports(cfg Config, ops []history.Op, faults []history.Fault, final *checker.Final, results []checker.Result, r *Result, nodes []string) error {
	dir := cfg.Results
	errs := []error{writeJSON(filepath.Join(dir, "results.json"), results)}
	files := []string{"config.json", "history.jsonl", "faults.jsonl", deliveriesFile, "final.json", "results.json"}
	// The watch streams' deliveries, for the lag plot (absent from a run
	// without watchers or from an older one: the plot is then empty).
	deliveries, _ := history.ReadJSONL[history.Delivery](filepath.Join(dir, deliveriesFile))
	if nodes == nil {
		logs, _ := filepath.Glob(filepath.Join(dir, "nodes", "*.log"))
		for _, l := range logs {
			nodes = append(nodes, strings.TrimSuffix(filepath.Base(l), ".log"))
		}
	}
	for _, id := range nodes {
		files = append(files, "nodes/"+id+".log")
	}
	for _, c := range results {
		if c.Info != nil {
			errs = append(errs, report.Linearizability(filepath.Join(dir, "linearizability.html"), c))
			files = append(files, "linearizability.html")
		}
	}
	errs = append(errs, report.WriteSummary(dir, report.Summary{
		Title:  fmt.Sprintf("fenced jepsen-like run, seed %d, %s backend, %d nodes, %s schedule%s", cfg.Seed, cfg.Backend, cfg.Nodes, cfg.Schedule, brokenTitle(cfg.Broken)),
		Config: cfg, Results: results, Ops: ops, Faults: faults, Deliveries: deliveries, Final: final,
		Duration: r.Duration.Round(time.Second).String(), Files: files,
	}))
	return errors.Join(errs...)
}

func brokenTitle(b string) string {
	if b == "" {
		return ""
	}
	return ", positive control " + b
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func printReport(out io.Writer, r *Result) {
	fmt.Fprintf(out, "%d operations, %d faults, %v; artefacts in %s\n", r.Ops, r.Faults, r.Duration.Round(time.Second), r.Dir)
	if r.ShapeOps > 0 {
		fmt.Fprintf(out, "%d operations of the shape workload\n", r.ShapeOps)
	}
	for _, c := range r.Results {
		verdict := "PASS"
		if !c.Pass {
			verdict = "FAIL"
		}
		fmt.Fprintf(out, "%-22s %s  %s\n", c.Name, verdict, c.Summary)
		for _, v := range c.Violations {
			fmt.Fprintf(out, "    %s\n", strings.ReplaceAll(v, "\n", "\n    "))
		}
		printUnavailability(out, c.Unavailability)
	}
	fmt.Fprintf(out, "%d passed, %d failed\n", r.Passed, r.Failed)
}

// leaseBound is how long after its grant a holder that stopped renewing may
// keep its key while leaders change (docs/GUARANTEES.md: two TTLs, the new
// leader's 300 ms takeover and an election), with the slack of the
// observation (a read every 100 ms, a commit).
func leaseBound(cfg Config) time.Duration {
	return 2*cfg.TTL + 300*time.Millisecond + 2*cfg.ElectionTimeout + time.Second
}

// pinKeys fetches the cluster's published signing keys once, as a resource
// that checks proofs offline pins them, and makes the resource require a
// genuine proof with every access (the skip-proof control ignores them).
// It waits until every node's key is published; a cluster that does not
// publish them in time runs without proofs (and without the hostile
// client), with a warning.
func pinKeys(ctx context.Context, endpoints []string, cfg Config, res *resource.Resource, log hclog.Logger) {
	cl := client.New(endpoints)
	deadline := time.Now().Add(time.Minute)
	for {
		ks, err := cl.SigningKeys(ctx)
		if err == nil && (len(ks.Keys) < cfg.Nodes || ks.Cluster == "") {
			err = fmt.Errorf("%d of %d nodes' keys published, cluster id %q", len(ks.Keys), cfg.Nodes, ks.Cluster)
		}
		if err == nil {
			raw, _ := json.Marshal(ks)
			set, perr := proof.ParseJWKS(raw)
			if perr == nil {
				res.RequireProofs(set, ks.Cluster, cfg.Broken == workload.BrokenResourceSkipProof)
				log.Info("resource pinned the signing keys", "keys", set.Len(), "cluster", ks.Cluster)
				return
			}
			err = perr
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log.Warn("signing keys not published: the resource runs without proofs", "error", err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// splitKind moves the operations of kind out of ops.
func splitKind(ops []history.Op, kind string) (rest, of []history.Op) {
	for _, o := range ops {
		if o.Kind == kind {
			of = append(of, o)
		} else {
			rest = append(rest, o)
		}
	}
	return rest, of
}
