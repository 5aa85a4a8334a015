package fsm

import (
	"encoding/binary"

	"github.com/fenced/fenced/fence"
)

// typeTouch is the command type of Touch.
const typeTouch byte = 11

// MaxTouchBatch is the most keys one Touch entry names; the leader
// proposes more as several entries.
const MaxTouchBatch = 1024

// Touch records that the holders of grants renewed them with this entry's
// leader: each named key that still has the named token and is held gets
// the entry's index as its Armed index, as an acquire by its holder would
// give it (its TTL, lock-delay and value are kept, and there is no watch
// event: a renewal is not one). An expiry decided before the touch names
// the older Armed index and changes nothing when applied after it. A key
// granted again since, or no longer held, is skipped.
//
// A leader answers a renewal without a log entry only for a grant armed
// since its own takeover; the first renewal of any other grant touches it
// first. So a grant's Armed index tells a later leader which leaders may
// have renewed it without the log saying so: only the one that armed it
// last (see cluster/DESIGN.md, "Re-arming after an election").
type Touch struct {
	Keys []TouchKey
}

// TouchKey names a grant a Touch renews.
type TouchKey struct {
	Key   string
	Token fence.Token
}

func (c Touch) encode(b []byte) []byte {
	b = append(b, typeTouch, version1)
	b = binary.AppendUvarint(b, uint64(len(c.Keys)))
	for _, k := range c.Keys {
		b = appendString(b, k.Key)
		b = binary.AppendUvarint(b, uint64(k.Token))
	}
	return b
}

func (d *decoder) touch() Touch {
	var c Touch
	// A key record is at least two bytes (an empty string and a token).
	n := d.count(2)
	if n > 0 {
		c.Keys = make([]TouchKey, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		c.Keys = append(c.Keys, TouchKey{Key: d.str(), Token: fence.Token(d.uvarint())})
	}
	return c
}

// touch applies a Touch entry: every grant it renews is a notice (the
// leader's lease table re-arms it for a full TTL from now, with its new
// Armed index).
func (f *FSM) touch(c Touch, pos logPos, notices []notice) (*Result, []notice) {
	touched := 0
	for _, tk := range c.Keys {
		if s := f.shapeOf(tk.Key); s != nil {
			if p, ok := f.touchPermit(s, tk, pos.index); ok {
				notices = append(notices, notice{key: p, granted: true, renewed: true, touched: true})
				touched++
			}
			continue
		}
		k, ok := f.get(tk.Key)
		if !ok || k.State != Held || k.Token != tk.Token {
			continue
		}
		k.Armed = pos.index
		k = f.put(k)
		notices = append(notices, notice{key: k, granted: true, renewed: true, touched: true})
		touched++
	}
	return &Result{Changed: touched > 0, Touched: touched}, notices
}

// Toucher is an Observer that tells a Touch's renewals from an acquire's:
// Touched is called instead of Granted for them.
type Toucher interface {
	Touched(k KeyState)
}

// TakeoverObserver is an Observer that hears of every Barrier entry
// applied, with its index and term: a new leader commits one before it
// serves, so the first of each term marks a takeover.
type TakeoverObserver interface {
	BarrierApplied(index, term uint64)
}
