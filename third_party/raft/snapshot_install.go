// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import "fmt"

// This file is a local patch to hashicorp/raft v1.7.3 (see PATCHES.md): it
// makes installSnapshot follow rule 7 of Figure 13 of the Raft paper.
//
// Without it, a follower whose log holds an entry at the snapshot's last
// index with another term keeps that entry after the install (compactLogs
// never trims past the snapshot, nor the last TrailingLogs entries). Every
// AppendEntries that follows names the snapshot's last entry as its previous
// entry, fails the term check against the stale entry, and the leader sends
// the whole snapshot again: a livelock that lasts until the leader happens to
// snapshot past the follower's stale tail (hashicorp/raft#697).

// logConflicts reports whether the log store holds an entry at index whose
// term is not term. A missing entry is no conflict: the log then either ends
// before index, or has the gap a user snapshot restore leaves, and in both
// cases compactLogs already does the right thing.
func (r *Raft) logConflicts(index, term uint64) bool {
	var entry Log
	if err := r.logs.GetLog(index, &entry); err != nil {
		return false
	}
	return entry.Term != term
}

// discardConflictingLogs deletes every entry of the log store. It is called
// after a snapshot through snapIdx was installed over a log whose entry at
// snapIdx has another term: by the log matching property none of the entries
// after it agree with the leader's log either, and the ones up to snapIdx are
// covered by the snapshot.
func (r *Raft) discardConflictingLogs(snapIdx uint64) error {
	first, err := r.logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("failed to get first log index: %w", err)
	}
	last, err := r.logs.LastIndex()
	if err != nil {
		return fmt.Errorf("failed to get last log index: %w", err)
	}
	if last == 0 || first > last {
		return nil
	}
	r.logger.Warn("discarding log that conflicts with the installed snapshot",
		"from", first, "to", last, "snapshot-index", snapIdx)
	return r.logs.DeleteRange(first, last)
}

// trimLogsAfterInstall brings the log store in line with a snapshot through
// snapIdx, snapTerm just installed: it empties a MonotonicLogStore, deletes
// a log that holds another entry at snapIdx (rule 7), and otherwise compacts
// the log as upstream does. Errors are logged and the install goes on; the
// cached last log entry moves to the snapshot only once the log is empty: a
// log that could not be deleted still ends where it did (with another entry
// at snapIdx), so the next AppendEntries fails its consistency check and the
// leader sends the snapshot again, which retries the delete.
func (r *Raft) trimLogsAfterInstall(snapIdx, snapTerm uint64) {
	if mlogs, ok := r.logs.(MonotonicLogStore); ok && mlogs.IsMonotonic() {
		if err := r.removeOldLogs(); err != nil {
			r.logger.Error("failed to reset logs", "error", err)
			return
		}
		r.resetLastLogAfterInstall(snapIdx, snapTerm)
	} else if r.logConflicts(snapIdx, snapTerm) {
		if err := r.discardConflictingLogs(snapIdx); err != nil {
			r.logger.Error("failed to discard conflicting logs", "error", err)
			return
		}
		r.resetLastLogAfterInstall(snapIdx, snapTerm)
	} else if err := r.compactLogs(snapIdx); err != nil {
		r.logger.Error("failed to compact logs", "error", err)
	}
}

// resetLastLogAfterInstall points the cached last log entry at the installed
// snapshot once the log store was emptied, as restoreUserSnapshot does: left
// at a deleted entry, it would make AppendEntries look that entry up, fail,
// and send the leader back to the snapshot.
func (r *Raft) resetLastLogAfterInstall(snapIdx, snapTerm uint64) {
	r.setLastLog(snapIdx, snapTerm)
}
