package client

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// readyPoll is how often WaitReady asks the nodes again.
const readyPoll = 100 * time.Millisecond

// WaitReady returns the status of the first node that answers, itself, that
// it is the ready leader (elected, its first barrier applied: it serves
// requests), asking every endpoint in parallel until ctx ends. A leader that
// another node merely remembers does not count: it may be gone. When ctx
// ends first, the error names what each endpoint last said.
func (c *Client) WaitReady(ctx context.Context) (*Status, error) {
	if len(c.endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrUnavailable)
	}
	fails := newFailures()
	for {
		if st := c.pollReady(ctx, fails); st != nil {
			return st, nil
		}
		if fails.allPermanent(len(c.endpoints)) {
			return nil, fails.err(ErrUnavailable, "no endpoint can be used", nil)
		}
		select {
		case <-ctx.Done():
			return nil, fails.err(ErrUnavailable, "no ready leader before the deadline", ctx.Err())
		case <-time.After(readyPoll):
		}
	}
}

// pollReady asks every endpoint once for its status and returns a ready
// leader's, recording why the others are not.
func (c *Client) pollReady(ctx context.Context, fails *failures) *Status {
	type answer struct {
		ep  string
		st  *Status
		err error
	}
	answers := make(chan answer, len(c.endpoints))
	var wg sync.WaitGroup
	for _, ep := range c.endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, c.attemptTimeout)
			defer cancel()
			st, err := c.NodeStatus(actx, ep)
			answers <- answer{ep, st, err}
		}()
	}
	wg.Wait()
	close(answers)
	var ready *Status
	for a := range answers {
		switch {
		case a.err != nil:
			fails.record(a.ep, classify(a.err, c.attemptTimeout, ctx.Err() != nil))
		case a.st.Ready && a.st.LeaderID == a.st.ID:
			ready = a.st
		case a.st.LeaderID == "":
			fails.record(a.ep, failure{reason: fmt.Sprintf("%s %s, knows no leader", a.st.State, a.st.ID)})
		default:
			fails.record(a.ep, failure{reason: fmt.Sprintf("%s %s, leader %s", a.st.State, a.st.ID, a.st.LeaderID)})
		}
	}
	return ready
}
