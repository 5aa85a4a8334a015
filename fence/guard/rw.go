package guard

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/fenced/fenced/fence"
)

// RW is an in-memory guard for a key that fenced grants as a
// readers-writer lock: shared grants to readers, exclusive grants (plain
// locks) to writers. fenced gives every grant of a key, of either mode, a
// token from one increasing sequence, and makes an exclusive grant only
// when no shared grant is live and a shared one only when no exclusive one
// is; so a reader's token is below every later writer's, and a writer's
// below every later reader's. RW admits by that order, per key:
//
//   - a read with token t is admitted when t is not below the highest
//     token admitted for a write: a later exclusive grant refuses every
//     earlier reader, whose grant fenced had ended before it made that
//     one. Readers do not refuse each other.
//   - a write with token t is admitted when t is not below the highest
//     token admitted for anything: a later grant of either mode refuses
//     an earlier writer.
//
// Reads of a key run concurrently with each other (their reads may
// overlap), never with a write of the key; a write runs alone. Like
// Memory, it forgets everything when the process exits.
type RW struct {
	mu   sync.Mutex
	keys map[string]*rwEntry
}

// rwEntry is one key: lock orders reads against writes; exclusive is the
// highest token a write was admitted with, any the highest token admitted
// at all (raised by reads under the read lock, so atomically).
type rwEntry struct {
	lock      sync.RWMutex
	exclusive fence.Token
	any       atomic.Uint64
}

// NewRW returns an empty readers-writer guard.
func NewRW() *RW { return &RW{keys: make(map[string]*rwEntry)} }

func (g *RW) entry(key string) *rwEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.keys[key]
	if e == nil {
		e = &rwEntry{}
		g.keys[key] = e
	}
	return e
}

// AdmitRead admits tok, a shared grant's token, for a read of key, and
// runs read (when not nil) before any write of the key can be admitted. A
// token below the highest admitted for a write is refused with a
// *StaleError (Highest is that write's token). read's error is returned
// unchanged.
func (g *RW) AdmitRead(ctx context.Context, key string, tok fence.Token, read func() error) error {
	if err := checkAdmit(ctx, key, tok); err != nil {
		return err
	}
	e := g.entry(key)
	e.lock.RLock()
	defer e.lock.RUnlock()
	if tok < e.exclusive {
		return &StaleError{Key: key, Token: tok, Highest: e.exclusive}
	}
	for {
		cur := e.any.Load()
		if uint64(tok) <= cur || e.any.CompareAndSwap(cur, uint64(tok)) {
			break
		}
	}
	if read == nil {
		return nil
	}
	return read()
}

// AdmitWrite admits tok, an exclusive grant's token, for a write of key,
// and runs write (when not nil) alone. A token below the highest admitted
// for anything (a read or a write) is refused with a *StaleError. The
// token stays recorded if write fails, as with Memory.AdmitFunc.
func (g *RW) AdmitWrite(ctx context.Context, key string, tok fence.Token, write func() error) error {
	if err := checkAdmit(ctx, key, tok); err != nil {
		return err
	}
	e := g.entry(key)
	e.lock.Lock()
	defer e.lock.Unlock()
	if h := fence.Token(e.any.Load()); tok < h {
		return &StaleError{Key: key, Token: tok, Highest: h}
	}
	e.exclusive = tok
	e.any.Store(uint64(tok))
	if write == nil {
		return nil
	}
	return write()
}

// Highest returns the highest token admitted for a write of key and the
// highest admitted at all; zero when none.
func (g *RW) Highest(ctx context.Context, key string) (write, any fence.Token, err error) {
	if err := checkKey(key); err != nil {
		return 0, 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	e := g.entry(key)
	e.lock.RLock()
	defer e.lock.RUnlock()
	return e.exclusive, fence.Token(e.any.Load()), nil
}
