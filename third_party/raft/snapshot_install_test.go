// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A follower cut off while it led, with entries it appended but never
// committed, must catch up after the partition heals even when the new
// leader has compacted its log to a snapshot whose last index falls among
// those stale entries (hashicorp/raft#697). Without the rule-7 discard the
// follower rejects every AppendEntries after the install and the leader sends
// the snapshot again, forever.
func TestRaft_InstallSnapshotOverConflictingLog(t *testing.T) {
	for _, monotonic := range []bool{false, true} {
		t.Run(fmt.Sprintf("monotonic=%v", monotonic), func(t *testing.T) {
			conf := inmemConfig(t)
			conf.TrailingLogs = 0 // the leader's snapshot drops every entry before it
			conf.SnapshotThreshold = 1 << 30
			conf.SnapshotInterval = time.Hour
			c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: conf, MonotonicLogs: monotonic})
			defer c.Close()

			old := c.Leader()
			for i := 0; i < 10; i++ {
				if err := old.Apply([]byte(fmt.Sprintf("base-%d", i)), 0).Error(); err != nil {
					t.Fatal(err)
				}
			}
			c.WaitForReplication(10)
			base := old.LastIndex()

			// The old leader, alone, appends entries no one else sees.
			c.Partition([]ServerAddress{old.localAddr})
			for i := 0; i < 5; i++ {
				old.Apply([]byte(fmt.Sprintf("stale-%d", i)), 0)
			}
			waitFor(t, func() bool { return old.LastIndex() >= base+5 }, "stale entries appended")

			// The majority elects a new leader, which commits up to
			// base+3 and compacts its log to a snapshot there.
			var lead *Raft
			waitFor(t, func() bool {
				for _, r := range c.rafts {
					if r != old && r.State() == Leader {
						lead = r
						return true
					}
				}
				return false
			}, "a new leader")
			for lead.AppliedIndex() < base+3 {
				if err := lead.Apply([]byte("new"), 0).Error(); err != nil {
					t.Fatal(err)
				}
			}
			if err := lead.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
			snapIdx, snapTerm := lead.getLastSnapshot()
			if snapIdx <= base || snapIdx > base+5 {
				t.Fatalf("snapshot at %d, not among the stale entries %d..%d", snapIdx, base+1, base+5)
			}
			var stale Log
			if err := old.logs.GetLog(snapIdx, &stale); err != nil || stale.Term == snapTerm {
				t.Fatalf("old leader's entry at %d: %+v %v, want one of another term than %d", snapIdx, stale, err, snapTerm)
			}

			c.FullyConnect()
			if err := lead.Apply([]byte("after-heal"), 0).Error(); err != nil && err != ErrLeadershipLost && err != ErrNotLeader {
				t.Fatal(err)
			}
			waitFor(t, func() bool {
				l := c.Leader()
				return old.AppliedIndex() >= l.AppliedIndex() && old.LastIndex() == l.LastIndex()
			}, "the old leader catching up")
			c.EnsureSame(t)
		})
	}
}

// receive waits up to ten seconds for a value from ch.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitFor polls cond until it holds or ten seconds pass.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failingDelete is a log store whose DeleteRange fails.
type failingDelete struct{ *InmemStore }

func (failingDelete) DeleteRange(min, max uint64) error { return errors.New("disk full") }

// failingMonotonicDelete is a MonotonicLogStore whose DeleteRange fails.
type failingMonotonicDelete struct{ failingDelete }

func (failingMonotonicDelete) IsMonotonic() bool { return true }

// When the install could not delete the log, the log still ends where it
// ended, with its stale entries: the cached last log entry must keep saying
// so. Pointed at the snapshot, it would let the next AppendEntries match the
// snapshot's last entry and append after it, over a log that still holds
// another entry at that index.
func TestRaft_InstallSnapshotKeepsLastLogWhenDeleteFails(t *testing.T) {
	for _, monotonic := range []bool{false, true} {
		t.Run(fmt.Sprintf("monotonic=%v", monotonic), func(t *testing.T) {
			mem := NewInmemStore()
			for i := uint64(1); i <= 10; i++ {
				if err := mem.StoreLog(&Log{Index: i, Term: 1, Type: LogCommand}); err != nil {
					t.Fatal(err)
				}
			}
			var store LogStore = failingDelete{mem}
			if monotonic {
				store = failingMonotonicDelete{failingDelete{mem}}
			}
			r := &Raft{logs: store, logger: hclog.NewNullLogger()}
			r.setLastLog(10, 1)

			r.trimLogsAfterInstall(5, 2) // entry 5 has term 1: rule 7 applies

			if idx, term := r.getLastLog(); idx != 10 || term != 1 {
				t.Fatalf("last log entry cached as %d/%d after a failed delete; the log still ends at 10/1", idx, term)
			}
		})
	}
}
