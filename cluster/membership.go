package cluster

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fsm"
)

// Status returns this node's view; it is local, not linearizable.
func (n *Node) Status() Status {
	r := n.r()
	lid, lhttp := n.Leader()
	st := Status{
		ID:           n.cfg.ID,
		ClusterID:    n.fsm.ClusterID(),
		State:        r.State().String(),
		Ready:        n.Ready(),
		LeaderID:     lid,
		LeaderHTTP:   lhttp,
		Term:         r.CurrentTerm(),
		CommitIndex:  r.CommitIndex(),
		AppliedIndex: n.fsm.Applied(),
		LastIndex:    r.LastIndex(),
		EpochFloor:   n.fsm.Floor(),
		Keys:         n.fsm.Len(),
		Waiters:      n.waiters.count(),
		FailoverMS:   n.failoverBound().Milliseconds(),
	}
	if d := n.DataDir(); d.Path != "" {
		st.DataDir = &d
	}
	if f := r.GetConfiguration(); n.wait(f) == nil {
		https := n.fsm.Members()
		for _, s := range f.Configuration().Servers {
			st.Members = append(st.Members, Member{
				ID: string(s.ID), RaftAddr: string(s.Address), HTTPAddr: https[string(s.ID)],
				Voter: s.Suffrage == raft.Voter, Leader: string(s.ID) == lid,
			})
		}
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
	if age, ok := quorumContactAge(r); ok {
		ms := float64(age.Microseconds()) / 1000
		st.QuorumContactMS = &ms
	}
	return st
}

// isMember reports whether id is in the Raft configuration. Raft answers
// GetConfiguration from memory at once, also while it restarts or stops, so
// there is nothing to wait for (a wait would take raft's restart for a
// configuration without this node).
func (n *Node) isMember(id string) bool {
	for _, s := range n.r().GetConfiguration().Configuration().Servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// InConfiguration reports whether this node is a member of the Raft
// configuration it knows.
func (n *Node) InConfiguration() bool { return n.isMember(n.cfg.ID) }

// awaitOtherLeader waits, briefly, until this node sees a leader that is not
// itself, so a forwarded request has somewhere to go.
func (n *Node) awaitOtherLeader(ctx context.Context) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if id, addr := n.Leader(); id != "" && id != n.cfg.ID && addr != "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stats returns raft's own statistics.
func (n *Node) Stats() map[string]string { return n.r().Stats() }

// Join adds a voter (or updates its address) and records its HTTP address.
// Only the leader can do it; a member already present with the same address
// is left as it is, so joining is idempotent.
func (n *Node) Join(ctx context.Context, id, raftAddr, httpAddr string) error {
	if _, err := n.requireReady(); err != nil {
		return err
	}
	if id == "" || raftAddr == "" {
		return fmt.Errorf("%w: join needs an id and a raft address", ErrBadRequest)
	}
	r := n.r()
	f := r.GetConfiguration()
	if err := n.wait(f); err != nil {
		return translate(err)
	}
	present := false
	for _, s := range f.Configuration().Servers {
		switch {
		case s.ID == raft.ServerID(id) && s.Address == raft.ServerAddress(raftAddr):
			present = true
		case s.ID == raft.ServerID(id) || s.Address == raft.ServerAddress(raftAddr):
			n.log.Info("replacing member with a changed id or address", "id", s.ID, "addr", s.Address)
			if err := n.wait(r.RemoveServer(s.ID, 0, n.cfg.ApplyTimeout)); err != nil {
				return translate(err)
			}
		}
	}
	if !present {
		n.log.Info("adding voter", "id", id, "raft_addr", raftAddr)
		if err := n.wait(r.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout)); err != nil {
			return translate(err)
		}
	}
	if httpAddr != "" && n.fsm.Members()[id] != httpAddr {
		if _, err := n.apply(fsm.SetMember{ID: id, HTTPAddr: httpAddr}); err != nil {
			return err
		}
	}
	return nil
}

// Remove takes a server out of the cluster. Removing the leader itself hands
// leadership over first, so the cluster does not wait for an election.
func (n *Node) Remove(ctx context.Context, id string) error {
	if _, err := n.requireReady(); err != nil {
		return err
	}
	if id == n.cfg.ID {
		// Hand leadership over first; the request is then served by the new
		// leader (the API layer forwards on ErrNotLeader).
		if err := n.TransferLeadership(""); err != nil {
			return err
		}
		n.awaitOtherLeader(ctx)
		return ErrNotLeader
	}
	if !n.isMember(id) {
		return fmt.Errorf("%w: no member %q", ErrBadRequest, id)
	}
	if err := n.wait(n.r().RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout)); err != nil {
		return translate(err)
	}
	_, err := n.apply(fsm.DelMember{ID: id})
	return err
}

// memberRecordKey is the stable-store key under which a node records how far
// it got into a cluster: its join was accepted, or it saw itself a member. The
// record outlives restarts, so a node that was removed still knows, after a
// restart, that it must not announce itself again.
var memberRecordKey = []byte("fenced_membership")

// Levels of the membership record; it only rises.
const (
	recordNone   uint32 = iota
	recordJoined        // a leader accepted this node's join
	recordMember        // this node saw itself in its configuration
)

var recordValues = map[uint32]string{recordJoined: "joined", recordMember: "member"}

// Self is what a node knows of its own place in the cluster.
type Self int

// A node's place in the cluster, from its latest Raft configuration and its
// own durable record.
const (
	// SelfNew: never a member as far as this node knows (a fresh node with
	// no configuration, or one that did not take part in it). It may
	// announce itself.
	SelfNew Self = iota
	// SelfJoining: a leader accepted its join, but it has not seen itself in
	// a configuration yet. It does not announce itself again.
	SelfJoining
	// SelfMember: its latest configuration holds it.
	SelfMember
	// SelfRemoved: it saw itself a member, and its latest configuration no
	// longer holds it. It never adds itself back; only an operator does.
	SelfRemoved
)

func (s Self) String() string {
	switch s {
	case SelfJoining:
		return "joining"
	case SelfMember:
		return "member"
	case SelfRemoved:
		return "removed"
	}
	return "new"
}

// loadMemberRecord reads the node's durable membership record.
func (n *Node) loadMemberRecord() {
	v, err := n.store.Get(memberRecordKey)
	if err != nil {
		return // none yet
	}
	for level, name := range recordValues {
		if string(v) == name {
			n.memberRecord.Store(level)
		}
	}
}

// raiseMemberRecord records, durably, that this node got to level.
func (n *Node) raiseMemberRecord(level uint32) {
	if n.memberRecord.Load() >= level {
		return
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	if n.memberRecord.Load() >= level {
		return
	}
	if err := n.store.Set(memberRecordKey, []byte(recordValues[level])); err != nil {
		// Kept in memory: this process still never re-adds itself.
		n.log.Error("could not record membership durably", "level", recordValues[level], "error", err)
	}
	n.memberRecord.Store(level)
}

// RecordJoined records, durably, that a leader accepted this node's join:
// from then on the node does not announce itself again, even if it is
// removed before it ever sees a configuration with itself.
func (n *Node) RecordJoined() { n.raiseMemberRecord(recordJoined) }

// Self returns this node's place in the cluster. A node that is in its latest
// configuration records that it has been a member.
func (n *Node) Self() Self {
	if n.InConfiguration() {
		n.raiseMemberRecord(recordMember)
		return SelfMember
	}
	switch n.memberRecord.Load() {
	case recordMember:
		return SelfRemoved
	case recordJoined:
		return SelfJoining
	}
	return SelfNew
}

// MemberErr returns ErrNotMember, saying why, when this node is not in its
// latest configuration of the cluster; nil when it is.
func (n *Node) MemberErr() error {
	switch n.Self() {
	case SelfMember:
		return nil
	case SelfRemoved:
		return fmt.Errorf("%w: node %q was removed from the cluster", ErrNotMember, n.cfg.ID)
	case SelfJoining:
		return fmt.Errorf("%w: node %q is joining and has not received the cluster's configuration yet", ErrNotMember, n.cfg.ID)
	}
	return fmt.Errorf("%w: node %q has not joined a cluster", ErrNotMember, n.cfg.ID)
}

// membershipPoll is how often a node looks at its own place in the cluster.
const membershipPoll = 200 * time.Millisecond

// watchMembership records this node's membership as soon as it sees itself in
// the configuration, and says in the log when it was removed (and when an
// operator added it back).
func (n *Node) watchMembership() {
	defer n.wg.Done()
	t := time.NewTicker(membershipPoll)
	defer t.Stop()
	last := SelfNew
	for {
		select {
		case <-t.C:
		case <-n.stop:
			return
		}
		s := n.Self()
		if s == last {
			continue
		}
		switch {
		case s == SelfRemoved:
			n.log.Warn("this node was removed from the cluster: it does not add itself back, and answers requests with not_member; an operator can add it again (fencectl members add)")
		case s == SelfMember && last == SelfRemoved:
			n.log.Info("this node is a member of the cluster again")
		case s == SelfMember:
			n.log.Info("this node is a member of the cluster")
		}
		last = s
	}
}
