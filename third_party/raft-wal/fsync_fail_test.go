// Copyright (c) HashiCorp, Inc
// SPDX-License-Identifier: MPL-2.0

package wal

import (
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"github.com/stretchr/testify/require"
)

// syncFaultVFS is the real file system whose files' Sync fails with the
// injected error, as fsync does on a failing device.
type syncFaultVFS struct {
	*fs.FS
	sync *fault
}

type syncFaultFile struct {
	types.WritableFile
	sync *fault
}

func (f syncFaultFile) Sync() error {
	if err := f.sync.get(); err != nil {
		return err
	}
	return f.WritableFile.Sync()
}

func (v syncFaultVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return syncFaultFile{WritableFile: f, sync: v.sync}, nil
}

func (v syncFaultVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.FS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return syncFaultFile{WritableFile: f, sync: v.sync}, nil
}

// TestSyncFailureFailsClosed is a fenced patch's regression test: once an
// fsync of the log fails, the WAL refuses every later write, even when the
// next fsync would succeed (after a failed fsync the kernel may have dropped
// the dirty pages and marked them clean, so a later fsync proves nothing:
// PostgreSQL's "fsyncgate"). Reopening recovers what is really on disk.
func TestSyncFailureFailsClosed(t *testing.T) {
	dir := t.TempDir()
	sync := &fault{}
	open := func() *WAL {
		w, err := Open(dir,
			WithSegmentSize(4096),
			WithLogger(hclog.NewNullLogger()),
			WithSegmentFiler(segment.NewFiler(dir, syncFaultVFS{FS: fs.New(), sync: sync})),
			WithMetaStore(&metadb.BoltMetaDB{}),
		)
		require.NoError(t, err)
		return w
	}
	w := open()
	defer func() { w.Close() }()

	for i := uint64(1); i <= 20; i++ {
		require.NoError(t, w.StoreLogs([]*raft.Log{bigLog(i)}))
	}

	sync.set(syscall.EIO)
	err := w.StoreLogs([]*raft.Log{bigLog(21)})
	require.ErrorIs(t, err, ErrSyncFailed)
	require.ErrorIs(t, err, syscall.EIO)

	// The device answers again: the WAL still refuses, it does not retry.
	sync.set(nil)
	for i := 0; i < 3; i++ {
		require.ErrorIs(t, w.StoreLogs([]*raft.Log{bigLog(21)}), ErrSyncFailed)
	}
	require.ErrorIs(t, w.DeleteRange(15, 20), ErrSyncFailed)
	// Reads of what was acknowledged go on.
	var l raft.Log
	require.NoError(t, w.GetLog(20, &l))
	last, err := w.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(20), last)

	// Reopened, the WAL holds what was acknowledged (and perhaps entry 21,
	// whose fsync failed: like an entry written just before a crash, it may or
	// may not be on disk) and appends again.
	require.NoError(t, w.Close())
	w = open()
	last, err = w.LastIndex()
	require.NoError(t, err)
	require.Contains(t, []uint64{20, 21}, last)
	for i := last + 1; i <= 40; i++ {
		require.NoError(t, w.StoreLogs([]*raft.Log{bigLog(i)}))
	}
	for i := uint64(1); i <= 40; i++ {
		require.NoError(t, w.GetLog(i, &l))
		require.Equal(t, bigLog(i).Data, l.Data)
	}
}
