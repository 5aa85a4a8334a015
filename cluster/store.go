package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
)

// Log stores. Bolt (raft-boltdb) is the default; the WAL (raft-wal) appends
// with one fsync instead of bolt's two, which shortens every commit.
const (
	StoreBolt = "bolt"
	StoreWAL  = "wal"
)

// logStore is Raft's log and stable store in one.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

const (
	boltFile = "raft.db"
	walDir   = "wal"
)

// ErrStoreMismatch: the data dir holds the other kind of log store. Opening
// the asked-for kind would start from an empty log and lose every grant.
var ErrStoreMismatch = errors.New("data dir holds another kind of raft log store")

// openStore opens the log store of the configured kind. It refuses a data dir
// that holds the other kind, rather than silently starting empty.
func openStore(dir, kind string, noSync bool, log hclog.Logger) (logStore, func(), error) {
	hasBolt := exists(filepath.Join(dir, boltFile))
	hasWAL := exists(filepath.Join(dir, walDir))
	switch kind {
	case "", StoreBolt:
		if hasWAL {
			return nil, nil, fmt.Errorf("%w: %s holds a %s log; run with --raft-store %s", ErrStoreMismatch, dir, StoreWAL, StoreWAL)
		}
		return openBolt(dir, noSync)
	case StoreWAL:
		if hasBolt {
			return nil, nil, fmt.Errorf("%w: %s holds a %s log; run with --raft-store %s", ErrStoreMismatch, dir, StoreBolt, StoreBolt)
		}
		if noSync {
			return nil, nil, fmt.Errorf("%w: the %s store always syncs", ErrBadRequest, StoreWAL)
		}
		if err := os.MkdirAll(filepath.Join(dir, walDir), 0o700); err != nil {
			return nil, nil, err
		}
		w, err := openWAL(filepath.Join(dir, walDir), log)
		if err != nil {
			return nil, nil, err
		}
		return w, func() {}, nil
	}
	return nil, nil, fmt.Errorf("%w: unknown raft store %q (want %s or %s)", ErrBadRequest, kind, StoreBolt, StoreWAL)
}

func openBolt(dir string, noSync bool) (logStore, func(), error) {
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:   filepath.Join(dir, boltFile),
		NoSync: noSync,
		// As etcd does: the freelist is rebuilt on open instead of being
		// written on every commit, which halves the work of a log append.
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("open raft store: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	go store.RunMetrics(ctx, 10*time.Second)
	return store, stop, nil
}

// walStore is raft-wal with a meta store that Close really closes: the WAL
// leaves its own open, and its file lock would keep the data dir from being
// opened again by the same process.
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

func openWAL(dir string, log hclog.Logger) (*walStore, error) {
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithLogger(log.Named("wal")), wal.WithMetaStore(meta))
	if err != nil {
		_ = meta.Close()
		return nil, fmt.Errorf("open raft wal: %w", err)
	}
	return &walStore{WAL: w, meta: meta}, nil
}

// Close closes the WAL, then its meta store.
func (s *walStore) Close() error {
	return errors.Join(s.WAL.Close(), s.meta.Close())
}

// openStoreReadOnly opens a stopped node's log store for reading.
func openStoreReadOnly(dir string) (logStore, error) {
	if exists(filepath.Join(dir, walDir)) {
		return openWAL(filepath.Join(dir, walDir), hclog.NewNullLogger())
	}
	return raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(dir, boltFile),
		BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: time.Second},
	})
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
