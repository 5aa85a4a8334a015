// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

// This file is a local patch to hashicorp/raft v1.7.3 (see PATCHES.md): a
// snapshot taken by the snapshot goroutine never moves the last snapshot
// index back (hashicorp/raft#248).
//
// takeSnapshot asks the FSM for a snapshot at its applied index, writes it
// out, and then records it as the last snapshot. Upstream records it even if,
// while it was being written, the main goroutine installed a newer snapshot
// from the leader or restored a user snapshot. On a leader that restored a
// backup, the last snapshot index then falls back below the restore's index,
// which is neither in the log (the restore left a hole there) nor the last
// snapshot any more: every follower is sent the restored snapshot, installs
// it, is asked for the entry before the next one, which the leader can no
// longer name, and is sent the snapshot again, forever.

// advanceLastSnapshot records index and term as the last snapshot unless the
// one recorded is newer. It reports whether it did.
func (r *raftState) advanceLastSnapshot(index, term uint64) bool {
	r.lastLock.Lock()
	defer r.lastLock.Unlock()
	if index < r.lastSnapshotIndex {
		return false
	}
	r.lastSnapshotIndex = index
	r.lastSnapshotTerm = term
	return true
}
