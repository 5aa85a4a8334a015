package nemesis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/fenced/fenced/jepsen-like/backend"
)

// LostAnswers is the nemesis that loses answers: while it lasts, the proxies
// between the clients and the nodes lose each answer with probability
// LostAnswerRate after the node served the request (the connection dropped
// before the answer, or cut inside it), and an operator force-releases the
// current grant of a random key every 50-150 ms. Clients see unknown outcomes
// and retry: acquires (waiting ones too), renewals, releases, forced ones.
const LostAnswers = "lost-answers"

// LostAnswerRate is the probability with which a proxy loses an answer
// during the lost-answers fault.
const LostAnswerRate = 0.25

// AnswerLoser is what the lost-answers nemesis needs of the proxies.
type AnswerLoser interface {
	SetLoss(prob float64)
	Stats() backend.LossStats
}

// ForceReleaser is what the lost-answers nemesis needs of the workload: an
// operator whose forced releases it turns on while answers are lost.
type ForceReleaser interface {
	ForceReleases(on bool)
}

func (e *Env) supportsLostAnswers() error {
	if e.Answers == nil {
		return errors.New("the clients do not go through proxies")
	}
	return nil
}

func (e *Env) lostAnswers(ctx context.Context) error {
	op, _ := e.W.(ForceReleaser)
	f := e.Rec.BeginFault(LostAnswers, nil, fmt.Sprintf("answers lost with probability %.2f after the node served the request; forced releases on: %v", LostAnswerRate, op != nil))
	before := e.Answers.Stats()
	e.Answers.SetLoss(LostAnswerRate)
	if op != nil {
		op.ForceReleases(true)
	}
	hold(ctx, e.Hold)
	e.healAnswers()
	after := e.Answers.Stats()
	e.Rec.EndFault(f, lossDelta(before, after))
	return nil
}

// healAnswers stops losing answers and the forced releases.
func (e *Env) healAnswers() {
	if e.Answers != nil {
		e.Answers.SetLoss(0)
	}
	if op, ok := e.W.(ForceReleaser); ok {
		op.ForceReleases(false)
	}
}

// lossDelta describes what the proxies lost between two counts.
func lossDelta(before, after backend.LossStats) string {
	var routes []string
	for r, n := range after.Lost {
		if d := n - before.Lost[r]; d > 0 {
			routes = append(routes, fmt.Sprintf("%s %d", r, d))
		}
	}
	sort.Strings(routes)
	dropped, cut := after.Dropped-before.Dropped, after.Cut-before.Cut
	return fmt.Sprintf("%d of %d answers lost (%d dropped, %d cut): %s",
		dropped+cut, after.Forwarded-before.Forwarded, dropped, cut, strings.Join(routes, ", "))
}
