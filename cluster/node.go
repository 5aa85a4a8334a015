// Package cluster runs one fenced node: Raft with durable stores, the leader's
// lease timers, the linearizable read path and the write path with honest errors.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fence/proof"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/metrics"
)

// Node is one member of a fenced cluster.
type Node struct {
	cfg Config
	log hclog.Logger
	fsm *fsm.FSM

	store logStore
	snaps *raft.FileSnapshotStore

	// earlySeen is the state machine's count of request ids forgotten
	// early when the metric last took it.
	earlySeen atomic.Uint64

	raftMu   sync.RWMutex // guards raft across a single-node restart
	raft     *raft.Raft
	trans    *raft.NetworkTransport
	layer    *StreamLayer  // trans's; muted while the leader's log write stalls (stall.go)
	raftDone chan struct{} // closed when this raft instance is replaced

	leases  *leases
	waiters *waitq
	confirm *confirmer
	reclaim reclaimer
	// takeovers are the takeover barriers this node applied, and when
	// (takeovers.go).
	takeovers takeovers
	// expiry proposes the expiries of leases that ran out (expiry.go).
	expiry expirer

	// ready is the leadership generation whose barrier and lease re-arming
	// are done; 0 while not leading or not yet ready.
	ready atomic.Uint64
	gen   atomic.Uint64
	// newTerm is set while a new term is being forced (seq exhaustion).
	newTerm atomic.Bool
	// acquiring counts the acquires proposed and not yet applied; one alone
	// signs its proof while it commits (presign).
	acquiring atomic.Int32

	testHooks atomic.Pointer[hooks] // nil in production (hooks.go)

	// signer is the node's signing key (signing.go); rotateMu serializes
	// rotations.
	signer   atomic.Pointer[proof.Signer]
	rotateMu sync.Mutex

	// memberRecord mirrors the durable record of how far this node got
	// into the cluster (membership.go); memberMu serializes writing it.
	memberRecord atomic.Uint32
	memberMu     sync.Mutex

	leaderChanges    atomic.Uint64
	stopStoreMetrics context.CancelFunc
	stop             chan struct{}
	wg               sync.WaitGroup
	closeOnce        sync.Once

	// failed is closed once the node stopped itself after its log store
	// failed an fsync (failclosed.go); failErr says why.
	failed   chan struct{}
	failOnce sync.Once
	failErr  error

	// disk is the data dir's free-space watch (diskspace.go).
	disk diskWatch
}

// New opens the node's stores, starts Raft and, for a fresh data dir,
// bootstraps the cluster when Peers or Bootstrap say so.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.Named("cluster"), waiters: newWaitq(), stop: make(chan struct{}), failed: make(chan struct{})}
	n.reclaim.kick = make(chan struct{}, 1)
	n.fsm = fsm.New(fsm.Config{MaxSeq: cfg.MaxSeq, Observer: n, ReclaimIgnoresEpoch: cfg.ReclaimIgnoresEpoch})
	n.leases = newLeases(n.log.Named("leases"), n.proposeExpire, n.proposeDelayEnd)
	n.leases.room = n.expiry.room
	if !cfg.LeaseRearmFull {
		n.leases.takeoverAt = n.takeovers.after
	}
	signer, err := loadSigner(&cfg)
	if err != nil {
		return nil, err
	}
	n.signer.Store(&signer)
	n.confirm = &confirmer{verify: func() error { return translateRead(n.wait(n.r().VerifyLeader())) }}
	store, stopStoreMetrics, err := openStoreWith(cfg.DataDir, cfg.Store, cfg.NoSync, cfg.Logger, walOptions{wrap: cfg.walFileSystem(), segmentSize: cfg.WALSegmentSize})
	if err != nil {
		return nil, err
	}
	g := gate(store)
	g.onSyncFailure = n.failClosed
	g.onNoSpace = n.sawENOSPC
	g.ackUnwritten = cfg.AckUnwrittenLog
	n.store = g
	n.stopStoreMetrics = stopStoreMetrics
	n.loadMemberRecord()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, cfg.Logger.Named("snapshots"))
	if err != nil {
		store.Close()
		return nil, err
	}
	n.snaps = snaps
	if err := n.startRaft(); err != nil {
		store.Close()
		return nil, err
	}
	if err := n.bootstrap(); err != nil {
		n.Close()
		return nil, err
	}
	n.wg.Add(3)
	go n.watchMembership()
	go n.watchDisk()
	go n.watchStalls()
	n.startReclaim()
	return n, nil
}

func (n *Node) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.ID)
	rc.HeartbeatTimeout = n.cfg.HeartbeatTimeout
	rc.ElectionTimeout = n.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = n.cfg.LeaderLeaseTimeout
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotThreshold = n.cfg.SnapshotThreshold
	rc.SnapshotInterval = n.cfg.SnapshotInterval
	rc.TrailingLogs = n.cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.Logger = n.cfg.Logger.Named("raft")
	rc.ContactClock = contactClock
	return rc
}

// logCacheSize is how many recent log entries are kept in memory: a few
// MaxAppendEntries batches, enough for followers that keep up.
const logCacheSize = 1024

// startRaft builds the transport and the raft instance. Each instance gets its
// own notify channel and watcher goroutine.
func (n *Node) startRaft() error {
	layer, err := NewStreamLayer(n.cfg.RaftBind, n.cfg.RaftAdvertise, n.cfg.RaftServerTLS, n.cfg.RaftClientTLS,
		WithStreamLogger(n.cfg.Logger.Named("raft-tls")), withResolver(n.cfg.raftResolve), withoutIDCheck(n.cfg.raftSkipIDCheck))
	if err != nil {
		return err
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:   layer,
		MaxPool:  4,
		Timeout:  5 * time.Second,
		Logger:   n.cfg.Logger.Named("transport"),
		CheckRPC: layer.CheckRPC,
	})
	rc := n.raftConfig()
	notify := make(chan bool, 16)
	rc.NotifyCh = notify
	// Replication reads back every entry it sends; the cache serves the
	// recent ones from memory instead of a read from disk per entry. A fresh
	// cache per raft instance: a restarted raft must not see stale entries.
	logs, err := raft.NewLogCache(logCacheSize, n.store)
	if err != nil {
		trans.Close()
		return err
	}
	r, err := raft.NewRaft(rc, n.fsm, logs, n.store, n.snaps, boundTransport{trans})
	if err != nil {
		trans.Close()
		return fmt.Errorf("start raft: %w", err)
	}
	done := make(chan struct{})
	n.raftMu.Lock()
	n.raft, n.trans, n.layer, n.raftDone = r, trans, layer, done
	n.raftMu.Unlock()
	n.wg.Add(1)
	go n.watchLeadership(r, notify, done)
	return nil
}

func (n *Node) r() *raft.Raft {
	n.raftMu.RLock()
	defer n.raftMu.RUnlock()
	return n.raft
}

func (n *Node) bootstrap() error {
	has, err := raft.HasExistingState(n.store, n.store, n.snaps)
	if err != nil || has {
		if has {
			n.log.Info("existing state found; bootstrap settings are ignored")
		}
		return err
	}
	var servers []raft.Server
	switch {
	case len(n.cfg.Peers) > 0:
		for _, p := range n.cfg.Peers {
			servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
		}
	case n.cfg.Bootstrap:
		servers = []raft.Server{{ID: raft.ServerID(n.cfg.ID), Address: raft.ServerAddress(n.Addr())}}
	default:
		n.log.Info("fresh node without peers: waiting to be added to a cluster")
		return nil
	}
	n.log.Info("bootstrapping a new cluster", "servers", len(servers))
	f := n.r().BootstrapCluster(raft.Configuration{Servers: servers})
	if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// Addr returns the node's advertised Raft address.
func (n *Node) Addr() string {
	if n.cfg.RaftAdvertise != "" {
		return n.cfg.RaftAdvertise
	}
	return n.cfg.RaftBind
}

// ID returns the node's server ID.
func (n *Node) ID() string { return n.cfg.ID }

// FSM returns the node's state machine, for local (not linearizable) reads.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// watchLeadership turns raft's leadership notifications into the leader's
// duties: establish on gain, stop everything at once on loss.
func (n *Node) watchLeadership(r *raft.Raft, notify <-chan bool, done <-chan struct{}) {
	defer n.wg.Done()
	for {
		select {
		case leader := <-notify:
			n.leaderChanges.Add(1)
			metrics.LeaderChanges.Inc()
			if leader {
				gen := n.gen.Add(1)
				n.log.Info("gained leadership", "generation", gen, "term", r.CurrentTerm())
				n.wg.Add(1)
				go n.establish(r, gen, time.Now())
			} else {
				n.revoke()
			}
		case <-n.stop:
			return
		case <-done:
			return
		}
	}
}

func (n *Node) revoke() {
	n.gen.Add(1)
	n.ready.Store(0)
	metrics.IsLeader.Set(0)
	n.leases.deactivate()
	n.reclaim.deactivate()
	n.waiters.kickAll()
	n.log.Info("lost leadership: leases stopped, not ready")
}

// establish makes a new leader ready: a barrier entry of its own term is
// committed and applied (so every entry of earlier terms is applied and the
// FSM's applied index reaches the commit index), the leader waits until
// takeoverWait after it learned it leads (gained; renewal.go says why) while
// it re-arms every live lease for a full TTL counted from the wait's end, and
// only then reads and writes are served. An election can therefore never
// shorten a lease.
func (n *Node) establish(r *raft.Raft, gen uint64, gained time.Time) {
	defer n.wg.Done()
	var barrier uint64
	for n.gen.Load() == gen {
		f := r.Apply(fsm.Encode(fsm.Barrier{}), n.cfg.ApplyTimeout)
		err := n.wait(f)
		if err == nil {
			barrier = f.Index()
			break
		}
		n.log.Warn("barrier failed", "error", err)
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return
		}
	}
	// The re-arm overlaps the takeover wait: its leases count from the
	// wait's end, as if armed then, and nothing is served before it.
	n.leases.activateAt(gen, gained.Add(takeoverWait), n.touchBelow(barrier), n.walkLeases, n.fsm.LockDelayed())
	if !n.waitTakeover(gen, gained) {
		n.leases.deactivateGen(gen)
		return
	}
	n.reclaim.activate(gen)
	n.registerSigningKey(r, gen)
	if h := n.hook().beforeReady; h != nil {
		h(gen)
	}
	if !n.markReady(gen) {
		n.leases.deactivateGen(gen)
		n.reclaim.deactivateGen(gen)
		return
	}
	metrics.IsLeader.Set(1)
	n.reclaim.requestScan() // the counts of ended keys per identity are whole after it
	n.log.Info("leader ready", "generation", gen, "term", r.CurrentTerm())
	n.registerSelf(r, gen)
}

// markReady makes gen the ready generation unless it was revoked. A check of
// the generation followed by a plain store would let a revoke in between leave
// a stale flag behind, so the flag is set first and the generation checked
// after: a revoke that bumped it before the check is seen and the flag taken
// back (only if it is still ours); one after the check clears it itself.
func (n *Node) markReady(gen uint64) bool {
	for {
		old := n.ready.Load()
		if old >= gen {
			return false // a newer generation got there first
		}
		if n.ready.CompareAndSwap(old, gen) {
			break
		}
	}
	if n.gen.Load() != gen {
		n.ready.CompareAndSwap(gen, 0)
		return false
	}
	return true
}

// registerSelf records this node's HTTP address in the replicated state, so
// followers can forward to it.
func (n *Node) registerSelf(r *raft.Raft, gen uint64) {
	if n.fsm.ClusterID() == "" {
		if err := n.wait(r.Apply(fsm.Encode(fsm.SetClusterID{ID: newClusterID()}), n.cfg.ApplyTimeout)); err != nil && n.gen.Load() == gen {
			n.log.Warn("could not record the cluster id", "error", err)
		}
	}
	if n.cfg.HTTPAdvertise == "" || n.fsm.Members()[n.cfg.ID] == n.cfg.HTTPAdvertise {
		return
	}
	f := r.Apply(fsm.Encode(fsm.SetMember{ID: n.cfg.ID, HTTPAddr: n.cfg.HTTPAdvertise}), n.cfg.ApplyTimeout)
	if err := n.wait(f); err != nil && n.gen.Load() == gen {
		n.log.Warn("could not record HTTP address", "error", err)
	}
}

// Granted implements fsm.Observer.
func (n *Node) Granted(k fsm.KeyState, renewed bool) {
	n.leases.granted(leaseOf(k))
	if !renewed {
		n.reclaim.granted(k)
	}
	if n.ready.Load() != 0 {
		if renewed {
			metrics.Renewals.WithLabelValues("acquire").Inc()
		} else {
			metrics.Grants.Inc()
		}
	}
}

// Touched implements fsm.Toucher: a Touch entry renewed k, which now runs a
// full TTL from now with its new Armed index.
func (n *Node) Touched(k fsm.KeyState) {
	n.leases.granted(leaseOf(k))
}

// BarrierApplied implements fsm.TakeoverObserver.
func (n *Node) BarrierApplied(index, term uint64) {
	n.takeovers.barrier(index, term, time.Now())
}

// touchBelow is the index below which (inclusive) a leadership whose
// takeover barrier is at index renews a lease through a Touch entry: the
// barrier's, or 0 (never) for the positive control that re-arms every
// lease for a full TTL at every election.
func (n *Node) touchBelow(index uint64) uint64 {
	if n.cfg.LeaseRearmFull {
		return 0
	}
	return max(index, 1)
}

// Ended implements fsm.Observer.
func (n *Node) Ended(k fsm.KeyState) {
	if h := n.hook().ended; h != nil {
		h(k)
	}
	n.leases.ended(leaseOf(k))
	if k.Permit() {
		n.permitEnded(k.Key)
	} else {
		n.reclaim.ended(k)
	}
	n.waiters.kick(k.Key)
	if n.ready.Load() != 0 {
		if k.State == fsm.Expired {
			metrics.Expiries.Inc()
		} else {
			metrics.Releases.Inc()
		}
	}
}

// Restored implements fsm.Observer. A leader never installs a snapshot from a
// peer; if its state is replaced anyway, the lease table follows the new state.
func (n *Node) Restored() {
	n.takeovers.reset()
	if gen := n.ready.Load(); gen != 0 {
		// Every grant of the new state is renewed through a touch first.
		n.leases.activateAt(gen, time.Time{}, n.touchBelow(n.fsm.Applied()), n.walkLeases, n.fsm.LockDelayed())
		n.reclaim.activate(gen)
		n.reclaim.requestScan()
	}
}

// proposeDelayEnd records in the log that a key's lock-delay ran out on
// this leader's clock, so watchers hear of it and a later leader does not
// keep the key again. It is tried once: if it fails, the next leader keeps
// the key for a full delay from its takeover and proposes the end then. A
// waiter's acquire may commit first; the entry is then a no-op (the FSM
// checks that the expired grant is still the key's).
func (n *Node) proposeDelayEnd(gen uint64, e fsm.DelayEnd) {
	if !n.fsm.DelayPending(e.Key, e.Token) {
		return // granted again, or already recorded: nothing to say
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if n.ready.Load() != gen {
			return
		}
		if _, err := n.apply(e); err != nil {
			n.log.Debug("the end of a lock-delay was not recorded; the next leader records it", "key", e.Key, "token", e.Token, "error", err)
			return
		}
		n.log.Debug("lock-delay ended", "key", e.Key, "token", e.Token)
	}()
}

// expiredBy reports whether the key is, after the expiry's entry, expired
// with the expiry's token: by that entry, or by an earlier attempt of it whose
// outcome was unknown.
func expiredBy(res *fsm.Result, e fsm.Expire) bool {
	return res.Changed || (res.Key.State == fsm.Expired && res.Key.Token == e.Token)
}

// wait returns a raft future's error, or ErrRaftShutdown once the node stops.
// A future queued in raft's buffered apply channel when raft shuts down is
// never answered, so nothing here waits on a future unbounded.
func (n *Node) wait(f raft.Future) error {
	n.raftMu.RLock()
	replaced := n.raftDone
	n.raftMu.RUnlock()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-n.stop:
		return raft.ErrRaftShutdown
	case <-replaced:
		return raft.ErrRaftShutdown
	}
}

// Close shuts the node down: raft first (so no more entries apply), then the
// store.
func (n *Node) Close() error {
	var err error
	n.closeOnce.Do(func() {
		n.revoke()
		close(n.stop)
		err = n.shutdownRaft()
		n.wg.Wait()
		n.stopStoreMetrics()
		if cerr := n.store.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// shutdownRaft stops raft and waits for it. The transport is closed before
// the wait: raft closes it only after its goroutines end, and until then
// peers' RPCs wait on a raft that no longer reads them, which can keep a
// replication goroutine of either side blocked for minutes.
func (n *Node) shutdownRaft() error {
	n.raftMu.RLock()
	r, trans := n.raft, n.trans
	n.raftMu.RUnlock()
	f := r.Shutdown()
	_ = trans.Close()
	return f.Error()
}

// IsLeader reports whether this node is the leader.
func (n *Node) IsLeader() bool { return n.r().State() == raft.Leader }

// Ready reports whether this node leads and has finished establishing. Raft
// steps down before the node hears of it, so raft's own state is checked too.
func (n *Node) Ready() bool { return n.ready.Load() != 0 && n.IsLeader() }

// Leader returns the leader's server ID and the HTTP address recorded for it;
// empty when unknown, and on a node that is not a member of the cluster: it
// has no leader to forward to (MemberErr says why).
func (n *Node) Leader() (id, httpAddr string) {
	_, lid := n.r().LeaderWithID()
	if lid == "" || (string(lid) != n.cfg.ID && !n.InConfiguration()) {
		return "", ""
	}
	return string(lid), n.fsm.Member(string(lid))
}

// LeaderSilent reports whether this node, a follower, has not heard from its
// leader for half a heartbeat timeout, when raft's leader sends a heartbeat
// every tenth of one: the leader is frozen, cut off or gone, and this node
// will stand as a candidate within a heartbeat timeout or so. A request
// forwarded to that leader now would wait until then for nothing.
func (n *Node) LeaderSilent() bool {
	r := n.r()
	if r.State() != raft.Follower {
		return false
	}
	last := r.LastContact()
	return !last.IsZero() && time.Since(last) > n.cfg.HeartbeatTimeout/2
}

// TransferLeadership hands leadership to the voter id, or to the most
// up-to-date voter when id is empty, and waits for it.
func (n *Node) TransferLeadership(id string) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if id == "" {
		return translate(n.wait(n.r().LeadershipTransfer()))
	}
	f := n.r().GetConfiguration()
	if err := n.wait(f); err != nil {
		return translate(err)
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			if id == n.cfg.ID {
				return nil // already the leader
			}
			return translate(n.wait(n.r().LeadershipTransferToServer(s.ID, s.Address)))
		}
	}
	return fmt.Errorf("%w: no member %q", ErrBadRequest, id)
}
