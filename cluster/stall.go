package cluster

import (
	"time"

	"github.com/fenced/fenced/metrics"
)

// DefaultLogStallBound is how long a leader's own log write may take before
// the leader stops leading. A healthy fsync takes milliseconds; two seconds is
// two default heartbeat timeouts, long past any healthy write, and short
// enough that the followers' election (one election timeout after they stop
// hearing the leader) ends the outage within about three seconds.
const DefaultLogStallBound = 2 * time.Second

// watchStalls ends the leadership of a leader whose log write stalls. Raft's
// leader goroutine waits for its own write (the entries go to the followers
// while it waits, but nothing commits or is applied until it returns) and
// its heartbeats go on, so a leader with a stalled disk holds the whole
// cluster: followers never elect another. Past LogStallBound the leader's
// Raft transport is muted: its heartbeats and RPCs stop reaching the peers,
// which elect a leader of their own within an election timeout. Once the
// write returns the transport speaks again; the old leader learns of the new
// term and follows. A follower's stalled write holds no one (a quorum of the
// others commits without it), so only a leader is muted. Reads and renewals
// on the muted leader need a quorum's answer to a heartbeat sent after they
// arrived, so it serves none of them while muted.
func (n *Node) watchStalls() {
	defer n.wg.Done()
	if n.cfg.LogStallBound < 0 {
		return
	}
	t := time.NewTicker(n.cfg.LogStallBound / 8)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.checkStall()
	}
}

// checkStall mutes the transport of a leader whose log write has stalled past
// the bound, and unmutes it once no write is stalled.
func (n *Node) checkStall() {
	g, ok := n.store.(*gatedStore)
	if !ok {
		return
	}
	n.raftMu.RLock()
	layer := n.layer
	n.raftMu.RUnlock()
	if layer == nil {
		return
	}
	stalled := g.writeStalled()
	switch {
	case !layer.muted.Load() && stalled > n.cfg.LogStallBound && n.IsLeader():
		layer.muted.Store(true)
		metrics.LogStalls.Inc()
		n.log.Warn("the leader's raft log write has stalled: it stops leading (its raft transport is muted) so that the others elect a leader",
			"stalled", stalled.Round(time.Millisecond), "bound", n.cfg.LogStallBound)
	case layer.muted.Load() && stalled == 0:
		layer.muted.Store(false)
		n.log.Info("the raft log write returned: the transport speaks again", "bound", n.cfg.LogStallBound)
	}
}
