package raft

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// heldHeartbeats delivers heartbeats but, while armed, holds back each
// answer until released: an answer still on its way back to the leader.
type heldHeartbeats struct {
	LoopbackTransport
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (h *heldHeartbeats) AppendEntries(id ServerID, target ServerAddress, args *AppendEntriesRequest, resp *AppendEntriesResponse) error {
	err := h.LoopbackTransport.AppendEntries(id, target, args, resp)
	if h.armed.Load() && err == nil && len(args.Entries) == 0 {
		h.held <- struct{}{}
		<-h.release
	}
	return err
}

// A VerifyLeader must be confirmed by heartbeats sent after it was asked
// for. Here both followers answered a heartbeat before it, those answers
// arrive only after it, and no later heartbeat gets through: upstream counts
// the old answers and confirms the leadership (a newer leader could have
// been elected and have committed writes meanwhile); patched, the leader
// steps down unconfirmed.
func TestRaft_VerifyLeaderIgnoresAnswersToEarlierHeartbeats(t *testing.T) {
	var wraps []*heldHeartbeats
	c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: inmemConfig(t),
		WrapTransport: func(tr LoopbackTransport) LoopbackTransport {
			w := &heldHeartbeats{LoopbackTransport: tr, held: make(chan struct{}, 2), release: make(chan struct{})}
			wraps = append(wraps, w)
			return w
		}})
	defer c.Close()
	leader := c.Leader()
	lead := serverIndex(c, leader)
	w := wraps[lead]
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(w.release) }) }
	defer release()

	w.armed.Store(true)
	for i := 0; i < 2; i++ {
		receive(t, w.held, "the leader's heartbeats to be answered")
	}
	v := leader.VerifyLeader()
	// The main goroutine registers a future as it takes it; once it has
	// answered a later request, the future is registered.
	waitFor(t, func() bool { return len(leader.verifyCh) == 0 }, "the leader to take the verify request")
	if err := leader.GetConfiguration().Error(); err != nil {
		t.Fatal(err)
	}
	for i := range c.rafts {
		if i != lead {
			c.trans[lead].Disconnect(c.trans[i].LocalAddr())
		}
	}
	w.armed.Store(false)
	release()
	if err := receive(t, errCh(v), "the verify to fail or succeed"); err == nil {
		t.Fatal("VerifyLeader was confirmed by answers to heartbeats sent before it, with the followers unreachable since")
	}
}

func errCh(f Future) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	return ch
}

// A future decided by other followers while a heartbeat to an unreachable
// one held it is not put back into that follower's waiting set, where
// nothing would ever remove it.
func TestReturnNotifyDropsDecidedFutures(t *testing.T) {
	s := &followerReplication{notify: map[*verifyFuture]struct{}{}}
	decided := &verifyFuture{quorumSize: 2, votes: 1, notifyCh: make(chan *verifyFuture, 1)}
	pending := &verifyFuture{quorumSize: 2, votes: 1, notifyCh: make(chan *verifyFuture, 1)}
	s.notify[decided] = struct{}{}
	s.notify[pending] = struct{}{}
	taken := s.takeNotify()
	decided.vote(true) // the second vote: quorum
	s.returnNotify(taken)
	if _, ok := s.notify[decided]; ok {
		t.Fatal("a decided future was put back")
	}
	if _, ok := s.notify[pending]; !ok {
		t.Fatal("a pending future was not put back")
	}
}

// Putting futures back after a failed heartbeat must not wait for a future's
// voteLock while holding the follower's notifyLock: vote holds voteLock while
// it sends on the verify channel, which only the main goroutine reads, and
// the main goroutine takes notifyLock (verifyLeader, cleanNotify) between
// reads. With the channel full, the three would wait for each other forever.
func TestReturnNotifyWithFullVerifyChannel(t *testing.T) {
	full := make(chan *verifyFuture, 1)
	full <- &verifyFuture{} // an earlier decision the main goroutine has not read yet
	s := &followerReplication{notify: map[*verifyFuture]struct{}{}}
	v := &verifyFuture{quorumSize: 2, votes: 1, notifyCh: full}
	s.notify[v] = struct{}{}
	taken := s.takeNotify()

	// Another follower's vote decides v and blocks on the full channel,
	// holding v's voteLock.
	go v.vote(true)
	waitFor(t, func() bool {
		if v.voteLock.TryLock() {
			v.voteLock.Unlock()
			return false
		}
		return true
	}, "the vote to block on the full channel")

	// The heartbeat to this follower failed: it puts v back.
	returned := make(chan struct{})
	go func() {
		s.returnNotify(taken)
		close(returned)
	}()
	waitFor(t, func() bool { return goroutineIn("(*verifyFuture).decided") }, "returnNotify to wait for the vote")

	// The main goroutine, handling a request it read before (verifyLeader
	// and cleanNotify take notifyLock), then reading the channel on.
	mainDone := make(chan struct{})
	go func() {
		s.cleanNotify(&verifyFuture{})
		<-full
		s.cleanNotify(<-full)
		close(mainDone)
	}()
	receive(t, mainDone, "the main goroutine to read the channel (lock-order cycle: returnNotify holds notifyLock while waiting for voteLock)")
	receive(t, returned, "returnNotify to return")
	if _, ok := s.notify[v]; ok {
		t.Fatal("a decided future was put back")
	}
}

// goroutineIn reports whether some goroutine's stack holds function fn.
func goroutineIn(fn string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), fn)
}
