// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldSnapshotFSM holds the Persist of one FSM snapshot until released, as a
// slow disk or a large state would.
type heldSnapshotFSM struct {
	*MockFSM
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

type heldSnapshot struct {
	FSMSnapshot
	f    *heldSnapshotFSM
	held bool
}

func (f *heldSnapshotFSM) Snapshot() (FSMSnapshot, error) {
	s, err := f.MockFSM.Snapshot()
	return &heldSnapshot{FSMSnapshot: s, f: f, held: f.armed.Swap(false)}, err
}

func (s *heldSnapshot) Persist(sink SnapshotSink) error {
	if s.held {
		close(s.f.entered)
		<-s.f.release
	}
	return s.FSMSnapshot.Persist(sink)
}

// A snapshot taken while the leader restores a backup must not move the last
// snapshot index back below the restore's: the restore leaves a hole in the
// log there, and a leader that no longer knows the restored snapshot as its
// last one sends it to its followers over and over (hashicorp/raft#248).
// Upstream, the index goes back and the followers never catch up.
func TestRaft_SnapshotTakenDuringRestoreKeepsRestoredIndex(t *testing.T) {
	conf := inmemConfig(t)
	conf.SnapshotThreshold = 1 << 30
	conf.SnapshotInterval = time.Hour
	var fsms []*heldSnapshotFSM
	// A monotonic log store (raft-wal is one) is emptied by the restore, so
	// the leader cannot name the entry before the one it replicates next.
	c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: conf, MonotonicLogs: true,
		MakeFSMFunc: func() FSM {
			f := &heldSnapshotFSM{MockFSM: &MockFSM{}, entered: make(chan struct{}), release: make(chan struct{})}
			fsms = append(fsms, f)
			return f
		}})
	defer c.Close()

	leader := c.Leader()
	for i := 0; i < 10; i++ {
		if err := leader.Apply([]byte(fmt.Sprintf("before-%d", i)), 0).Error(); err != nil {
			t.Fatal(err)
		}
	}
	backup := leader.Snapshot()
	if err := backup.Error(); err != nil {
		t.Fatal(err)
	}
	meta, rc, err := backup.Open()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Apply([]byte("after"), 0).Error(); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, c, leader.LastIndex())

	f := fsms[serverIndex(c, leader)]
	f.armed.Store(true)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(f.release) }) }
	defer release()
	taking := leader.Snapshot()
	receive(t, f.entered, "the snapshot to start")

	if err := leader.Restore(meta, bytes.NewReader(data), 0); err != nil {
		t.Fatalf("restore: %v", err)
	}
	restored, _ := leader.getLastSnapshot()
	release()
	if err := taking.Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if idx, _ := leader.getLastSnapshot(); idx != restored {
		t.Errorf("last snapshot index %d after the snapshot taken during the restore finished, want the restore's %d", idx, restored)
	}

	// And the followers, sent the restored snapshot, catch up with the
	// leader's next entry.
	if err := leader.Apply([]byte("after-restore"), 0).Error(); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, c, leader.LastIndex())
}

func waitApplied(t *testing.T, c *cluster, index uint64) {
	t.Helper()
	waitFor(t, func() bool {
		for _, r := range c.rafts {
			if r.AppliedIndex() < index {
				return false
			}
		}
		return true
	}, fmt.Sprintf("every server to apply index %d", index))
}
