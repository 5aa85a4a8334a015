package cluster

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/metrics"
)

// Expiries go to the log through one bounded pipeline per leadership, not a
// goroutine per lease: after an election every lease of one TTL falls due
// at once, and a million of them must not become a million goroutines (and
// their stacks) with every acquire queued behind them. The lease table
// hands the expired leases over (fire); one goroutine proposes them, at
// most expiryWindow entries in raft at a time, each the same Expire entry
// a single expiry always was (its token and arm checks, its lock-delay,
// the handoff to the first waiter in the same entry), and waits for them
// in order. Acquires interleave: one waits behind at most a window of
// expiries, which raft appends and commits together. The table keeps the
// leases it has no room for (they are past their deadline: no renewal
// succeeds) until the pipeline asks for more.
const (
	// expiryWindow is the most expiry entries in raft at once.
	expiryWindow = 256
	// expiryBacklog is the most expired leases taken out of the table and
	// not yet proposed.
	expiryBacklog = 4 * fireChunk
)

// expirer is the queue of expiries to propose, and whether its goroutine
// runs. Its lock is taken under the lease table's (fire, room), never the
// other way round.
type expirer struct {
	mu      sync.Mutex
	gen     uint64
	queue   []ending
	head    int
	running bool
}

// room returns how many more expiries the queue takes now.
func (x *expirer) room() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return max(expiryBacklog-(len(x.queue)-x.head), 0)
}

// add queues an expiry of generation gen and reports whether the caller
// must start the goroutine that proposes them.
func (x *expirer) add(gen uint64, e ending) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.gen != gen {
		// A newer generation's queue, or the first expiry of this one: an
		// older generation's expiries are dropped (its table is gone, and
		// the newer leader re-armed their leases).
		if x.gen > gen {
			return false
		}
		x.gen, x.queue, x.head = gen, nil, 0
	}
	x.queue = append(x.queue, e)
	if x.running {
		return false
	}
	x.running = true
	return true
}

// backlog returns the number of queued expiries.
func (x *expirer) backlog() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.queue) - x.head
}

// take removes and returns up to n queued expiries of gen; none when the
// queue is empty or of another generation, and then, if idle, the
// goroutine stops (running is cleared).
func (x *expirer) take(gen uint64, n int, idle bool) []ending {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.gen != gen || x.head == len(x.queue) {
		if !idle {
			return nil
		}
		x.running = false
		if x.gen == gen {
			x.queue, x.head = nil, 0
		}
		return nil
	}
	end := min(x.head+n, len(x.queue))
	out := append([]ending(nil), x.queue[x.head:end]...)
	clear(x.queue[x.head:end])
	x.head = end
	if x.head == len(x.queue) {
		x.queue, x.head = x.queue[:0], 0
	}
	return out
}

// halt empties the queue of gen and marks its goroutine stopped.
func (x *expirer) halt(gen uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.gen == gen {
		x.queue, x.head, x.running = nil, 0, false
	}
}

// putBack returns an expiry that failed to the queue.
func (x *expirer) putBack(gen uint64, e ending) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.gen == gen {
		x.queue = append(x.queue, e)
	}
}

// proposeExpire queues the expiry of a lease that ran out, for this node's
// generation gen, and starts the goroutine that proposes the queue if none
// runs. It never blocks: the lease table calls it outside its lock.
func (n *Node) proposeExpire(gen uint64, e fsm.Expire, lockDelay time.Duration) {
	if !n.expiry.add(gen, ending{e, lockDelay}) {
		return
	}
	n.wg.Add(1)
	go n.runExpiries(gen)
}

// runExpiries proposes the queued expiries of gen until the queue is empty
// or the generation ended: a sliding window of at most expiryWindow entries
// in raft, settled in log order, topped up as each is settled, so raft
// always has the next entries to append while the earlier ones apply. A
// grant must not stay held because one proposal failed: failed ones go back
// in the queue and are tried again, after a backoff, while this node leads
// in the same generation.
func (n *Node) runExpiries(gen uint64) {
	defer n.wg.Done()
	var inflight []proposal // oldest first
	backoff := 10 * time.Millisecond
	settled, expired := 0, 0
	for {
		if len(inflight) < expiryWindow && n.awaitReady(gen) {
			if n.expiry.backlog() < fireChunk {
				n.leases.fire(gen) // room again: the table hands over the leases it kept
			}
			batch := n.expiry.take(gen, expiryWindow-len(inflight), len(inflight) == 0)
			if batch == nil && len(inflight) == 0 {
				n.log.Debug("leases expired", "proposed", settled, "expired", expired)
				return
			}
			inflight = append(inflight, n.proposeExpiries(batch)...)
		}
		if len(inflight) == 0 { // the generation ended
			n.expiry.halt(gen)
			return
		}
		p := inflight[0]
		inflight[0] = proposal{}
		inflight = inflight[1:]
		ok, done := n.settleExpiry(p)
		settled++
		if done {
			expired++
		}
		if ok {
			backoff = 10 * time.Millisecond
			continue
		}
		n.expiry.putBack(gen, p.x)
		select {
		case <-time.After(backoff):
		case <-n.stop:
			n.expiry.halt(gen)
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// awaitReady reports whether generation gen is ready, waiting while it is
// being established: a new leader arms its leases before it is ready, and a
// lease counted from an earlier takeover may be due at once.
func (n *Node) awaitReady(gen uint64) bool {
	for n.ready.Load() != gen {
		if n.gen.Load() != gen {
			return false
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-n.stop:
			return false
		}
	}
	return true
}

// proposal is one expiry in raft: its future, and the waiter its entry
// hands the key to, if any.
type proposal struct {
	x     ending
	next  *waiter
	f     raft.ApplyFuture
	start time.Time
}

// proposeExpiries proposes expiries without waiting for any.
func (n *Node) proposeExpiries(batch []ending) []proposal {
	r := n.r()
	ps := make([]proposal, 0, len(batch))
	for _, x := range batch {
		p := proposal{x: x, start: time.Now()}
		cmd := x.e
		if x.lockDelay == 0 && n.handoffFits(x.e.Key, x.e.Token) { // a lock-delay keeps even waiters out for a while
			if p.next = n.waiters.claim(x.e.Key); p.next != nil {
				cmd.Next = p.next.acquire()
			}
		}
		p.f = r.Apply(fsm.Encode(cmd), n.cfg.ApplyTimeout)
		ps = append(ps, p)
	}
	return ps
}

// settleExpiry waits for a proposed expiry and settles its handoff and
// lock-delay; ok is false when it failed (and must be tried again), done
// when it ended the grant.
func (n *Node) settleExpiry(p proposal) (ok, done bool) {
	res, err := n.applied(p.f)
	metrics.ObserveApply("expire", p.start)
	n.settleHandoff(p.x.e.Key, p.next, res, err)
	if err != nil {
		n.log.Warn("expiry proposal failed; tried again", "key", p.x.e.Key, "error", err)
		return false, false
	}
	if expiredBy(res, p.x.e) {
		return true, true
	}
	if p.x.lockDelay > 0 {
		n.leases.dropDelay(p.x.e.Key, p.x.e.Token) // the holder renewed first: no delay owed
	}
	return true, false
}

// applied waits for a proposed entry and returns the FSM's result, as apply
// does.
func (n *Node) applied(f raft.ApplyFuture) (*fsm.Result, error) {
	if err := n.wait(f); err != nil {
		return nil, translate(err)
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok {
		return nil, fmt.Errorf("unexpected apply response %T", f.Response())
	}
	return res, nil
}
