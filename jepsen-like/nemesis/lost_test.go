package nemesis

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/jepsen-like/backend"
	"github.com/fenced/fenced/jepsen-like/history"
	"github.com/fenced/fenced/jepsen-like/workload"
)

// fakeAnswers records the loss probabilities it was set to and loses a few
// answers while one is set.
type fakeAnswers struct {
	mu    sync.Mutex
	set   []float64
	stats backend.LossStats
}

func (f *fakeAnswers) SetLoss(p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = append(f.set, p)
	if p > 0 {
		f.stats.Forwarded += 10
		f.stats.Dropped++
		f.stats.Cut++
		f.stats.Lost = map[string]int{"release+force": 2}
	}
}

func (f *fakeAnswers) Stats() backend.LossStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// fakeOperator is a workload whose forced releases are switched.
type fakeOperator struct {
	mu sync.Mutex
	on []bool
}

func (f *fakeOperator) RequestPause(context.Context, time.Duration) (workload.PauseReport, error) {
	return workload.PauseReport{}, nil
}

func (f *fakeOperator) ForceReleases(on bool) {
	f.mu.Lock()
	f.on = append(f.on, on)
	f.mu.Unlock()
}

// lost-answers turns the loss and the forced releases on for the hold and
// off at its heal, and records what was lost on the timeline; without
// proxies it is not supported.
func TestLostAnswers(t *testing.T) {
	e := &Env{B: fakeBackend{ids: []string{"n1", "n2", "n3"}}, Rec: history.NewRecorder(), Log: hclog.NewNullLogger(), Hold: 10 * time.Millisecond}
	if err := e.Supported(LostAnswers); err == nil {
		t.Fatal("lost-answers supported without proxies")
	}
	answers, op := &fakeAnswers{}, &fakeOperator{}
	e.Answers, e.W = answers, op
	if err := e.Supported(LostAnswers); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background(), LostAnswers); err != nil {
		t.Fatal(err)
	}
	if len(answers.set) != 2 || answers.set[0] != LostAnswerRate || answers.set[1] != 0 {
		t.Fatalf("loss set to %v, want [%v 0]", answers.set, LostAnswerRate)
	}
	if len(op.on) != 2 || !op.on[0] || op.on[1] {
		t.Fatalf("forced releases switched %v, want [true false]", op.on)
	}
	f := e.Rec.Faults()
	if len(f) != 1 || f[0].Nemesis != LostAnswers || !strings.Contains(f[0].Detail, "2 of 10 answers lost (1 dropped, 1 cut): release+force 2") {
		t.Fatalf("timeline %+v", f)
	}
	// The final heal (HealAll) stops the loss too.
	answers.SetLoss(0.5)
	e.healAnswers()
	if answers.set[len(answers.set)-1] != 0 {
		t.Fatalf("loss after the final heal: %v", answers.set)
	}
}
