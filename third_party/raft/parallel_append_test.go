// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
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
