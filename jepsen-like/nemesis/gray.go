package nemesis

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Gray failures: one node hangs or crawls instead of dying, while the others
// stay a healthy, connected quorum. A client must leave such a node for the
// next endpoint well before its own deadline.
const (
	// FreezeFollower stops a follower with SIGSTOP and lists it first in
	// every client's endpoints.
	FreezeFollower = "freeze-follower"
	// FreezeLeader stops the leader with SIGSTOP and lists it first in
	// every client's endpoints.
	FreezeLeader = "freeze-leader"
	// SlowNode delays a node's answers by seconds: SIGSTOP/SIGCONT bursts
	// (stopped SlowStop, running SlowRun), and lists it first in every
	// client's endpoints.
	SlowNode = "slow-node"
)

// Gray lists the gray-failure nemeses, in the order of the short schedule.
var Gray = []string{FreezeFollower, FreezeLeader, SlowNode}

// QuorumHealthy lists the nemeses that leave a quorum of healthy, connected
// nodes for their whole length: the availability checker measures the
// clients' time without service in their windows. pause-leader is a frozen
// leader too (without the endpoint reordering).
var QuorumHealthy = []string{FreezeFollower, FreezeLeader, SlowNode, PauseLeader}

// Bursts of the slow node: stopped this long, then running this long.
const (
	SlowStop = 2 * time.Second
	SlowRun  = 250 * time.Millisecond
)

// Orderer is what the gray nemeses need of the workload: every client lists
// one endpoint first from its next operation on, as a client started (or
// configured) with that list would; "" gives every client its own order
// back.
type Orderer interface {
	ListFirst(endpoint string)
}

// fronter maps a node's endpoint to the address the clients reach it by.
type fronter interface{ Front(ep string) string }

func (e *Env) orderer() Orderer {
	o, _ := e.W.(Orderer)
	return o
}

func (e *Env) listFirst(id string) {
	if o := e.orderer(); o != nil {
		ep := ""
		if id != "" {
			ep = e.B.Endpoint(id)
			if f, ok := e.Answers.(fronter); ok {
				ep = f.Front(ep) // the clients reach the node through its proxy
			}
		}
		o.ListFirst(ep)
	}
}

// follower returns a node that is not the leader, at random.
func (e *Env) follower(ctx context.Context) string {
	l := e.leaderOrRandom(ctx)
	var rest []string
	for _, id := range e.shuffled() {
		if id != l {
			rest = append(rest, id)
		}
	}
	return rest[0]
}

// freeze stops one node for the hold time. The node is listed first in
// every client's endpoints once it is stopped (before, a client's first
// answer would teach it the leader and the frozen node would go untried).
func (e *Env) freeze(ctx context.Context, name, id, role string) error {
	f := e.Rec.BeginFault(name, []string{id}, fmt.Sprintf("SIGSTOP of the %s for %v; listed first in every client's endpoints", role, e.Hold))
	err := e.B.Pause(ctx, id)
	if err == nil {
		e.setPaused(id, true)
		e.listFirst(id)
		hold(ctx, e.Hold)
	}
	hctx, cancel := healCtx()
	defer cancel()
	herr := e.B.Resume(hctx, id)
	e.setPaused(id, false)
	e.listFirst("")
	e.Rec.EndFault(f, "SIGCONT")
	return errors.Join(err, herr)
}

// slow makes one node answer seconds late, for one and a half hold times:
// SIGSTOP for SlowStop, SIGCONT for SlowRun, again. Its raft heartbeats are
// late too, so a slow leader is soon deposed and the node goes on slow as a
// follower.
func (e *Env) slow(ctx context.Context, id string) error {
	d := e.Hold * 3 / 2
	f := e.Rec.BeginFault(SlowNode, []string{id}, fmt.Sprintf("SIGSTOP %v / SIGCONT %v bursts for %v; listed first in every client's endpoints", SlowStop, SlowRun, d))
	var errs []error
	deadline := time.Now().Add(d)
	bursts := 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if err := e.B.Pause(ctx, id); err != nil {
			errs = append(errs, err)
			break
		}
		e.setPaused(id, true)
		if bursts == 0 {
			e.listFirst(id)
		}
		bursts++
		hold(ctx, min(SlowStop, time.Until(deadline)))
		hctx, cancel := healCtx()
		err := e.B.Resume(hctx, id)
		cancel()
		e.setPaused(id, false)
		if err != nil {
			errs = append(errs, err)
			break
		}
		hold(ctx, SlowRun)
	}
	e.listFirst("")
	e.Rec.EndFault(f, fmt.Sprintf("%d bursts; SIGCONT", bursts))
	return errors.Join(errs...)
}

// gray runs one gray-failure nemesis.
func (e *Env) gray(ctx context.Context, name string) error {
	switch name {
	case FreezeFollower:
		return e.freeze(ctx, name, e.follower(ctx), "follower")
	case FreezeLeader:
		return e.freeze(ctx, name, e.leaderOrRandom(ctx), "leader")
	case SlowNode:
		return e.slow(ctx, e.pick())
	}
	return fmt.Errorf("unknown gray nemesis %q", name)
}
