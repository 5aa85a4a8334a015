package raft

import (
	"testing"
	"time"
)

// Only voters confirm a leadership: a leader cut off from the other voters
// but still reaching non-voters leads no quorum, so VerifyLeader must not be
// confirmed, and QuorumContact must not advance past the cut. Upstream
// counts every follower's answer towards VerifyLeader's quorum, non-voters
// included, and confirms the stale leadership.
func TestRaft_VerifyLeaderCountsOnlyVoters(t *testing.T) {
	c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 5, Bootstrap: true, Conf: inmemConfig(t)})
	defer c.Close()
	leader := c.Leader()
	lead := serverIndex(c, leader)
	var voters, nonvoters []int
	for i, r := range c.rafts {
		switch {
		case i == lead:
		case len(nonvoters) < 2:
			if err := leader.DemoteVoter(r.localID, 0, 0).Error(); err != nil {
				t.Fatalf("demote %s: %v", r.localID, err)
			}
			nonvoters = append(nonvoters, i)
		default:
			voters = append(voters, i)
		}
	}
	if err := leader.VerifyLeader().Error(); err != nil {
		t.Fatalf("verify with every member reachable: %v", err)
	}

	// Cut the leader off from both other voters, both ways; the non-voters
	// still answer its heartbeats.
	for _, i := range voters {
		c.trans[lead].Disconnect(c.trans[i].LocalAddr())
		c.trans[i].Disconnect(c.trans[lead].LocalAddr())
	}
	mark := leader.contactNow()
	v := leader.VerifyLeader()
	done := errCh(v)
	for {
		if sent, ok := leader.QuorumContact(); ok && sent.After(mark) {
			t.Fatalf("quorum contact %v after the leader was cut off from the other voters", sent.Sub(mark))
		}
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("VerifyLeader confirmed by non-voters while the leader was cut off from the other voters")
			}
			return
		case <-time.After(time.Millisecond):
		}
	}
}
