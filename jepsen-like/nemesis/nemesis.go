// Package nemesis hurts a fenced cluster on a schedule: partitions (isolate
// the leader, a random majority/minority split, a bridge), kill -9 of a random
// node, of the leader and of every node, a rolling restart (SIGTERM, restart
// and catch-up, one node at a time), SIGSTOP of the leader past the election
// timeout and the TTL, a client that freezes past its lease (Kleppmann's
// scenario), a mixed random schedule, and gray failures (gray.go: a frozen
// follower or leader, a slow node, each listed first in every client's
// endpoints). Each nemesis is a fault/heal cycle recorded on the fault
// timeline; HealAll is the final heal.
package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/jepsen-like/backend"
	"github.com/fenced/fenced/jepsen-like/history"
	"github.com/fenced/fenced/jepsen-like/workload"
)

// Names of the nemeses, in the order of the short schedule.
const (
	PartitionLeader = "partition-leader"
	PartitionRandom = "partition-random"
	PartitionBridge = "partition-bridge"
	KillRandom      = "kill-random"
	KillLeader      = "kill-leader"
	KillAll         = "kill-all"
	RollingRestart  = "rolling-restart"
	PauseLeader     = "pause-leader"
	ClientPause     = "client-pause"
	Mixed           = "mixed"
)

// All lists every nemesis, in the order of the short schedule.
var All = append([]string{PartitionLeader, PartitionRandom, PartitionBridge, KillRandom, KillLeader, KillAll, RollingRestart, PauseLeader, ClientPause, Mixed, LostAnswers}, Gray...)

// Pauser is what the client-pause nemesis needs of the workload.
type Pauser interface {
	RequestPause(ctx context.Context, sleep time.Duration) (workload.PauseReport, error)
}

// Env is what nemeses act on.
type Env struct {
	B   backend.Backend
	Rec *history.Recorder
	W   Pauser
	Rng *rand.Rand
	Log hclog.Logger
	// Hold is how long a fault stays before its heal.
	Hold time.Duration
	// ElectionTimeout and TTL size the leader pause.
	ElectionTimeout time.Duration
	TTL             time.Duration
	// OnRestart is called after a node restarted (the token-reset control).
	OnRestart func()
	// Status returns one node's own view of the cluster; nil asks the node
	// over HTTP (GET /v1/cluster at its endpoint).
	Status func(ctx context.Context, id string) (*client.Status, error)
	// CatchUp bounds the wait for a restarted node to catch up in a rolling
	// restart (30 s when zero).
	CatchUp time.Duration
	// Answers are the proxies the clients go through (lost-answers); nil
	// when they talk to the nodes directly.
	Answers AnswerLoser

	mu     sync.Mutex
	paused map[string]bool
}

// Supported reports whether a nemesis can run on the env's backend, and why
// not.
func (e *Env) Supported(name string) error {
	switch name {
	case PartitionLeader, PartitionRandom, PartitionBridge:
		if err := e.B.CanPartition(); err != nil {
			return err
		}
	case ClientPause:
		if e.W == nil {
			return errors.New("no workload to pause a client of")
		}
	case LostAnswers:
		return e.supportsLostAnswers()
	case FillDisk:
		return e.supportsFillDisk()
	case SlowDisk:
		return e.supportsSlowDisk()
	case PauseLeader, KillRandom, KillLeader, KillAll, RollingRestart, Mixed:
	case FreezeFollower, FreezeLeader, SlowNode, FlapLeaders:
	default:
		return fmt.Errorf("unknown nemesis %q (known: %s)", name, strings.Join(All, ", "))
	}
	return nil
}

// Run runs one nemesis: fault, hold, heal. The heal always happens, even when
// ctx ends (with a fresh, bounded context).
func (e *Env) Run(ctx context.Context, name string) error {
	e.Log.Info("nemesis", "name", name)
	switch name {
	case PartitionLeader:
		return e.partitionLeader(ctx)
	case PartitionRandom:
		return e.partition(ctx, PartitionRandom, e.randomSplit())
	case PartitionBridge:
		return e.partition(ctx, PartitionBridge, e.bridge())
	case KillRandom:
		return e.kill(ctx, KillRandom, []string{e.pick()})
	case KillLeader:
		return e.kill(ctx, KillLeader, []string{e.leaderOrRandom(ctx)})
	case KillAll:
		return e.kill(ctx, KillAll, e.B.Nodes())
	case RollingRestart:
		return e.rollingRestart(ctx)
	case PauseLeader:
		return e.pauseLeader(ctx)
	case ClientPause:
		return e.clientPause(ctx)
	case Mixed:
		return e.mixed(ctx)
	case FreezeFollower, FreezeLeader, SlowNode:
		return e.gray(ctx, name)
	case LostAnswers:
		return e.lostAnswers(ctx)
	case FlapLeaders:
		return e.flapLeaders(ctx)
	case FillDisk:
		return e.fillDisk(ctx)
	case SlowDisk:
		return e.slowDisk(ctx)
	}
	return fmt.Errorf("unknown nemesis %q", name)
}

// hold waits while a fault is in place; the wait is the fault.
func hold(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func healCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

func (e *Env) pick() string {
	ids := e.B.Nodes()
	return ids[e.Rng.Intn(len(ids))]
}

func (e *Env) shuffled() []string {
	ids := append([]string(nil), e.B.Nodes()...)
	e.Rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids
}

func (e *Env) leaderOrRandom(ctx context.Context) string {
	id, err := e.B.Leader(ctx, 10*time.Second)
	if err != nil {
		id = e.pick()
		e.Log.Warn("no leader found; hurting a random node instead", "node", id, "error", err)
	}
	return id
}

// complete returns the grudge that cuts every node of a from every node of b,
// both ways.
func complete(a, b []string) backend.Grudge {
	g := backend.Grudge{}
	for _, x := range a {
		for _, y := range b {
			g[x] = append(g[x], y)
			g[y] = append(g[y], x)
		}
	}
	return g
}

func (e *Env) randomSplit() backend.Grudge {
	ids := e.shuffled()
	minority := 1 + e.Rng.Intn((len(ids)-1)/2)
	return complete(ids[:minority], ids[minority:])
}

// bridge cuts the cluster in two halves that only one node, the bridge, hears
// both of: each half plus the bridge is a majority (Jepsen's bridge).
func (e *Env) bridge() backend.Grudge {
	ids := e.shuffled()
	half := len(ids) / 2
	return complete(ids[:half], ids[half+1:])
}

func (e *Env) partitionLeader(ctx context.Context) error {
	l := e.leaderOrRandom(ctx)
	var rest []string
	for _, id := range e.B.Nodes() {
		if id != l {
			rest = append(rest, id)
		}
	}
	return e.partition(ctx, PartitionLeader, complete([]string{l}, rest))
}

func (e *Env) partition(ctx context.Context, name string, g backend.Grudge) error {
	f := e.Rec.BeginFault(name, grudgeNodes(g), g.String())
	err := e.B.Partition(ctx, g)
	if err == nil {
		hold(ctx, e.Hold)
	}
	hctx, cancel := healCtx()
	defer cancel()
	herr := e.B.Heal(hctx)
	e.Rec.EndFault(f, "healed")
	return errors.Join(err, herr)
}

func grudgeNodes(g backend.Grudge) []string {
	var out []string
	for id, peers := range g {
		if len(peers) > 0 {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func (e *Env) kill(ctx context.Context, name string, ids []string) error {
	f := e.Rec.BeginFault(name, ids, "kill -9")
	var errs []error
	for _, id := range ids {
		errs = append(errs, e.B.Kill(ctx, id))
	}
	// Everything at once for kill-all; a short hold, so the cluster comes
	// back through restart and snapshot restore rather than by timeout.
	d := e.Hold
	if name == KillAll {
		d = e.Hold / 2
	}
	hold(ctx, d)
	hctx, cancel := healCtx()
	defer cancel()
	for _, id := range ids {
		errs = append(errs, e.restart(hctx, id))
	}
	e.Rec.EndFault(f, "restarted")
	return errors.Join(errs...)
}

func (e *Env) restart(ctx context.Context, id string) error {
	if e.B.Running(id) {
		return nil
	}
	if err := e.B.Restart(ctx, id); err != nil {
		return fmt.Errorf("restart %s: %w", id, err)
	}
	if e.OnRestart != nil {
		e.OnRestart()
	}
	return nil
}

// rollingRestart is an upgrade or a configuration change done by the book:
// each node in turn (in a random order, so the leader's turn comes at a
// random point) gets SIGTERM, a graceful shutdown in which a leader hands
// leadership over first; it is started again on its data dir, and the next
// node goes only once this one follows a ready leader in its term and has
// applied everything the leader had committed when it came back. A node
// that does not catch up ends the rollout there: the next stop could take
// down a majority.
func (e *Env) rollingRestart(ctx context.Context) error {
	ids := e.shuffled()
	f := e.Rec.BeginFault(RollingRestart, ids, "SIGTERM, restart, caught up; in turn: "+strings.Join(ids, ", "))
	var errs []error
	var done []string
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		began := time.Now()
		if err := e.B.Stop(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", id, err))
		}
		// The restart and the wait are the heal: they happen even when ctx
		// ends, so no node is left down.
		hctx, cancel := healCtx()
		err := e.restart(hctx, id)
		if err == nil {
			err = e.waitCaughtUp(hctx, id)
		}
		cancel()
		if err != nil {
			errs = append(errs, err)
			break
		}
		done = append(done, fmt.Sprintf("%s %v", id, time.Since(began).Round(10*time.Millisecond)))
	}
	detail := "restarted and caught up: " + strings.Join(done, ", ")
	if err := errors.Join(errs...); err != nil {
		detail += "; " + err.Error()
	}
	e.Rec.EndFault(f, detail)
	return errors.Join(errs...)
}

func (e *Env) status(ctx context.Context, id string) (*client.Status, error) {
	if e.Status != nil {
		return e.Status(ctx, id)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return client.New(nil, client.WithHTTPClient(&http.Client{Timeout: time.Second})).NodeStatus(sctx, "http://"+e.B.Endpoint(id))
}

// waitCaughtUp waits until a restarted node follows (or is) the ready leader
// of its term, and has applied at least the commit index the leader reported
// the first time both answered. (A node's own "ready" is true only on the
// leader.)
func (e *Env) waitCaughtUp(ctx context.Context, id string) error {
	limit := e.CatchUp
	if limit == 0 {
		limit = 30 * time.Second
	}
	var target uint64
	targetSet := false
	err := testutil.Poll(limit, func() error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		st, err := e.status(ctx, id)
		if err != nil {
			return fmt.Errorf("%s does not answer: %w", id, err)
		}
		if st.LeaderID == "" {
			return fmt.Errorf("%s knows no leader", id)
		}
		ls := st
		if st.LeaderID != id {
			if ls, err = e.status(ctx, st.LeaderID); err != nil {
				return fmt.Errorf("%s follows %s, which does not answer: %w", id, st.LeaderID, err)
			}
		}
		if !ls.Ready || ls.LeaderID != ls.ID || ls.Term != st.Term {
			return fmt.Errorf("%s follows %s in term %d, which is not the ready leader of that term (leader %q, term %d, ready %v)",
				id, st.LeaderID, st.Term, ls.LeaderID, ls.Term, ls.Ready)
		}
		if !targetSet {
			target, targetSet = ls.CommitIndex, true
		}
		if st.AppliedIndex < target {
			return fmt.Errorf("%s applied %d of the leader's commit index %d", id, st.AppliedIndex, target)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s not caught up within %v after its restart: %w", id, limit, err)
	}
	return nil
}

// PauseDuration is how long the leader stays stopped: longer than both the
// election timeout and the TTL, so a new leader takes over and the old one's
// leases have run out on its own clock when it wakes up.
func (e *Env) PauseDuration() time.Duration {
	return max(e.ElectionTimeout, e.TTL)*3/2 + 500*time.Millisecond
}

func (e *Env) pauseLeader(ctx context.Context) error {
	l := e.leaderOrRandom(ctx)
	d := e.PauseDuration()
	return e.pauseNodes(ctx, PauseLeader, []string{l}, d)
}

func (e *Env) pauseNodes(ctx context.Context, name string, ids []string, d time.Duration) error {
	f := e.Rec.BeginFault(name, ids, fmt.Sprintf("SIGSTOP for %v", d))
	var errs []error
	for _, id := range ids {
		if err := e.B.Pause(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		e.setPaused(id, true)
	}
	hold(ctx, d)
	hctx, cancel := healCtx()
	defer cancel()
	for _, id := range ids {
		errs = append(errs, e.B.Resume(hctx, id))
		e.setPaused(id, false)
	}
	e.Rec.EndFault(f, "SIGCONT")
	return errors.Join(errs...)
}

func (e *Env) setPaused(id string, p bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.paused == nil {
		e.paused = map[string]bool{}
	}
	if p {
		e.paused[id] = true
	} else {
		delete(e.paused, id)
	}
}

func (e *Env) clientPause(ctx context.Context) error {
	sleep := 2*e.TTL + 500*time.Millisecond
	f := e.Rec.BeginFault(ClientPause, nil, fmt.Sprintf("a holder sleeps %v past its TTL %v, then writes", sleep, e.TTL))
	pctx, cancel := context.WithTimeout(ctx, sleep+30*time.Second)
	defer cancel()
	rep, err := e.W.RequestPause(pctx, sleep)
	if err != nil {
		e.Rec.EndFault(f, "no holder took the pause: "+err.Error())
		return fmt.Errorf("client pause: %w", err)
	}
	e.Rec.EndFault(f, fmt.Sprintf("client c%d key %s token %s; resource high %s; stale write accepted=%v",
		rep.Client, rep.Key, rep.Token, rep.HigherAdmitted, rep.Accepted))
	return nil
}

// mixed overlaps two or three random faults (a partition, a kill, a pause),
// spaced by a second or two, then heals them all at once.
func (e *Env) mixed(ctx context.Context) error {
	kinds := []string{"kill", "pause", "kill-leader"}
	if e.B.CanPartition() == nil {
		kinds = append(kinds, "split", "isolate-leader", "bridge")
	}
	n := 2 + e.Rng.Intn(2)
	var faults []*history.Fault
	var killed, paused []string
	var errs []error
	partitioned := false
	// Draws that would hurt a node twice or take down a majority are
	// skipped; a bounded number of draws still yields n faults.
	for draw := 0; len(faults) < n && draw < 50 && ctx.Err() == nil; draw++ {
		k := kinds[e.Rng.Intn(len(kinds))]
		var err error
		switch k {
		case "kill", "kill-leader":
			id := e.pick()
			if k == "kill-leader" {
				id = e.leaderOrRandom(ctx)
			}
			if contains(killed, id) || contains(paused, id) {
				continue
			}
			// Never more than a minority down at once from kills alone:
			// the point is faults the cluster must survive.
			if 2*(len(killed)+len(paused)+1) > len(e.B.Nodes()) {
				continue
			}
			faults = append(faults, e.Rec.BeginFault(Mixed+"/"+k, []string{id}, "kill -9"))
			err = e.B.Kill(ctx, id)
			killed = append(killed, id)
		case "pause":
			id := e.pick()
			if contains(killed, id) || contains(paused, id) || 2*(len(killed)+len(paused)+1) > len(e.B.Nodes()) {
				continue
			}
			faults = append(faults, e.Rec.BeginFault(Mixed+"/pause", []string{id}, "SIGSTOP"))
			if err = e.B.Pause(ctx, id); err == nil {
				e.setPaused(id, true)
			}
			paused = append(paused, id)
		default:
			var g backend.Grudge
			switch k {
			case "split":
				g = e.randomSplit()
			case "bridge":
				g = e.bridge()
			default:
				l := e.leaderOrRandom(ctx)
				var rest []string
				for _, id := range e.B.Nodes() {
					if id != l {
						rest = append(rest, id)
					}
				}
				g = complete([]string{l}, rest)
			}
			faults = append(faults, e.Rec.BeginFault(Mixed+"/"+k, grudgeNodes(g), g.String()))
			err = e.B.Partition(ctx, g)
			partitioned = true
		}
		errs = append(errs, err)
		hold(ctx, time.Duration(1000+e.Rng.Intn(1000))*time.Millisecond)
	}
	hold(ctx, e.Hold/2)
	hctx, cancel := healCtx()
	defer cancel()
	if partitioned {
		errs = append(errs, e.B.Heal(hctx))
	}
	for _, id := range paused {
		errs = append(errs, e.B.Resume(hctx, id))
		e.setPaused(id, false)
	}
	for _, id := range killed {
		errs = append(errs, e.restart(hctx, id))
	}
	for _, f := range faults {
		e.Rec.EndFault(f, "healed")
	}
	return errors.Join(errs...)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// HealAll is the final heal: remove partitions, resume paused nodes, restart
// dead ones.
func (e *Env) HealAll(ctx context.Context) error {
	e.healAnswers()
	errs := []error{e.B.Heal(ctx)}
	e.mu.Lock()
	var paused []string
	for id := range e.paused {
		paused = append(paused, id)
	}
	e.paused = nil
	e.mu.Unlock()
	for _, id := range paused {
		errs = append(errs, e.B.Resume(ctx, id))
	}
	for _, id := range e.B.Nodes() {
		errs = append(errs, e.restart(ctx, id))
	}
	return errors.Join(errs...)
}

// Schedule runs nemeses until done: "short" runs each once, in order;
// "full" runs random ones until total has passed. Between faults the cluster
// gets quiet time to recover, which is waited for (a leader), not assumed.
// It returns right after the last heal, so the caller can time recovery.
func (e *Env) Schedule(ctx context.Context, kind string, names []string, total, quiet time.Duration) []error {
	var errs []error
	first := true
	runOne := func(name string) {
		if !first {
			// The previous fault is healed; let the cluster recover before
			// the next one, so each fault hits a working cluster.
			if _, err := e.B.Leader(ctx, 20*time.Second); err != nil && ctx.Err() == nil {
				e.Log.Warn("no leader after heal", "error", err)
			}
		}
		first = false
		hold(ctx, quiet)
		if ctx.Err() != nil {
			return
		}
		if err := e.Run(ctx, name); err != nil {
			e.Log.Warn("nemesis error", "name", name, "error", err)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if kind == "short" {
		for _, n := range names {
			runOne(n)
		}
		return errs
	}
	deadline := time.Now().Add(total)
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil && i < 10000; i++ {
		runOne(names[e.Rng.Intn(len(names))])
	}
	return errs
}
