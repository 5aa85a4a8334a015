package cluster

import (
	"sync"

	"github.com/fenced/fenced/metrics"
)

// waitq holds, per key, the acquires waiting for the key on the leader, in
// arrival order. Only the head is woken when the key frees, so waiters are
// served first come, first served.
type waitq struct {
	mu    sync.Mutex
	queue map[string][]*waiter
}

type waiter struct {
	args AcquireArgs
	wake chan struct{} // buffered: a wake-up is never lost
	// claimed is set (under the queue's lock) when a release or expiry
	// carries this waiter's acquire; the outcome arrives on handoff.
	claimed bool
	handoff chan handoffResult
	// keys are the keys of a multi-key acquire, which waits in the line of
	// each of them (joinAll); nil for one key (args.Key).
	keys []string
}

// handoffResult is the outcome of a waiter's acquire carried by a release or
// an expiry.
type handoffResult struct {
	grant Grant
	err   error
}

func newWaitq() *waitq { return &waitq{queue: map[string][]*waiter{}} }

// join appends a waiter for key.
func (q *waitq) join(a AcquireArgs) *waiter {
	key := a.Key
	w := &waiter{args: a, wake: make(chan struct{}, 1), handoff: make(chan handoffResult, 1)}
	q.mu.Lock()
	q.queue[key] = append(q.queue[key], w)
	q.mu.Unlock()
	metrics.Waiters.Inc()
	return w
}

// leave removes w; if it was the head, the next waiter is woken so the key is
// not left idle while others wait. It reports whether w was claimed by a
// handoff, whose outcome the caller must then take.
func (q *waitq) leave(key string, w *waiter) (claimed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	claimed = w.claimed
	ws := q.queue[key]
	for i, x := range ws {
		if x != w {
			continue
		}
		metrics.Waiters.Dec()
		ws = append(ws[:i:i], ws[i+1:]...)
		if len(ws) == 0 {
			delete(q.queue, key)
			return claimed
		}
		q.queue[key] = ws
		if i == 0 {
			notify(ws[0])
		}
		return claimed
	}
	return claimed
}

// joinAll appends one waiter to the line of each of keys, in one step
// under the queue's lock: any two waiters then have the same order in every
// line they share, so the oldest waiter is first in each of its lines, and
// multi-key waiters cannot wait for each other in a cycle.
func (q *waitq) joinAll(a AcquireArgs, keys []string) *waiter {
	w := &waiter{args: a, wake: make(chan struct{}, 1), handoff: make(chan handoffResult, 1), keys: keys}
	q.mu.Lock()
	for _, k := range keys {
		q.queue[k] = append(q.queue[k], w)
	}
	q.mu.Unlock()
	metrics.Waiters.Add(float64(len(keys)))
	return w
}

// leaveAll takes a multi-key waiter out of each of its lines, waking the
// next of every line it was first in.
func (q *waitq) leaveAll(w *waiter) {
	for _, k := range w.keys {
		q.leave(k, w)
	}
}

// isHeadAll reports whether w is first in line for each of its keys.
func (q *waitq) isHeadAll(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, k := range w.keys {
		if ws := q.queue[k]; len(ws) == 0 || ws[0] != w {
			return false
		}
	}
	return true
}

// claim marks the head waiter of key as the one a release hands the key to.
func (q *waitq) claim(key string) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queue[key]
	if len(ws) == 0 || ws[0].claimed || ws[0].keys != nil {
		// A multi-key waiter is never handed one key: it asks for all of
		// them itself once the end of a grant woke it.
		return nil
	}
	ws[0].claimed = true
	return ws[0]
}

// unclaim returns a waiter to the line when its handoff did not happen. It
// reports false when the waiter already left the line: that waiter waits for
// a handoff result instead.
func (q *waitq) unclaim(key string, w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.claimed = false
	for _, x := range q.queue[key] {
		if x == w {
			notify(w)
			return true
		}
	}
	return false
}

// isHead reports whether w is first in line for key.
func (q *waitq) isHead(key string, w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queue[key]
	return len(ws) > 0 && ws[0] == w
}

// waiting reports whether anyone waits for key.
func (q *waitq) waiting(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue[key]) > 0
}

// kick wakes the head waiter of key.
func (q *waitq) kick(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ws := q.queue[key]; len(ws) > 0 {
		notify(ws[0])
	}
}

// kickAll wakes every waiter, so that they notice a loss of leadership.
func (q *waitq) kickAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ws := range q.queue {
		for _, w := range ws {
			notify(w)
		}
	}
}

// holders returns the holders waiting for key, first come first; nil when
// none.
func (q *waitq) holders(key string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, w := range q.queue[key] {
		out = append(out, w.args.Holder)
	}
	return out
}

// count returns the number of waiters on all keys.
func (q *waitq) count() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, ws := range q.queue {
		n += len(ws)
	}
	return n
}

func notify(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
