package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/metrics"
)

// DefaultKeyRetention is how long an ended key is kept before the leader
// reclaims it. An hour is far beyond every retry fenced answers (an acquire
// waits at most five minutes, a request id is recognised for
// fsm.RequestIDWindow after that), leaves time to look at a key that just
// ended, and at 100 new keys a second keeps about 360 000 ended keys (about
// 95 MB) instead of all keys ever seen.
const DefaultKeyRetention = time.Hour

// maxReclaimBytes bounds the key bytes of one Reclaim entry, with
// fsm.MaxReclaimBatch bounding their number: one entry never holds the log
// for long, and acquires interleave with a large backlog's entries.
const maxReclaimBytes = 64 << 10

// reclaimInterval is how often the leader looks for keys to reclaim. Each
// cycle raises the epoch floor at most once, so the interval also bounds
// the epoch space reclamation spends: at one cycle a minute (the default
// retention's), 2^31 epochs last about 4 000 years; at the one-second floor,
// about 68 years.
func reclaimInterval(retention time.Duration) time.Duration {
	return min(max(retention/4, time.Second), time.Minute)
}

// endedKey is a grant the leader saw end, and when.
type endedKey struct {
	key   string
	token fence.Token
	at    time.Time
}

// reclaimer is the leader's list of ended keys, oldest end first. It is
// filled while the node leads and is ready (a follower keeps nothing): from
// every end after the takeover, and, at the first cycle, from the FSM's
// ended keys, whose end is taken as that moment (a new leader cannot know
// when they ended). The scan runs in the reclamation loop, off the takeover.
type reclaimer struct {
	mu      sync.Mutex
	gen     uint64 // 0: inactive
	scanned bool   // the FSM's ended keys of gen's takeover are queued
	queue   []endedKey
	head    int
	// retry holds due keys kept back by a waiter or a lock-delay, or not
	// reclaimed by an entry that failed; they are looked at again next cycle.
	retry []endedKey
}

func (rc *reclaimer) activate(gen uint64) {
	rc.mu.Lock()
	rc.gen, rc.scanned, rc.queue, rc.head, rc.retry = gen, false, nil, 0, nil
	rc.mu.Unlock()
}

func (rc *reclaimer) deactivate() {
	rc.mu.Lock()
	rc.gen, rc.scanned, rc.queue, rc.head, rc.retry = 0, false, nil, 0, nil
	rc.mu.Unlock()
}

// deactivateGen deactivates the reclaimer only if gen activated it last: a
// generation that lost its leadership while it was being established must
// not stop a newer one.
func (rc *reclaimer) deactivateGen(gen uint64) {
	rc.mu.Lock()
	if rc.gen == gen {
		rc.gen, rc.scanned, rc.queue, rc.head, rc.retry = 0, false, nil, 0, nil
	}
	rc.mu.Unlock()
}

// scan queues the FSM's ended keys once per generation, ahead of the ends
// recorded since the takeover (a key in both is looked at twice, harmlessly).
func (rc *reclaimer) scan(gen uint64, ended func() []fsm.ReclaimKey) {
	rc.mu.Lock()
	done := rc.gen != gen || rc.scanned
	rc.mu.Unlock()
	if done {
		return
	}
	ks := ended()
	now := time.Now()
	q := make([]endedKey, len(ks))
	for i, k := range ks {
		q[i] = endedKey{key: k.Key, token: k.Token, at: now}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.gen == gen && !rc.scanned {
		rc.queue, rc.head, rc.scanned = append(q, rc.queue[rc.head:]...), 0, true
	}
}

// ended records a grant's end; called from the apply goroutine.
func (rc *reclaimer) ended(k fsm.KeyState) {
	rc.mu.Lock()
	if rc.gen != 0 {
		rc.queue = append(rc.queue, endedKey{key: k.Key, token: k.Token, at: time.Now()})
	}
	rc.mu.Unlock()
}

// takeDue removes and returns the keys that ended at or before cutoff, and
// the kept-back keys, if the reclaimer is still of generation gen.
func (rc *reclaimer) takeDue(gen uint64, cutoff time.Time) []endedKey {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.gen != gen {
		return nil
	}
	due := rc.retry
	rc.retry = nil
	i := rc.head
	for i < len(rc.queue) && !rc.queue[i].at.After(cutoff) {
		i++
	}
	due = append(due, rc.queue[rc.head:i]...)
	clear(rc.queue[rc.head:i])
	rc.head = i
	// Drop the consumed front once it is half of the slice.
	if rc.head > 1024 && rc.head*2 > len(rc.queue) {
		rc.queue = append([]endedKey(nil), rc.queue[rc.head:]...)
		rc.head = 0
	}
	metrics.ReclaimPending.Set(float64(len(rc.queue) - rc.head))
	return due
}

// keepBack returns keys to be looked at again next cycle.
func (rc *reclaimer) keepBack(gen uint64, ks []endedKey) {
	rc.mu.Lock()
	if rc.gen == gen {
		rc.retry = append(rc.retry, ks...)
	}
	rc.mu.Unlock()
}

// startReclaim starts the loop that keeps the key and epoch gauges and, on
// the leader with a retention set, reclaims ended keys.
func (n *Node) startReclaim() {
	interval := 10 * time.Second
	if n.cfg.KeyRetention > 0 {
		interval = reclaimInterval(n.cfg.KeyRetention)
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		log := n.log.Named("reclaim")
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-n.stop:
				return
			}
			n.observeEpochs()
			if gen := n.ready.Load(); gen != 0 && n.cfg.KeyRetention > 0 {
				n.reclaim.scan(gen, n.fsm.Ended)
				n.reclaimCycle(log, gen)
			}
		}
	}()
}

// observeEpochs sets the gauges of the key count and the epoch space left.
func (n *Node) observeEpochs() {
	metrics.Keys.Set(float64(n.fsm.Len()))
	if epoch, ok := n.fsm.Epoch(n.r().CurrentTerm()); ok {
		metrics.EpochsLeft.Set(float64(fence.MaxEpoch - epoch))
	} else {
		metrics.EpochsLeft.Set(0)
	}
}

// reclaimCycle proposes the keys whose end is older than the retention, in
// bounded entries, with one floor raise if any of them ended in the current
// epoch. The leader skips keys someone waits for or a lock-delay keeps;
// the FSM checks the token-safety rule itself (fsm.Reclaim).
func (n *Node) reclaimCycle(log hclog.Logger, gen uint64) {
	due := n.reclaim.takeDue(gen, time.Now().Add(-n.cfg.KeyRetention))
	cands, kept := n.reclaimable(due)
	n.reclaim.keepBack(gen, kept)
	if len(cands) == 0 {
		return
	}
	epoch, ok := n.fsm.Epoch(n.r().CurrentTerm())
	bump := false
	for _, c := range cands {
		bump = bump || !ok || c.token.Epoch() >= epoch
	}
	// The positive control forgets keys without the epoch rule, and so
	// without the bump that would make it safe anyway.
	bump = bump && !n.cfg.ReclaimIgnoresEpoch
	reclaimed := 0
	for len(cands) > 0 {
		batch := nextReclaimBatch(cands)
		cmd := fsm.Reclaim{Keys: make([]fsm.ReclaimKey, len(batch))}
		for i, c := range batch {
			cmd.Keys[i] = fsm.ReclaimKey{Key: c.key, Token: c.token}
		}
		if bump {
			cmd.Floor, bump = n.fsm.Floor()+1, false
		}
		if n.ready.Load() != gen {
			return
		}
		res, err := n.apply(cmd)
		if err != nil || res.Reclaim == nil {
			log.Warn("reclamation entry failed; its keys are tried again next cycle", "keys", len(cands), "error", err)
			n.reclaim.keepBack(gen, cands)
			return
		}
		if res.Reclaim.Raised {
			metrics.EpochBumps.Inc()
		}
		metrics.KeysReclaimed.Add(float64(res.Reclaim.Reclaimed))
		reclaimed += res.Reclaim.Reclaimed
		if res.Reclaim.Skipped > 0 {
			_, still := n.reclaimable(batch)
			n.reclaim.keepBack(gen, still)
		}
		cands = cands[len(batch):]
	}
	log.Debug("reclaimed ended keys", "keys", reclaimed, "floor", n.fsm.Floor())
}

// reclaimable splits ended keys into those to propose and those kept back
// (a waiter or a lock-delay); a key granted again since, or already gone,
// is dropped: its next end is recorded anew.
func (n *Node) reclaimable(ks []endedKey) (cands, kept []endedKey) {
	for _, e := range ks {
		k, ok := n.fsm.Get(e.key)
		if !ok || k.Token != e.token || k.State == fsm.Held {
			continue
		}
		if _, inForce := n.leases.lockDelayLeft(e.key); inForce || n.waiters.waiting(e.key) {
			kept = append(kept, e)
			continue
		}
		cands = append(cands, e)
	}
	return cands, kept
}

// nextReclaimBatch returns the first keys of ks that fit one entry.
func nextReclaimBatch(ks []endedKey) []endedKey {
	size := 0
	for i, k := range ks {
		size += len(k.key) + 10
		if i == fsm.MaxReclaimBatch || (i > 0 && size > maxReclaimBytes) {
			return ks[:i]
		}
	}
	return ks
}
