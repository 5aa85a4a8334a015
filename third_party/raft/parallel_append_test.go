// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldLogStore holds one StoreLogs call of the chosen server until released,
// as a slow disk would.
type heldLogStore struct {
	LogStore
	id   int
	hold *storeHold
}

type storeHold struct {
	mu      sync.Mutex
	target  int    // server whose next write is held; -1 for none
	index   uint64 // last index of the held write
	fail    error  // what the held write returns, after storing nothing, if set
	entered chan struct{}
	release chan struct{}
}

func (s *heldLogStore) StoreLogs(logs []*Log) error {
	h := s.hold
	h.mu.Lock()
	held := h.target == s.id
	if held {
		h.target = -1
		h.index = logs[len(logs)-1].Index
	}
	h.mu.Unlock()
	if held {
		close(h.entered)
		<-h.release
		if h.fail != nil {
			return h.fail
		}
	}
	return s.LogStore.StoreLogs(logs)
}

func (s *heldLogStore) StoreLog(l *Log) error { return s.StoreLogs([]*Log{l}) }

// heldWrite is a 3-server cluster whose leader is inside its StoreLogs of
// one entry, held there until release, after both followers stored it.
type heldWrite struct {
	c       *cluster
	stores  []*heldLogStore
	leader  *Raft
	lead    int    // the leader's index in c.rafts and stores
	index   uint64 // the held entry's index
	f       ApplyFuture
	release func()
}

// holdLeaderWrite applies data on the leader and holds the leader's write of
// it; the held write then returns fail, if set, storing nothing.
func holdLeaderWrite(t *testing.T, data string, fail error) *heldWrite {
	t.Helper()
	hold := &storeHold{target: -1, fail: fail, entered: make(chan struct{}), release: make(chan struct{})}
	h := &heldWrite{}
	h.c = MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: inmemConfig(t),
		WrapLogStore: func(s LogStore) LogStore {
			hs := &heldLogStore{LogStore: s, id: len(h.stores), hold: hold}
			h.stores = append(h.stores, hs)
			return hs
		}})
	t.Cleanup(h.c.Close)
	var releaseOnce sync.Once
	h.release = func() { releaseOnce.Do(func() { close(hold.release) }) }
	t.Cleanup(h.release) // cleanups run last first: released before Close

	h.leader = h.c.Leader()
	if err := h.leader.Apply([]byte("warm-up"), 0).Error(); err != nil {
		t.Fatal(err)
	}
	h.lead = serverIndex(h.c, h.leader)
	hold.mu.Lock()
	hold.target = h.lead
	hold.mu.Unlock()

	h.f = h.leader.Apply([]byte(data), 0)
	receive(t, hold.entered, "the leader to write the entry")
	h.index = hold.index
	waitFor(t, func() bool {
		for i, s := range h.stores {
			var l Log
			if i != h.lead && s.GetLog(h.index, &l) != nil {
				return false
			}
		}
		return true
	}, "both followers to store the entry while the leader's write is held")
	return h
}

// serverIndex is r's index in c.rafts, or -1.
func serverIndex(c *cluster, r *Raft) int {
	for i, x := range c.rafts {
		if x == r {
			return i
		}
	}
	return -1
}

// The leader must send a new entry to its followers while it is still
// writing that entry itself, not after: a commit then costs the slower of the
// two, not their sum. Upstream, the followers see nothing until the leader's
// write returns, and this test times out.
func TestRaft_LeaderStoresInParallelWithReplication(t *testing.T) {
	h := holdLeaderWrite(t, "parallel", nil)
	h.release()
	if err := h.f.Error(); err != nil {
		t.Fatalf("apply: %v", err)
	}
	var l Log
	if err := h.stores[h.lead].GetLog(h.index, &l); err != nil || string(l.Data) != "parallel" {
		t.Fatalf("leader's entry at %d: %+v %v", h.index, l, err)
	}
}

// When the leader's own write fails after its followers stored the entry, the
// leader steps down with its last index put back, and the cluster converges
// on the followers' log: the entry commits under the next leader, and the old
// leader, now a follower, gets it from there. Were the last index left at the
// entry it never wrote, the old leader would accept later entries over a hole.
func TestRaft_LeaderWriteFailsAfterReplication(t *testing.T) {
	h := holdLeaderWrite(t, "replicated", errors.New("disk failed"))
	h.release()
	if err := h.f.Error(); err == nil {
		t.Fatal("apply succeeded although the leader's write failed")
	}

	// Later entries, from whichever leader, reach every member.
	c, old := h.c, h.leader
	waitFor(t, func() bool {
		l := c.Leader()
		return l.Apply([]byte("after"), time.Second).Error() == nil
	}, "a leader to commit after the failure")
	last := c.Leader().LastIndex()
	waitFor(t, func() bool { return old.LastIndex() >= last && old.AppliedIndex() >= last }, "the old leader to catch up")
	for i, s := range h.stores {
		for idx := h.index; idx <= last; idx++ {
			var l Log
			if err := s.GetLog(idx, &l); err != nil {
				t.Fatalf("server %d lacks entry %d (old leader: %v): %v", i, idx, i == h.lead, err)
			}
		}
		var l Log
		if err := s.GetLog(h.index, &l); err != nil || string(l.Data) != "replicated" {
			t.Fatalf("server %d, entry %d: %q %v", i, h.index, l.Data, err)
		}
	}
	c.EnsureSame(t)
}

// sendRecorder records the last index the leader handed its transport for
// each follower, through AppendEntries and through pipelines alike.
type sendRecorder struct {
	LoopbackTransport
	mu   sync.Mutex
	sent map[ServerAddress]uint64
}

func (s *sendRecorder) record(target ServerAddress, args *AppendEntriesRequest) {
	if n := len(args.Entries); n > 0 {
		s.mu.Lock()
		s.sent[target] = max(s.sent[target], args.Entries[n-1].Index)
		s.mu.Unlock()
	}
}

// sentTo is how many followers have been sent the entry at index.
func (s *sendRecorder) sentTo(index uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, last := range s.sent {
		if last >= index {
			n++
		}
	}
	return n
}

func (s *sendRecorder) AppendEntries(id ServerID, target ServerAddress, args *AppendEntriesRequest, resp *AppendEntriesResponse) error {
	s.record(target, args)
	return s.LoopbackTransport.AppendEntries(id, target, args, resp)
}

func (s *sendRecorder) AppendEntriesPipeline(id ServerID, target ServerAddress) (AppendPipeline, error) {
	p, err := s.LoopbackTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return recordingPipeline{AppendPipeline: p, s: s, target: target}, nil
}

type recordingPipeline struct {
	AppendPipeline
	s      *sendRecorder
	target ServerAddress
}

func (p recordingPipeline) AppendEntries(args *AppendEntriesRequest, resp *AppendEntriesResponse) (AppendFuture, error) {
	p.s.record(p.target, args)
	return p.AppendPipeline.AppendEntries(args, resp)
}

// sendCountingStore notes, when the leader starts writing a batch, how many
// followers had been sent the batch's last entry.
type sendCountingStore struct {
	LogStore
	sends *sendRecorder
	armed atomic.Bool
	mu    sync.Mutex
	seen  []int
}

func (s *sendCountingStore) StoreLogs(logs []*Log) error {
	if s.armed.Load() {
		n := s.sends.sentTo(logs[len(logs)-1].Index)
		s.mu.Lock()
		s.seen = append(s.seen, n)
		s.mu.Unlock()
	}
	return s.LogStore.StoreLogs(logs)
}

func (s *sendCountingStore) StoreLog(l *Log) error { return s.StoreLogs([]*Log{l}) }

// The replicators a new batch wakes must send it before the leader's own
// write begins, not after it: the write is a system call that keeps the
// goroutine's processor, so replicators woken onto that processor's run
// queue would wait out the leader's fsync, and the followers' writes would
// follow the leader's instead of running beside it. With one processor the
// order is exact: upstream, and without the yield, the leader goes straight
// on into its write and no follower has been sent the batch (none of the
// batches below). The runtime resumes a goroutine that yielded before the
// ones it yielded to in one schedule out of 61 (its fairness check of the
// global run queue), so most batches, not all, must have been sent first.
func TestRaft_LeaderLetsReplicatorsSendBeforeItsWrite(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var (
		sends  []*sendRecorder
		stores []*sendCountingStore
	)
	c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: inmemConfig(t),
		WrapTransport: func(tr LoopbackTransport) LoopbackTransport {
			s := &sendRecorder{LoopbackTransport: tr, sent: map[ServerAddress]uint64{}}
			sends = append(sends, s)
			return s
		},
		WrapLogStore: func(s LogStore) LogStore {
			w := &sendCountingStore{LogStore: s}
			stores = append(stores, w)
			return w
		}})
	defer c.Close()
	leader := c.Leader()
	lead := serverIndex(c, leader)
	st := stores[lead]
	st.sends = sends[lead]
	if err := leader.Apply([]byte("warm-up"), 0).Error(); err != nil {
		t.Fatal(err)
	}

	const batches = 40
	st.armed.Store(true)
	for i := 0; i < batches; i++ {
		if err := leader.Apply([]byte("entry"), 0).Error(); err != nil {
			t.Fatal(err)
		}
	}
	st.armed.Store(false)

	st.mu.Lock()
	defer st.mu.Unlock()
	seen := st.seen
	first := 0
	for _, n := range seen {
		if n == 2 {
			first++
		}
	}
	t.Logf("%d of %d batches sent to both followers before the leader's write", first, len(seen))
	if len(seen) < batches || first < batches/2 {
		t.Fatalf("of %d batches the leader wrote, %d had been sent to both followers before its write began (followers sent to, per batch: %v)", len(seen), first, seen)
	}
}
