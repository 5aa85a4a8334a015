package api

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// checkTimeout bounds one check with the leader shared by watch streams: a
// healthy leader answers in a round trip and a quorum's heartbeat, so a
// check that takes this long fails, and the streams that waited for it end
// (their watchers resume elsewhere) instead of waiting on a leader that is
// gone.
const checkTimeout = 5 * time.Second

// indexChecks shares a node's checks with the leader among its watch
// streams. A stream that starts, or that was quiet for its progress
// interval, needs a check that began after some moment (its arrival, or the
// last time it sent anything): the newest check that began since then
// serves it, or the one running if it began since then, or else the next
// one, which starts when the running one ends and serves every stream that
// waited for it. However many streams a node serves, and whatever their
// progress intervals, it checks with the leader at most once at a time, as
// often as the most demanding stream needs.
type indexChecks struct {
	mu   sync.Mutex
	last *indexCheck // the newest check that ended
	cur  *indexCheck // the check running, if any
	next *indexCheck // the check that starts when cur ends, if any waits
}

// indexCheck is one check: the read index the leader gave and this node
// applied, or why there is none.
type indexCheck struct {
	started time.Time
	run     func(context.Context) (uint64, error)
	done    chan struct{}
	index   uint64
	err     error
}

// get returns the outcome of a check that began at or after since, running
// run for it when no such check ran or runs. ctx bounds the wait, not the
// check, which others may share; a wait it ends is ErrUnavailable.
func (c *indexChecks) get(ctx context.Context, since time.Time, run func(context.Context) (uint64, error)) (uint64, error) {
	c.mu.Lock()
	if l := c.last; l != nil && !l.started.Before(since) {
		c.mu.Unlock()
		return l.index, l.err
	}
	var ck *indexCheck
	switch {
	case c.cur == nil:
		ck = &indexCheck{run: run, done: make(chan struct{})}
		c.start(ck)
	case !c.cur.started.Before(since):
		ck = c.cur
	default:
		if c.next == nil {
			c.next = &indexCheck{run: run, done: make(chan struct{})}
		}
		ck = c.next
	}
	c.mu.Unlock()
	select {
	case <-ck.done:
		return ck.index, ck.err
	case <-ctx.Done():
		// A wait bounded by a stream's progress interval that a slow
		// leader outlasts: this node cannot say it is current, which the
		// watcher resumes from (here or elsewhere); not an internal error.
		return 0, fmt.Errorf("%w: no confirmation from the leader within the wait: %v", ErrUnavailable, ctx.Err())
	}
}

// start runs ck now. The caller holds c.mu.
func (c *indexChecks) start(ck *indexCheck) {
	ck.started = time.Now()
	c.cur = ck
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		ck.index, ck.err = ck.run(ctx)
		if ck.err != nil && ctx.Err() != nil {
			ck.err = fmt.Errorf("%w: no answer from the leader within %v", ErrUnavailable, checkTimeout)
		}
		cancel()
		c.mu.Lock()
		defer c.mu.Unlock()
		close(ck.done)
		c.last, c.cur = ck, nil
		if n := c.next; n != nil {
			c.next = nil
			c.start(n)
		}
	}()
}
