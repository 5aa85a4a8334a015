package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/fenced/fenced/metrics"
)

// confirmer shares leadership confirmations: every request that waits for one
// joins the next round, and one VerifyLeader answers the whole round. A round
// starts only after all its members joined, so each of them is confirmed by a
// heartbeat quorum that happened after it arrived: enough for linearizability.
type confirmer struct {
	verify func() error

	mu      sync.Mutex
	next    *round
	running bool
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
	if !c.running {
		c.running = true
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

func (c *confirmer) loop() {
	for {
		c.mu.Lock()
		r := c.next
		c.next = nil
		if r == nil {
			c.running = false
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
