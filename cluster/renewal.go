package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/metrics"
)

// A renewal must never promise a lease that a newer leader may end first.
// A ready leader proves that with a confirmation round asked for after the
// renewal arrived (confirm.go), or, cheaper, with a recent quorum contact:
//
//   - A quorum accepted a heartbeat this leader sent at time h. A follower
//     votes in a later term only after it accepted that heartbeat, so every
//     newer leader was elected after h (raft's QuorumContact).
//   - The leader answers the renewal at c, with c - h <= renewWindow.
//   - A newer leader serves nothing, and re-arms no lease, until takeoverWait
//     after it learned it leads: after h + takeoverWait > c.
//
// So the renewal was answered before any newer leader answered anything, and
// the newer leader re-arms the lease for a full TTL from a later moment than
// the holder's renewal: the same promise a confirmation round gives. The
// argument rests on clocks only as leases already do: durations measured on
// two machines agree to within the margin between the two constants.

const (
	// renewWindow bounds the age of the quorum contact a renewal may rest on.
	// Heartbeats leave every tenth to fifth of the heartbeat timeout
	// (100-200 ms by default), so a healthy cluster's contact is nearly always
	// younger; with a heartbeat timeout above 1.25 s, more renewals take a
	// round (which refreshes the contact for those after it).
	renewWindow = 250 * time.Millisecond
	// takeoverWait is how long a new leader waits after it learned it leads
	// before it re-arms leases and serves. It must exceed renewWindow on
	// every node of a cluster, with margin for clocks that run at slightly
	// different rates.
	takeoverWait = 300 * time.Millisecond
)

// The two counters of RenewalConfirms, resolved once: renewals are the
// hottest path.
var (
	renewalsByContact = metrics.RenewalConfirms.WithLabelValues("recent_quorum")
	renewalsByRound   = metrics.RenewalConfirms.WithLabelValues("round")
)

// quorumContactAge is how long ago this leader sent the latest heartbeat a
// quorum accepted; false on a follower, or without a clock that counts a
// suspended machine's sleep (contactClock), where a suspend would look like
// no time at all.
func quorumContactAge(r *raft.Raft) (time.Duration, bool) {
	if contactClock == nil {
		return 0, false
	}
	sent, ok := r.QuorumContact()
	if !ok {
		return 0, false
	}
	return contactClock().Sub(sent), true
}

// recentQuorum reports whether a quorum accepted a heartbeat this leader sent
// within renewWindow.
func recentQuorum(r *raft.Raft) bool {
	age, ok := quorumContactAge(r)
	return ok && age <= renewWindow
}

// confirmRenewal is confirmReady for renewals, which may rest on a recent
// quorum contact instead of a round of their own.
func (n *Node) confirmRenewal(ctx context.Context) error {
	gen, err := n.requireReady()
	if err != nil {
		return err
	}
	if recentQuorum(n.r()) && n.ready.Load() == gen {
		renewalsByContact.Inc()
		return nil
	}
	renewalsByRound.Inc()
	return n.confirmReady(ctx)
}

// failoverBound is how long, at most, the cluster may serve no renewal
// after its leader dies: followers start an election within two heartbeat
// timeouts (raft randomizes them between one and two), a candidate wins
// within an election timeout, and the new leader waits out its takeover.
func (n *Node) failoverBound() time.Duration {
	return 2*n.cfg.HeartbeatTimeout + n.cfg.ElectionTimeout + takeoverWait
}

// waitTakeover holds a new leader until takeoverWait after it learned it
// leads (gained); false if it stopped leading or the node closed meanwhile.
func (n *Node) waitTakeover(gen uint64, gained time.Time) bool {
	if d := time.Until(gained.Add(takeoverWait)); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-n.stop:
			return false
		}
	}
	return n.gen.Load() == gen
}
