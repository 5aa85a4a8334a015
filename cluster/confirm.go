package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/fenced/fenced/metrics"
)

// maxRounds is how many confirmation rounds may be in flight at once. A new
// round starts as soon as requests wait and fewer are in flight, so a request
// never waits for a round that started before it arrived to finish first.
const maxRounds = 2

// confirmer shares leadership confirmations: every request that waits for one
// joins the next round, and one VerifyLeader answers the whole round. A round
// starts only after all its members joined, so each of them is confirmed by a
// heartbeat quorum asked for after it arrived: enough for linearizability.
// That holds because fenced's raft counts towards a VerifyLeader only
// heartbeats sent after it was asked for (third_party/raft/PATCHES.md);
// upstream also counts answers to earlier ones.
type confirmer struct {
	verify func() error

	mu       sync.Mutex
	next     *round
	inflight int
}

type round struct {
	done    chan struct{}
	err     error
	members int
}

func (c *confirmer) confirm(ctx context.Context) error {
	c.mu.Lock()
	if c.next == nil {
		c.next = &round{done: make(chan struct{})}
	}
	r := c.next
	r.members++
	if c.inflight < maxRounds {
		c.inflight++
		go c.loop()
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop runs rounds while requests wait; at most maxRounds loops run.
func (c *confirmer) loop() {
	for {
		c.mu.Lock()
		r := c.next
		c.next = nil
		if r == nil {
			c.inflight--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		start := time.Now()
		r.err = c.verify()
		metrics.ConfirmLatency.Observe(time.Since(start).Seconds())
		metrics.ConfirmBatch.Observe(float64(r.members))
		close(r.done)
	}
}
