package raft

import (
	"sync"
	"time"
)

// Local patch (see PATCHES.md): the leader remembers, for each follower, when
// it sent the latest heartbeat that follower accepted in the leader's term,
// so an application can tell how recently a quorum still followed it.
//
// A follower that accepts a heartbeat of term T was still in term T when it
// received it, after it was sent; a follower only votes in a later term
// after that. So every leader of a later term was elected after the send
// time of any heartbeat a quorum accepted (the quorums intersect). A send
// time, not the time the answer came back: an answer may spend long on the
// way back, and the follower may have voted for someone else meanwhile.

// quorumContact holds the send times of the latest accepted heartbeats of
// one leadership term.
type quorumContact struct {
	mu   sync.Mutex
	term uint64
	sent map[ServerID]time.Time
}

// reset starts a new leadership term with no accepted heartbeats.
func (q *quorumContact) reset(term uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.term = term
	q.sent = make(map[ServerID]time.Time)
}

// accepted records that a heartbeat of term, sent to id at sent, succeeded.
// Answers to heartbeats of another term (a replicator of a lost leadership
// still running) are ignored.
func (q *quorumContact) accepted(term uint64, id ServerID, sent time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.term == term && sent.After(q.sent[id]) {
		q.sent[id] = sent
	}
}

// latest returns the latest send time that need of the voters other than
// self accepted: the need-th latest of their times.
func (q *quorumContact) latest(term uint64, voters []ServerID, need int) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.term != term {
		return time.Time{}, false
	}
	// A cluster has a handful of voters: the times fit on the stack, and an
	// insertion sort, newest first, makes no garbage (QuorumContact is
	// asked on every renewal and verify).
	var buf [8]time.Time
	times := buf[:0]
	for _, id := range voters {
		if t, ok := q.sent[id]; ok {
			times = append(times, t)
		}
	}
	if len(times) < need {
		return time.Time{}, false
	}
	for i := 1; i < len(times); i++ {
		for j := i; j > 0 && times[j].After(times[j-1]); j-- {
			times[j], times[j-1] = times[j-1], times[j]
		}
	}
	return times[need-1], true
}

// contactNow reads the clock heartbeat send times are taken from.
func (r *Raft) contactNow() time.Time {
	if clock := r.config().ContactClock; clock != nil {
		return clock()
	}
	return time.Now()
}

// QuorumContact returns the send time of the latest heartbeat that a quorum
// of the latest configuration's voters accepted (this leader counting as
// one, at the present moment), read on Config.ContactClock. No leader of a
// later term can have been elected before that time. ok is false when this
// server is not the leader or no quorum accepted a heartbeat of its term
// yet. Safe to call from any goroutine.
func (r *Raft) QuorumContact() (sent time.Time, ok bool) {
	term := r.getCurrentTerm()
	if r.getState() != Leader {
		return time.Time{}, false
	}
	var buf [8]ServerID
	others := buf[:0]
	voters, self := 0, false
	for _, s := range r.getLatestConfiguration().Servers {
		if s.Suffrage != Voter {
			continue
		}
		voters++
		if s.ID == r.localID {
			self = true
		} else {
			others = append(others, s.ID)
		}
	}
	need := voters/2 + 1
	if self {
		need--
	}
	if need == 0 {
		sent, ok = r.contactNow(), true
	} else {
		sent, ok = r.contact.latest(term, others, need)
	}
	// Still the leader of the same term: it has voted for nobody since.
	if !ok || r.getCurrentTerm() != term || r.getState() != Leader {
		return time.Time{}, false
	}
	return sent, true
}
