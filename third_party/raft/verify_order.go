package raft

// Local patch (see PATCHES.md): a verifyFuture counts a follower's vote only
// from a heartbeat sent after the future was registered with that follower.
//
// Upstream votes for every registered future whenever any RPC to the
// follower succeeds, including one that was sent, and answered by the
// follower, before the future existed and whose answer was still on its way
// back. VerifyLeader could then confirm a leadership that a newer leader had
// already ended: the follower answered, lost contact, voted for a new leader
// that committed writes, and only then did its old answer arrive. A read the
// old leader served after such a confirmation is stale.

// takeNotify removes and returns the futures waiting on this follower; a
// heartbeat sent after this call may vote for them.
func (s *followerReplication) takeNotify() map[*verifyFuture]struct{} {
	s.notifyLock.Lock()
	defer s.notifyLock.Unlock()
	n := s.notify
	s.notify = make(map[*verifyFuture]struct{})
	return n
}

// returnNotify puts futures back to wait for the next heartbeat, after the
// one sent for them failed. Futures decided meanwhile (by other followers'
// votes) stay out: the main goroutine's cleanNotify could not reach them
// while they were taken, and an unreachable follower would keep them.
//
// It never holds notifyLock while it waits for a future's voteLock: vote
// holds voteLock while it sends on the verify channel, which only the main
// goroutine reads, and the main goroutine takes notifyLock between reads
// (verifyLeader, cleanNotify). So the undecided futures are picked first,
// and those decided after that, whose cleanNotify may have run before they
// were back, are taken out again.
func (s *followerReplication) returnNotify(n map[*verifyFuture]struct{}) {
	undecided := pickUndecided(n)
	if len(undecided) == 0 {
		return
	}
	s.notifyLock.Lock()
	for _, v := range undecided {
		s.notify[v] = struct{}{}
	}
	s.notifyLock.Unlock()
	// A future decided from here on is cleaned by the main goroutine after
	// it is back; one decided before is removed here.
	if decided := pickDecided(undecided); len(decided) > 0 {
		s.notifyLock.Lock()
		for _, v := range decided {
			delete(s.notify, v)
		}
		s.notifyLock.Unlock()
	}
}

// pickUndecided returns the futures of n still waiting for votes.
func pickUndecided(n map[*verifyFuture]struct{}) []*verifyFuture {
	var out []*verifyFuture
	for v := range n {
		if !v.decided() {
			out = append(out, v)
		}
	}
	return out
}

// pickDecided returns the futures of vs that have been decided.
func pickDecided(vs []*verifyFuture) []*verifyFuture {
	var out []*verifyFuture
	for _, v := range vs {
		if v.decided() {
			out = append(out, v)
		}
	}
	return out
}

// decided reports whether the future has had the votes that decide it.
func (v *verifyFuture) decided() bool {
	v.voteLock.Lock()
	defer v.voteLock.Unlock()
	return v.notifyCh == nil
}

// voteFor submits this follower's vote to the futures in n.
func voteFor(n map[*verifyFuture]struct{}, leader bool) {
	for v := range n {
		v.vote(leader)
	}
}
