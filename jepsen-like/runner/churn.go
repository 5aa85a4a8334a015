package runner

import (
	"context"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/jepsen-like/checker"
	"github.com/fenced/fenced/jepsen-like/history"
	"github.com/fenced/fenced/jepsen-like/workload"
)

// Defaults of the churn workload: keys idle for seconds between their
// grants, a retention short enough that most of them are reclaimed and
// granted again within a short schedule.
const (
	defaultChurnKeys    = 200
	defaultKeyRetention = 2 * time.Second
)

// churning reports whether the run has the churn workload: asked for, or
// needed by its positive control.
func churning(cfg Config) bool {
	return cfg.Churn > 0 || cfg.Broken == workload.BrokenReclaimNoEpoch
}

// churnArgs are the fenced flags of a churn run: a short retention, and the
// positive control's unsafe reclamation.
func churnArgs(cfg Config) []string {
	if !churning(cfg) {
		return nil
	}
	ret := cfg.KeyRetention
	if ret <= 0 {
		ret = defaultKeyRetention
	}
	args := []string{"--key-retention", ret.String()}
	if cfg.Broken == workload.BrokenReclaimNoEpoch {
		args = append(args, "--unsafe-reclaim-ignores-epoch")
	}
	return args
}

// churnRun is a running churn workload; nil when the run has none.
type churnRun struct {
	w *workload.Churn
}

func startChurn(ctx context.Context, cfg Config, endpoints []string, rec *history.Recorder) *churnRun {
	if !churning(cfg) {
		return nil
	}
	clients, keys := cfg.Churn, cfg.ChurnKeys
	if clients <= 0 {
		clients = 4
	}
	if keys <= 0 {
		keys = defaultChurnKeys
	}
	w := workload.NewChurn(workload.ChurnConfig{Endpoints: endpoints, Clients: clients, Keys: keys, TTL: cfg.TTL,
		OpTimeout: cfg.OpTimeout, AttemptTimeout: min(1500*time.Millisecond, cfg.OpTimeout/2), Seed: cfg.Seed}, rec)
	w.Start(ctx)
	return &churnRun{w: w}
}

func (c *churnRun) stop() {
	if c != nil {
		c.w.Stop()
	}
}

// check runs the churn checkers and writes the churn history beside the
// run's own.
func (c *churnRun) check(cfg Config, ops []history.Op, final *checker.Final, log hclog.Logger) []checker.Result {
	if c == nil {
		return nil
	}
	if err := writeJSON(filepath.Join(cfg.Results, "churn-history.json"), ops); err != nil {
		log.Warn("churn history", "error", err)
	}
	return checker.Churn(ops, final, workload.ChurnPrefix)
}
