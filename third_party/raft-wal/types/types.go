// Copyright (c) HashiCorp, Inc
// SPDX-License-Identifier: MPL-2.0

package types

import (
	"errors"

	"github.com/hashicorp/raft"
)

var (
	// ErrNotFound is our own version of raft's not found error. It's important
	// it's exactly the same because the raft lib checks for equality with it's
	// own type as a crucial part of replication processing (detecting end of logs
	// and that a snapshot is needed for a follower).
	ErrNotFound = raft.ErrLogNotFound
	ErrCorrupt  = errors.New("WAL is corrupt")
	ErrSealed   = errors.New("segment is sealed")
	ErrClosed   = errors.New("closed")

	// ErrSyncFailed is wrapped by the error of a write whose fsync failed
	// (fenced patch). The WAL refuses every later write once it has seen one.
	ErrSyncFailed = errors.New("fsync failed")
)

// LogEntry represents an entry that has already been encoded.
type LogEntry struct {
	Index uint64
	Data  []byte
}

// SyncError is the error of a write whose fsync failed (fenced patch): it
// wraps the file system's error and matches ErrSyncFailed.
type SyncError struct{ Err error }

func (e *SyncError) Error() string { return "fsync failed: " + e.Err.Error() }

// Unwrap returns the file system's error (EIO, say).
func (e *SyncError) Unwrap() error { return e.Err }

// Is reports whether target is ErrSyncFailed.
func (e *SyncError) Is(target error) bool { return target == ErrSyncFailed }
