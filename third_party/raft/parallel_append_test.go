// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"errors"
	"sync"
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

// The leader must send a new entry to its followers while it is still
// writing that entry itself, not after: a commit then costs the slower of the
// two, not their sum. Upstream, the followers see nothing until the leader's
// write returns, and this test times out.
func TestRaft_LeaderStoresInParallelWithReplication(t *testing.T) {
	hold := &storeHold{target: -1, entered: make(chan struct{}), release: make(chan struct{})}
	var stores []*heldLogStore
	c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: inmemConfig(t),
		WrapLogStore: func(s LogStore) LogStore {
			h := &heldLogStore{LogStore: s, id: len(stores), hold: hold}
			stores = append(stores, h)
			return h
		}})
	defer c.Close()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hold.release) }) }
	defer release()

	leader := c.Leader()
	if err := leader.Apply([]byte("warm-up"), 0).Error(); err != nil {
		t.Fatal(err)
	}
	lead := -1
	for i, r := range c.rafts {
		if r == leader {
			lead = i
		}
	}
	hold.mu.Lock()
	hold.target = lead
	hold.mu.Unlock()

	f := leader.Apply([]byte("parallel"), 0)
	select {
	case <-hold.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader never wrote the entry")
	}
	waitFor(t, func() bool {
		for i, s := range stores {
			var l Log
			if i != lead && s.GetLog(hold.index, &l) != nil {
				return false
			}
		}
		return true
	}, "both followers to store the entry while the leader's write is held")

	release()
	if err := f.Error(); err != nil {
		t.Fatalf("apply: %v", err)
	}
	var l Log
	if err := stores[lead].GetLog(hold.index, &l); err != nil || string(l.Data) != "parallel" {
		t.Fatalf("leader's entry at %d: %+v %v", hold.index, l, err)
	}
}

// When the leader's own write fails after its followers stored the entry, the
// leader steps down with its last index put back, and the cluster converges
// on the followers' log: the entry commits under the next leader, and the old
// leader, now a follower, gets it from there. Were the last index left at the
// entry it never wrote, the old leader would accept later entries over a hole.
func TestRaft_LeaderWriteFailsAfterReplication(t *testing.T) {
	hold := &storeHold{target: -1, fail: errors.New("disk failed"), entered: make(chan struct{}), release: make(chan struct{})}
	var stores []*heldLogStore
	c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: inmemConfig(t),
		WrapLogStore: func(s LogStore) LogStore {
			h := &heldLogStore{LogStore: s, id: len(stores), hold: hold}
			stores = append(stores, h)
			return h
		}})
	defer c.Close()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hold.release) }) }
	defer release()

	old := c.Leader()
	if err := old.Apply([]byte("warm-up"), 0).Error(); err != nil {
		t.Fatal(err)
	}
	lead := -1
	for i, r := range c.rafts {
		if r == old {
			lead = i
		}
	}
	hold.mu.Lock()
	hold.target = lead
	hold.mu.Unlock()

	f := old.Apply([]byte("replicated"), 0)
	select {
	case <-hold.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader never wrote the entry")
	}
	waitFor(t, func() bool {
		for i, s := range stores {
			var l Log
			if i != lead && s.GetLog(hold.index, &l) != nil {
				return false
			}
		}
		return true
	}, "both followers to store the entry while the leader's write is held")
	release()
	if err := f.Error(); err == nil {
		t.Fatal("apply succeeded although the leader's write failed")
	}

	// Later entries, from whichever leader, reach every member.
	waitFor(t, func() bool {
		l := c.Leader()
		return l.Apply([]byte("after"), time.Second).Error() == nil
	}, "a leader to commit after the failure")
	last := c.Leader().LastIndex()
	waitFor(t, func() bool { return old.LastIndex() >= last && old.AppliedIndex() >= last }, "the old leader to catch up")
	for i, s := range stores {
		for idx := hold.index; idx <= last; idx++ {
			var l Log
			if err := s.GetLog(idx, &l); err != nil {
				t.Fatalf("server %d lacks entry %d (old leader: %v): %v", i, idx, i == lead, err)
			}
		}
		var l Log
		if err := s.GetLog(hold.index, &l); err != nil || string(l.Data) != "replicated" {
			t.Fatalf("server %d, entry %d: %q %v", i, hold.index, l.Data, err)
		}
	}
	c.EnsureSame(t)
}
