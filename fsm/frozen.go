package fsm

import "io"

// Frozen is the state at one moment, held for as long as it takes to write
// it out (a backup): the key table's pages are shared, as a raft snapshot
// shares them, instead of copied into an Image. Holding one costs the
// sorted references to its keys (16 bytes a key, once written) and the
// pages the table writes to meanwhile, which it copies; an Image costs the
// whole state again, and building one holds the apply loop back for as
// long. A Frozen is for one goroutine at a time.
type Frozen struct{ s *snapshot }

// Freeze returns the state as it is now. The caller must Release it.
func (f *FSM) Freeze() *Frozen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &Frozen{f.snapshotLocked()}
}

// Head returns the state without its keys: every field of an Image but
// Keys. The caller must not change it.
func (z *Frozen) Head() *Image { return z.s.head }

// Len returns the number of keys.
func (z *Frozen) Len() int { return z.s.view.n }

// MaxEpoch returns the highest epoch of any key's last grant: what the
// Image of the same state would return.
func (z *Frozen) MaxEpoch() uint64 {
	var m uint64
	for i := range z.s.view.n {
		m = max(m, z.s.view.at(uint32(i)).e.token.Epoch())
	}
	return m
}

// Encode writes the state in the snapshot layout: the bytes the Image of
// the same state writes with Encode, every time it is called.
func (z *Frozen) Encode(w io.Writer) error { return z.s.encode(w) }

// Release ends the hold on the key table's pages; the Frozen must not be
// written after it.
func (z *Frozen) Release() { z.s.Release() }
