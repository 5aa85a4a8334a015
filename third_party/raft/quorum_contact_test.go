package raft

import (
	"testing"
	"time"
)

// slowAnswers delays the answer to every accepted heartbeat on its way back
// to the leader.
type slowAnswers struct {
	LoopbackTransport
	lag time.Duration
}

func (s *slowAnswers) AppendEntries(id ServerID, target ServerAddress, args *AppendEntriesRequest, resp *AppendEntriesResponse) error {
	err := s.LoopbackTransport.AppendEntries(id, target, args, resp)
	if err == nil && len(args.Entries) == 0 && resp.Success {
		time.Sleep(s.lag)
	}
	return err
}

// QuorumContact must report when accepted heartbeats were sent, not when
// their answers arrived: every answer here comes back lag after its
// heartbeat left, so no reported time may be later than lag ago. Taking the
// arrival time breaks that within one heartbeat.
func TestRaft_QuorumContactIsASendTime(t *testing.T) {
	const lag = 100 * time.Millisecond
	conf := inmemConfig(t)
	conf.HeartbeatTimeout = 500 * time.Millisecond
	conf.ElectionTimeout = 500 * time.Millisecond
	conf.LeaderLeaseTimeout = 500 * time.Millisecond
	c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: conf,
		WrapTransport: func(tr LoopbackTransport) LoopbackTransport {
			return &slowAnswers{LoopbackTransport: tr, lag: lag}
		}})
	defer c.Close()
	leader := c.Leader()

	var first time.Time
	waitFor(t, func() bool {
		var ok bool
		first, ok = leader.QuorumContact()
		return ok
	}, "a quorum to accept a heartbeat")
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		sent, ok := leader.QuorumContact()
		now := time.Now()
		if !ok {
			t.Fatal("the leader lost its quorum contact")
		}
		if sent.After(now.Add(-lag)) {
			t.Fatalf("quorum contact %v ago, but every answer takes %v to come back", now.Sub(sent), lag)
		}
	}
	if last, _ := leader.QuorumContact(); !last.After(first) {
		t.Fatal("the quorum contact did not advance in a second of heartbeats")
	}
}

// Cut off from a minority of its followers the leader's quorum contact keeps
// advancing; cut off from a majority it stops at the moment of the cut.
func TestRaft_QuorumContactNeedsAQuorum(t *testing.T) {
	c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 5, Bootstrap: true, Conf: inmemConfig(t)})
	defer c.Close()
	leader := c.Leader()
	lead := serverIndex(c, leader)
	var followers []int
	for i := range c.rafts {
		if i != lead {
			followers = append(followers, i)
		}
	}
	cut := func(i int) { c.trans[lead].Disconnect(c.trans[i].LocalAddr()) }

	cut(followers[0])
	cut(followers[1])
	mark := time.Now()
	waitFor(t, func() bool {
		sent, ok := leader.QuorumContact()
		return ok && sent.After(mark)
	}, "the two followers still reachable to accept a heartbeat")

	cut(followers[2])
	mark = time.Now()
	for end := mark.Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if sent, ok := leader.QuorumContact(); ok && sent.After(mark) {
			t.Fatalf("quorum contact %v after the leader was cut off from a majority", sent.Sub(mark))
		}
	}
}

// A new term starts with no quorum contact: answers to the heartbeats of an
// earlier leadership do not count.
func TestQuorumContactIgnoresOtherTerms(t *testing.T) {
	var q quorumContact
	q.reset(2)
	now := time.Now()
	q.accepted(1, "a", now)
	if _, ok := q.latest(2, []ServerID{"a", "b"}, 1); ok {
		t.Fatal("an answer of term 1 counted in term 2")
	}
	q.accepted(2, "a", now.Add(-time.Second))
	q.accepted(2, "b", now)
	if got, ok := q.latest(2, []ServerID{"a", "b"}, 2); !ok || !got.Equal(now.Add(-time.Second)) {
		t.Fatalf("two of two: got %v %v, want the older send time", got, ok)
	}
	if got, _ := q.latest(2, []ServerID{"a", "b"}, 1); !got.Equal(now) {
		t.Fatalf("one of two: got %v, want the newer send time", got)
	}
	q.reset(3)
	if _, ok := q.latest(3, []ServerID{"a", "b"}, 1); ok {
		t.Fatal("a reset kept the answers of the previous term")
	}
}

// TestQuorumContactLatestIsTheNeedthNewest: latest returns the need-th newest
// send time of the voters asked about, whatever order they were recorded in,
// and nothing when fewer than need have one or the term is another.
func TestQuorumContactLatestIsTheNeedthNewest(t *testing.T) {
	base := time.Unix(1000, 0)
	var q quorumContact
	q.reset(7)
	ids := []ServerID{"a", "b", "c", "d", "e"}
	for i, off := range []int{3, 9, 1, 7, 5} { // newest first: b d e a c
		q.accepted(7, ids[i], base.Add(time.Duration(off)*time.Second))
	}
	want := []int{9, 7, 5, 3, 1}
	for need := 1; need <= 5; need++ {
		got, ok := q.latest(7, ids, need)
		if !ok || !got.Equal(base.Add(time.Duration(want[need-1])*time.Second)) {
			t.Fatalf("need %d: got %v %v, want %ds after base", need, got, ok, want[need-1])
		}
	}
	if _, ok := q.latest(7, ids, 6); ok {
		t.Fatal("six needed of five voters: want none")
	}
	if got, ok := q.latest(7, []ServerID{"c", "e"}, 2); !ok || !got.Equal(base.Add(time.Second)) {
		t.Fatalf("of c and e, the second newest: got %v %v", got, ok)
	}
	if _, ok := q.latest(8, ids, 1); ok {
		t.Fatal("another term: want none")
	}
}
