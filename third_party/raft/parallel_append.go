// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"runtime"
	"sync"
)

// This file is a local patch to hashicorp/raft v1.7.3 (see PATCHES.md): the
// leader writes new entries to its own log in parallel with replicating them,
// as section 10.2.1 of Ongaro's thesis allows, rather than before.
//
// Upstream, dispatchLogs stores a batch (an fsync) and only then wakes the
// replicators, so a commit costs the leader's fsync plus a follower's round
// trip and fsync. Here the batch is first published in memory, the
// replicators are woken, and the leader stores it while they send it. The
// leader still counts itself towards a quorum only once its write has
// returned, so an entry is committed exactly when a majority has it on disk,
// which is what Raft's safety argument needs; whose disks those are does not
// matter. Only the replicators read the published batch: everything else that
// reads the log runs on the main goroutine, which is blocked in StoreLogs
// while a batch is in flight, or (compactLogs) never reaches past the last
// applied index, which cannot lie in the batch being stored.

// unstableLogs is the batch the leader is storing: entries replicators may
// send before they are durable on the leader.
type unstableLogs struct {
	mu   sync.RWMutex
	logs []*Log // consecutive indexes; nil when no batch is in flight
}

// set publishes logs, which must have consecutive indexes; nil withdraws
// the batch once it is in the log store.
func (u *unstableLogs) set(logs []*Log) {
	u.mu.Lock()
	u.logs = logs
	u.mu.Unlock()
}

// get copies the entry at index into out if it is in the published batch.
func (u *unstableLogs) get(index uint64, out *Log) bool {
	u.mu.RLock()
	defer u.mu.RUnlock()
	if len(u.logs) == 0 {
		return false
	}
	first := u.logs[0].Index
	if index < first || index >= first+uint64(len(u.logs)) {
		return false
	}
	*out = *u.logs[index-first]
	return true
}

// getReplicatedLog reads the entry at index for a replicator: from the batch
// being stored if it is there, else from the log store.
func (r *Raft) getReplicatedLog(index uint64, out *Log) error {
	if r.unstable.get(index, out) {
		return nil
	}
	return r.logs.GetLog(index, out)
}

// yieldToReplicators lets the replicators dispatchLogs just woke send the
// batch before the leader starts its own write. Woken by this goroutine, they
// wait in its processor's run queue, and the write is a system call (an
// fsync) that keeps the processor until it returns or the runtime's monitor
// takes it back, tens to hundreds of microseconds later; the sends, and so
// the followers' writes, would then start after the leader's instead of
// beside it. Yielding runs them first, for the cost of their sends.
func yieldToReplicators() { runtime.Gosched() }
