package guard

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/fenced/fenced/fence"
)

// memoryShards spreads keys over independent maps so that goroutines working
// on different keys rarely contend for the same map lock.
const memoryShards = 64

// Memory is a Guard that keeps the highest tokens in memory. It is safe for
// concurrent use and fast, but forgets everything when the process exits, so it
// only fences resources that live no longer than the process itself (an
// in-memory cache, a connection, a child process).
type Memory struct {
	seed   maphash.Seed
	shards [memoryShards]memoryShard
}

type memoryShard struct {
	mu      sync.Mutex
	entries map[string]*memoryEntry
}

// memoryEntry is one key. Entries are never removed: forgetting a key's
// highest token would let a stale holder in again.
type memoryEntry struct {
	lock keyLock
	// highest is written only while lock is held, and read atomically so that
	// Highest need not wait for a caller's write inside AdmitFunc.
	highest atomic.Uint64
}

var _ Guard = (*Memory)(nil)

// NewMemory returns an empty in-memory guard.
func NewMemory() *Memory {
	m := &Memory{seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].entries = make(map[string]*memoryEntry)
	}
	return m
}

// entry returns the key's entry, creating it when create is set; without
// create it returns nil for an unknown key.
func (m *Memory) entry(key string, create bool) *memoryEntry {
	s := &m.shards[maphash.String(m.seed, key)%memoryShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key]
	if e == nil && create {
		e = &memoryEntry{lock: newKeyLock()}
		s.entries[key] = e
	}
	return e
}

// Admit implements Guard.
func (m *Memory) Admit(ctx context.Context, key string, tok fence.Token) error {
	return m.AdmitFunc(ctx, key, tok, nil)
}

// AdmitFunc admits tok for key like Admit and then, still holding the key's
// lock, runs write (when it is not nil). No other admission of the same key can
// run between the check and the write, so a stale holder can never write after
// a newer one through this guard.
//
// The token is recorded before write runs and stays recorded if write fails:
// a failed write may have partly happened, and rolling the highest back would
// let an older holder write over it. Keeping a higher token than was written
// only refuses stale holders sooner. write's error is returned unchanged.
func (m *Memory) AdmitFunc(ctx context.Context, key string, tok fence.Token, write func() error) error {
	if err := checkAdmit(ctx, key, tok); err != nil {
		return err
	}
	e := m.entry(key, true)
	if err := e.lock.lock(ctx); err != nil {
		return err
	}
	defer e.lock.unlock()
	if h := fence.Token(e.highest.Load()); tok < h {
		return &StaleError{Key: key, Token: tok, Highest: h}
	}
	e.highest.Store(uint64(tok))
	if write == nil {
		return nil
	}
	return write()
}

// Highest implements Guard.
func (m *Memory) Highest(ctx context.Context, key string) (fence.Token, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	e := m.entry(key, false)
	if e == nil {
		return 0, nil
	}
	return fence.Token(e.highest.Load()), nil
}
