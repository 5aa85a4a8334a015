package cluster

import (
	"sync"
)

// waitq holds, per key, the acquires waiting for the key on the leader, in
// arrival order. Only the head is woken when the key frees, so waiters are
// served first come, first served.
type waitq struct {
	mu    sync.Mutex
	queue map[string][]*waiter
}

type waiter struct {
	holder string
	wake   chan struct{} // buffered: a wake-up is never lost
}

func newWaitq() *waitq { return &waitq{queue: map[string][]*waiter{}} }

// join appends a waiter for key.
func (q *waitq) join(key, holder string) *waiter {
	w := &waiter{holder: holder, wake: make(chan struct{}, 1)}
	q.mu.Lock()
	q.queue[key] = append(q.queue[key], w)
	q.mu.Unlock()
	return w
}

// leave removes w; if it was the head, the next waiter is woken so the key is
// not left idle while others wait.
func (q *waitq) leave(key string, w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queue[key]
	for i, x := range ws {
		if x != w {
			continue
		}
		ws = append(ws[:i:i], ws[i+1:]...)
		if len(ws) == 0 {
			delete(q.queue, key)
			return
		}
		q.queue[key] = ws
		if i == 0 {
			notify(ws[0])
		}
		return
	}
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
