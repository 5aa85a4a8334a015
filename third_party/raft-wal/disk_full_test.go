// Copyright (c) HashiCorp, Inc
// SPDX-License-Identifier: MPL-2.0

package wal

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
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

// fault is an error a test switches on and off while the WAL runs.
type fault struct {
	mu  sync.Mutex
	err error
}

func (f *fault) set(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *fault) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// faultVFS is the real file system whose Create fails with the injected
// error, as creating (preallocating) a segment does on a full disk.
// With leave set, the failed Create leaves an empty file behind, as a crash
// between creating and preallocating the file would.
type faultVFS struct {
	*fs.FS
	create *fault
	leave  bool
}

func (v faultVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	if err := v.create.get(); err != nil {
		if v.leave {
			if werr := os.WriteFile(filepath.Join(dir, name), nil, 0o644); werr != nil && !os.IsExist(werr) {
				return nil, werr
			}
		}
		return nil, err
	}
	return v.FS.Create(dir, name, size)
}

// faultMeta is the real BoltDB meta store whose CommitState fails with the
// injected error, as a BoltDB commit that must grow its file does on a full
// disk.
type faultMeta struct {
	*metadb.BoltMetaDB
	commit *fault
}

func (m faultMeta) CommitState(ps types.PersistentState) error {
	if err := m.commit.get(); err != nil {
		return err
	}
	return m.BoltMetaDB.CommitState(ps)
}

func openFaultyWAL(t *testing.T, dir string, create, commit *fault, leave bool) *WAL {
	t.Helper()
	w, err := Open(dir,
		WithSegmentSize(4096),
		WithLogger(hclog.NewNullLogger()),
		WithSegmentFiler(segment.NewFiler(dir, faultVFS{FS: fs.New(), create: create, leave: leave})),
		WithMetaStore(faultMeta{BoltMetaDB: &metadb.BoltMetaDB{}, commit: commit}),
	)
	require.NoError(t, err)
	return w
}

func segFault(create, _ *fault) *fault  { return create }
func metaFault(_, commit *fault) *fault { return commit }

func bigLog(idx uint64) *raft.Log {
	return &raft.Log{Index: idx, Term: 1, Data: bytes.Repeat([]byte{byte(idx)}, 500)}
}

// TestRotationWithoutSpaceRecovers is the patch's regression test: a segment
// rotation that fails for lack of space (the next segment cannot be created,
// or the meta store cannot commit the sealed segment) must leave the WAL
// appendable once space returns, both in place and after a restart. Without
// the patch every later append fails with "segment is sealed", forever.
func TestRotationWithoutSpaceRecovers(t *testing.T) {
	cases := []struct {
		name    string
		failing func(create, commit *fault) *fault
		restart bool
		leave   bool // the failed create leaves an empty file behind
	}{
		{"segment create fails, space returns", segFault, false, false},
		{"segment create fails, space returns, restart", segFault, true, false},
		{"segment create fails leaving a file, space returns", segFault, false, true},
		{"segment create fails leaving a file, space returns, restart", segFault, true, true},
		{"meta commit fails, space returns", metaFault, false, false},
		{"meta commit fails, space returns, restart", metaFault, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			create, commit := &fault{}, &fault{}
			w := openFaultyWAL(t, dir, create, commit, tc.leave)
			defer func() { w.Close() }()

			// The disk fills: the first rotation fails.
			tc.failing(create, commit).set(syscall.ENOSPC)
			next := uint64(1)
			var appendErr error
			for ; next < 100; next++ {
				if appendErr = w.StoreLogs([]*raft.Log{bigLog(next)}); appendErr != nil {
					break
				}
			}
			require.Error(t, appendErr, "no rotation was attempted")

			// While the disk stays full, appends keep failing, and say why.
			for i := 0; i < 3; i++ {
				err := w.StoreLogs([]*raft.Log{bigLog(next)})
				require.Error(t, err)
				require.ErrorIs(t, err, syscall.ENOSPC)
			}

			// Space returns.
			tc.failing(create, commit).set(nil)
			if tc.restart {
				require.NoError(t, w.Close())
				w = openFaultyWAL(t, dir, create, commit, tc.leave)
			}

			// Appends go on across more rotations, and every entry reads back.
			last := next + 40
			for ; next <= last; next++ {
				require.NoError(t, w.StoreLogs([]*raft.Log{bigLog(next)}), "append %d", next)
			}
			require.NoError(t, w.Close())
			w = openFaultyWAL(t, dir, create, commit, tc.leave)
			first, err := w.FirstIndex()
			require.NoError(t, err)
			require.Equal(t, uint64(1), first)
			lastIdx, err := w.LastIndex()
			require.NoError(t, err)
			require.Equal(t, last, lastIdx)
			for i := uint64(1); i <= last; i++ {
				var l raft.Log
				require.NoError(t, w.GetLog(i, &l), "read %d", i)
				require.Equal(t, bigLog(i).Data, l.Data, "entry %d", i)
			}
		})
	}
}
