//go:build chaos

package main

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft-wal/types"
)

// slowFsync makes every WAL fsync of a chaos build wait first for the
// duration written in a control file (--unsafe-fsync-delay-file, relative to
// the data dir) while that file exists: the chaos suite's slow-disk nemesis
// writes and removes it.
func slowFsync(dataDir, name string) func(types.VFS) types.VFS {
	if name == "" {
		return nil
	}
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(dataDir, name)
	}
	return func(v types.VFS) types.VFS { return slowVFS{VFS: v, control: path} }
}

type slowVFS struct {
	types.VFS
	control string
}

type slowFile struct {
	types.WritableFile
	control string
}

// Sync waits for the control file's duration, then syncs.
func (f slowFile) Sync() error {
	if b, err := os.ReadFile(f.control); err == nil {
		if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil && d > 0 {
			time.Sleep(d) // the slow disk itself
		}
	}
	return f.WritableFile.Sync()
}

func (v slowVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return slowFile{WritableFile: f, control: v.control}, nil
}

func (v slowVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return slowFile{WritableFile: f, control: v.control}, nil
}
