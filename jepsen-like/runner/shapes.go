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

// shapeClients is how many clients a shape workload runs: more than the
// semaphore's limit, so permits are contended; two writers among six
// readers; five sets of two or three of the multi-key pool's four keys.
func shapeClients(shape string) int {
	if shape == workload.ShapeMulti {
		return 5
	}
	return 8
}

// shapeOf returns the shape workload of a run: asked for, or needed by
// its positive control; "" for none.
func shapeOf(cfg Config) string {
	if cfg.Shape != "" {
		return cfg.Shape
	}
	return workload.ShapeOfBroken(cfg.Broken)
}

// shapesRun is a running shape workload; nil when the run has none.
type shapesRun struct {
	shape string
	w     *workload.ShapesWorkload
}

func startShapes(ctx context.Context, cfg Config, endpoints []string, rec *history.Recorder) *shapesRun {
	shape := shapeOf(cfg)
	if shape == "" {
		return nil
	}
	w := workload.NewShapes(workload.ShapesConfig{Endpoints: endpoints, Shape: shape, Clients: shapeClients(shape), TTL: cfg.TTL,
		OpTimeout: cfg.OpTimeout, AttemptTimeout: attemptTimeout(cfg), Broken: cfg.Broken, Seed: cfg.Seed}, rec)
	w.Start(ctx)
	return &shapesRun{shape: shape, w: w}
}

func (s *shapesRun) stop() {
	if s != nil {
		s.w.Stop()
	}
}

// broken returns how many operations the shape's positive control forged.
func (s *shapesRun) broken() int {
	if s == nil {
		return 0
	}
	return s.w.BrokenAnswers()
}

// check runs the shape's checkers and writes its history beside the
// run's own (--check does not judge it again).
func (s *shapesRun) check(cfg Config, ops []history.Op, ttl time.Duration, log hclog.Logger) []checker.Result {
	if s == nil {
		return nil
	}
	if err := history.WriteJSONL(filepath.Join(cfg.Results, "shapes-history.jsonl"), ops); err != nil {
		log.Warn("shapes history", "error", err)
	}
	return checker.Shapes(s.shape, ops, ttl)
}
