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

// endedKey is a key whose last grant the leader saw end (or found ended),
// with that grant's token and the identity of its holder, and when.
type endedKey struct {
	key   string
	token fence.Token
	owner string
	at    time.Time
	// prev and next link the reclaimer's list, oldest end first.
	prev, next *endedKey
}

// reclaimer is the leader's list of ended keys, one entry per key (its
// latest end), oldest end first, with the number of them per identity
// (fsm.OwnerOf of the ended grant's holder). It is filled while the node
// leads and is ready (a follower keeps nothing): from every end after the
// takeover, and, at the first scan, from the FSM's ended keys, whose end is
// taken as that moment (a new leader cannot know when they ended). The
// scan runs in the reclamation loop, off the takeover. A key leaves the
// list when it is granted again or forgotten; one that ends again moves to
// the back. So a client that cycles one key keeps one entry, and the list
// is exactly the state machine's ended keys once the scan is done.
type reclaimer struct {
	mu      sync.Mutex
	gen     uint64 // 0: inactive
	scanned bool   // the FSM's ended keys of gen's takeover are listed
	byKey   map[string]*endedKey
	// first and last are the ends of the list, oldest end first.
	first, last *endedKey
	// byOwner counts the listed keys of each identity.
	byOwner map[string]int
	// kick asks the reclamation loop for a scan without waiting for its
	// tick; buffered, one pending request is enough.
	kick chan struct{}
}

// resetLocked empties the list for generation gen (0: inactive).
func (rc *reclaimer) resetLocked(gen uint64) {
	rc.gen, rc.scanned = gen, false
	rc.byKey, rc.byOwner = map[string]*endedKey{}, map[string]int{}
	rc.first, rc.last = nil, nil
	metrics.ReclaimPending.Set(0)
}

func (rc *reclaimer) activate(gen uint64) {
	rc.mu.Lock()
	rc.resetLocked(gen)
	rc.mu.Unlock()
}

func (rc *reclaimer) deactivate() {
	rc.mu.Lock()
	rc.resetLocked(0)
	rc.mu.Unlock()
}

// deactivateGen deactivates the reclaimer only if gen activated it last: a
// generation that lost its leadership while it was being established must
// not stop a newer one.
func (rc *reclaimer) deactivateGen(gen uint64) {
	rc.mu.Lock()
	if rc.gen == gen {
		rc.resetLocked(0)
	}
	rc.mu.Unlock()
}

// requestScan asks the reclamation loop to scan soon (a new leader's
// counts per identity are complete only after it).
func (rc *reclaimer) requestScan() {
	select {
	case rc.kick <- struct{}{}:
	default:
	}
}

// scanChunk is how many of the FSM's ended keys the scan lists per hold of
// the lock: the apply goroutine, which reports every end and grant, waits
// for at most a chunk.
const scanChunk = 4096

// scan lists the FSM's ended keys once per generation, behind the ends
// recorded since the takeover (a key listed already keeps its entry).
// Each is checked against the state as it lists it, so a key granted since
// the FSM's list was taken is not listed: the grant's report comes after
// the state changed, and removes whatever the scan listed before it.
func (rc *reclaimer) scan(gen uint64, ended func() []fsm.ReclaimKey, get func(string) (fsm.KeyState, bool)) {
	rc.mu.Lock()
	done := rc.gen != gen || rc.scanned
	rc.mu.Unlock()
	if done {
		return
	}
	ks := ended()
	now := time.Now()
	for len(ks) > 0 {
		chunk := ks[:min(len(ks), scanChunk)]
		ks = ks[len(chunk):]
		rc.mu.Lock()
		if rc.gen != gen || rc.scanned {
			rc.mu.Unlock()
			return
		}
		for _, k := range chunk {
			if _, listed := rc.byKey[k.Key]; listed {
				continue
			}
			if cur, ok := get(k.Key); ok && cur.Token == k.Token && cur.State != fsm.Held {
				rc.pushLocked(&endedKey{key: cur.Key, token: cur.Token, owner: fsm.OwnerOf(cur.Holder), at: now})
			}
		}
		rc.mu.Unlock()
	}
	rc.mu.Lock()
	if rc.gen == gen {
		rc.scanned = true
		metrics.ReclaimPending.Set(float64(len(rc.byKey)))
	}
	rc.mu.Unlock()
}

// pushLocked appends e to the list.
func (rc *reclaimer) pushLocked(e *endedKey) {
	e.prev, e.next = rc.last, nil
	if rc.last != nil {
		rc.last.next = e
	} else {
		rc.first = e
	}
	rc.last = e
	rc.byKey[e.key] = e
	rc.byOwner[e.owner]++
}

// removeLocked takes e out of the list.
func (rc *reclaimer) removeLocked(e *endedKey) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		rc.first = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		rc.last = e.prev
	}
	e.prev, e.next = nil, nil
	delete(rc.byKey, e.key)
	if rc.byOwner[e.owner]--; rc.byOwner[e.owner] <= 0 {
		delete(rc.byOwner, e.owner)
	}
}

// ended records a grant's end, in place of any earlier end of its key;
// called from the apply goroutine.
func (rc *reclaimer) ended(k fsm.KeyState) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.gen == 0 {
		return
	}
	if old, ok := rc.byKey[k.Key]; ok {
		rc.removeLocked(old)
	}
	rc.pushLocked(&endedKey{key: k.Key, token: k.Token, owner: fsm.OwnerOf(k.Holder), at: time.Now()})
}

// granted forgets the end of a key granted again (a renewal changes
// nothing); called from the apply goroutine.
func (rc *reclaimer) granted(k fsm.KeyState) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if e, ok := rc.byKey[k.Key]; ok {
		rc.removeLocked(e)
	}
}

// forget takes keys out of the list when they still name the grant the
// caller saw (the key was forgotten, or is not ended any more).
func (rc *reclaimer) forget(gen uint64, ks []endedKey) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.gen != gen {
		return
	}
	for _, k := range ks {
		if e, ok := rc.byKey[k.key]; ok && e.token == k.token {
			rc.removeLocked(e)
		}
	}
}

// takeDue returns the listed keys that ended at or before cutoff, oldest
// first, if the reclaimer is still of generation gen. They stay listed
// until forget takes them out: a key kept back (a waiter, a lock-delay) or
// whose entry failed is due again next cycle.
func (rc *reclaimer) takeDue(gen uint64, cutoff time.Time) []endedKey {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.gen != gen {
		return nil
	}
	metrics.ReclaimPending.Set(float64(len(rc.byKey)))
	var due []endedKey
	for e := rc.first; e != nil && !e.at.After(cutoff); e = e.next {
		due = append(due, endedKey{key: e.key, token: e.token, owner: e.owner, at: e.at})
	}
	return due
}

// pending returns the number of listed keys.
func (rc *reclaimer) pending() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.byKey)
}

// maxByOwner returns the most listed keys of any one identity.
func (rc *reclaimer) maxByOwner() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := 0
	for _, c := range rc.byOwner {
		m = max(m, c)
	}
	return m
}

// endedBy returns the number of listed keys of identity owner.
func (rc *reclaimer) endedBy(owner string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.byOwner[owner]
}

// startReclaim starts the loop that keeps the key and epoch gauges and, on
// the leader, lists the ended keys (with a retention set, or a limit of
// ended keys per identity) and, with a retention set, reclaims them.
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
			case <-n.reclaim.kick:
			case <-n.stop:
				return
			}
			n.observeEpochs()
			gen := n.ready.Load()
			if gen != 0 && (n.cfg.KeyRetention > 0 || n.cfg.Limits.MaxEndedKeysPerIdentity > 0) {
				n.reclaim.scan(gen, n.fsm.Ended, n.fsm.Get)
			}
			if gen != 0 && n.cfg.KeyRetention > 0 {
				n.reclaimCycle(log, gen)
			}
		}
	}()
}

// observeEpochs sets the gauges of the key count and the epoch space left.
func (n *Node) observeEpochs() {
	metrics.Keys.Set(float64(n.fsm.Len()))
	metrics.RequestIDs.Set(float64(n.fsm.RetiredRequests()))
	// The state machine counts since it started or installed a snapshot.
	early := n.fsm.ForgottenEarly()
	if seen := n.earlySeen.Swap(early); early >= seen {
		metrics.RequestIDsForgottenEarly.Add(float64(early - seen))
	} else {
		metrics.RequestIDsForgottenEarly.Add(float64(early))
	}
	if n.ready.Load() != 0 {
		metrics.EndedKeysMaxIdentity.Set(float64(n.reclaim.maxByOwner()))
	}
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
	cands, _, gone := n.reclaimable(due)
	n.reclaim.forget(gen, gone)
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
			// Its keys stay listed, and due: they are tried again next cycle.
			log.Warn("reclamation entry failed; its keys are tried again next cycle", "keys", len(cands), "error", err)
			return
		}
		if res.Reclaim.Raised {
			metrics.EpochBumps.Inc()
		}
		metrics.KeysReclaimed.Add(float64(res.Reclaim.Reclaimed))
		reclaimed += res.Reclaim.Reclaimed
		// The keys forgotten (or granted again meanwhile) leave the list;
		// the skipped ones stay, due again next cycle.
		_, _, settled := n.reclaimable(batch)
		n.reclaim.forget(gen, settled)
		cands = cands[len(batch):]
	}
	log.Debug("reclaimed ended keys", "keys", reclaimed, "floor", n.fsm.Floor())
}

// reclaimable splits ended keys into those to propose, those kept back (a
// waiter or a lock-delay) and those gone: granted again since, or
// forgotten (a new end of a key is recorded anew).
func (n *Node) reclaimable(ks []endedKey) (cands, kept, gone []endedKey) {
	for _, e := range ks {
		k, ok := n.fsm.Get(e.key)
		if !ok || k.Token != e.token || k.State == fsm.Held {
			gone = append(gone, e)
			continue
		}
		if _, inForce := n.leases.lockDelayLeft(e.key); inForce || n.waiters.waiting(e.key) {
			kept = append(kept, e)
			continue
		}
		cands = append(cands, e)
	}
	return cands, kept, gone
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
