package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

// Log stores. The WAL (raft-wal) is what a new data dir gets: it appends with
// one write and one fsync where bolt's transaction does two fsyncs, which
// shortens every commit. Bolt (raft-boltdb) stays for the data dirs that hold
// it and for NoSync, which the WAL does not offer. StoreAuto opens whichever
// kind a data dir already holds (StoreKind), and picks for a new one.
const (
	StoreAuto = ""
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
	return openStoreWith(dir, kind, noSync, log, walOptions{})
}

// walOptions are the WAL's settings for tests: a file system wrapper (fault
// injection) and a segment size (0: raft-wal's default).
type walOptions struct {
	wrap        func(types.VFS) types.VFS
	segmentSize int
}

// openStoreWith is openStore with the WAL's test settings.
func openStoreWith(dir, kind string, noSync bool, log hclog.Logger, wo walOptions) (logStore, func(), error) {
	hasBolt := exists(filepath.Join(dir, boltFile))
	hasWAL := exists(filepath.Join(dir, walDir))
	if kind == StoreAuto {
		kind = StoreKind(dir)
	}
	if kind == "" {
		kind = StoreWAL
		if noSync {
			kind = StoreBolt
		}
	}
	switch kind {
	case StoreBolt:
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
		w, err := openWALWith(filepath.Join(dir, walDir), log, wo)
		if err != nil {
			return nil, nil, err
		}
		return w, func() {}, nil
	}
	return nil, nil, fmt.Errorf("%w: unknown raft store %q (want %s or %s)", ErrBadRequest, kind, StoreBolt, StoreWAL)
}

// StoreKind names the kind of log store a data dir holds, or "" for none.
func StoreKind(dir string) string {
	switch {
	case exists(filepath.Join(dir, walDir)):
		return StoreWAL
	case exists(filepath.Join(dir, boltFile)):
		return StoreBolt
	}
	return ""
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

// ErrStoreInUse: another process has the data dir's log store open.
var ErrStoreInUse = errors.New("raft log store is in use by another process")

func openWAL(dir string, log hclog.Logger) (*walStore, error) {
	return openWALWith(dir, log, walOptions{})
}

func openWALWith(dir string, log hclog.Logger, wo walOptions) (*walStore, error) {
	if inUse(filepath.Join(dir, metadb.FileName)) {
		return nil, fmt.Errorf("open raft wal: %w: %s", ErrStoreInUse, dir)
	}
	meta := &metadb.BoltMetaDB{}
	var vfs types.VFS = readAheadFS{fs.New()}
	if wo.wrap != nil {
		vfs = wo.wrap(vfs)
	}
	// A segment size of 0 is raft-wal's default.
	w, err := wal.Open(dir, wal.WithLogger(log.Named("wal")), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(segment.NewFiler(dir, vfs)), wal.WithSegmentSize(wo.segmentSize))
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
	if StoreKind(dir) == StoreWAL {
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

// errStoreClosed answers log-store calls that arrive after the node closed.
var errStoreClosed = errors.New("raft store closed")

// gatedStore keeps Raft from touching a closed store. Raft's transport answers
// heartbeats on its own goroutines, which Shutdown does not wait for, and raft
// panics when it cannot persist a new term; a heartbeat that races Close would
// crash the process. Calls hold the gate while they run, so Close waits for
// them, and calls after Close fail (reads, log writes) or never return (term
// and vote writes: raft cannot take an error there, and acknowledging an
// unpersisted term would be a lie). Only the goroutine of a stopped node parks.
type gatedStore struct {
	mu     sync.RWMutex
	closed bool
	s      logStore
	// onSyncFailure, when set, hears of a log write whose fsync failed: the
	// node then stops (failclosed.go).
	onSyncFailure func(error)
	// onNoSpace, when set, hears of every failed log write, to notice
	// ENOSPC (diskspace.go).
	onNoSpace func(error)
	// writeStart is when the log write in progress began (unix nanos), 0
	// when none is (stall.go).
	writeStart atomic.Int64
	// ackUnwritten reports a failed log write as a success
	// (Config.AckUnwrittenLog): a positive control, never in production.
	ackUnwritten bool
}

// timeWrite marks a log write in progress until the returned func is called.
func (g *gatedStore) timeWrite() func() {
	g.writeStart.Store(time.Now().UnixNano())
	return func() { g.writeStart.Store(0) }
}

// writeStalled returns how long the log write in progress has taken; 0 when
// none is in progress.
func (g *gatedStore) writeStalled() time.Duration {
	start := g.writeStart.Load()
	if start == 0 {
		return 0
	}
	return time.Since(time.Unix(0, start))
}

// wrote passes a log write's error on, telling onSyncFailure of a failed
// fsync.
func (g *gatedStore) wrote(err error) error {
	if err != nil && g.onNoSpace != nil {
		g.onNoSpace(err)
	}
	if g.ackUnwritten {
		return nil // the lie of the positive control
	}
	if g.onSyncFailure != nil && isSyncFailure(err) {
		g.onSyncFailure(err)
	}
	return err
}

func gate(s logStore) *gatedStore { return &gatedStore{s: s} }

// enter takes the gate; false once the store is closed.
func (g *gatedStore) enter() bool {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return false
	}
	return true
}

func (g *gatedStore) leave() { g.mu.RUnlock() }

// Close waits for calls in progress, then closes the store.
func (g *gatedStore) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return g.s.Close()
}

// FirstIndex implements raft.LogStore.
func (g *gatedStore) FirstIndex() (uint64, error) {
	if !g.enter() {
		return 0, errStoreClosed
	}
	defer g.leave()
	return g.s.FirstIndex()
}

// LastIndex implements raft.LogStore.
func (g *gatedStore) LastIndex() (uint64, error) {
	if !g.enter() {
		return 0, errStoreClosed
	}
	defer g.leave()
	return g.s.LastIndex()
}

// GetLog implements raft.LogStore.
func (g *gatedStore) GetLog(index uint64, log *raft.Log) error {
	if !g.enter() {
		return errStoreClosed
	}
	defer g.leave()
	return g.s.GetLog(index, log)
}

// StoreLog implements raft.LogStore.
func (g *gatedStore) StoreLog(log *raft.Log) error {
	if !g.enter() {
		return errStoreClosed
	}
	defer g.leave()
	defer g.timeWrite()()
	return g.wrote(g.s.StoreLog(log))
}

// StoreLogs implements raft.LogStore.
func (g *gatedStore) StoreLogs(logs []*raft.Log) error {
	if !g.enter() {
		return errStoreClosed
	}
	defer g.leave()
	defer g.timeWrite()()
	return g.wrote(g.s.StoreLogs(logs))
}

// DeleteRange implements raft.LogStore.
func (g *gatedStore) DeleteRange(min, max uint64) error {
	if !g.enter() {
		return errStoreClosed
	}
	defer g.leave()
	return g.wrote(g.s.DeleteRange(min, max))
}

// Set implements raft.StableStore.
func (g *gatedStore) Set(key, val []byte) error {
	if !g.enter() {
		parkForever()
	}
	defer g.leave()
	return g.s.Set(key, val)
}

// Get implements raft.StableStore.
func (g *gatedStore) Get(key []byte) ([]byte, error) {
	if !g.enter() {
		return nil, errStoreClosed
	}
	defer g.leave()
	return g.s.Get(key)
}

// SetUint64 implements raft.StableStore.
func (g *gatedStore) SetUint64(key []byte, val uint64) error {
	if !g.enter() {
		parkForever()
	}
	defer g.leave()
	return g.s.SetUint64(key, val)
}

// GetUint64 implements raft.StableStore.
func (g *gatedStore) GetUint64(key []byte) (uint64, error) {
	if !g.enter() {
		return 0, errStoreClosed
	}
	defer g.leave()
	return g.s.GetUint64(key)
}

// parkForever blocks the calling goroutine of a stopped node for good.
func parkForever() { select {} }

// IsMonotonic implements raft.MonotonicLogStore for a store that is: raft must
// then reset the log, not leave a gap, when it installs a snapshot.
func (g *gatedStore) IsMonotonic() bool {
	m, ok := g.s.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
