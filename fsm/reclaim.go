package fsm

import (
	"encoding/binary"

	"github.com/fenced/fenced/fence"
)

// typeReclaim is the command type of Reclaim.
const typeReclaim byte = 9

// MaxReclaimBatch is the most keys one Reclaim entry names. The leader
// proposes a larger backlog as several entries, so one entry never holds the
// apply loop (or a follower's append) for long.
const MaxReclaimBatch = 1024

// Reclaim forgets keys whose last grant has ended. A key is forgotten only
// when, at the entry's apply:
//
//   - it still has the token the entry names (a key granted again since the
//     leader chose it is skipped),
//   - that grant is not held (released or expired), and
//   - that token's epoch is lower than the entry's epoch (the entry's term
//     plus the floor, after the raise below).
//
// Every later grant of the key is made by a later entry, whose epoch is at
// least this entry's (terms and the floor never go down), so its token is
// higher than every token the key ever had: forgetting the key forgets no
// high-water mark that still matters. The last grant's request id moves to
// the request-id history, so a late retry of it is still refused.
//
// Floor, when it is exactly one above the current floor, raises the floor
// first: keys that ended in the current epoch become reclaimable, and the
// epoch space spent is one per entry at most. Any other value leaves the
// floor alone (a stale proposal, decided on an older floor, spends nothing).
//
// Whether a key ended long enough ago, and whether anyone waits for it or a
// lock-delay keeps it, is the leader's decision by its own clock and state;
// the checks above are what token safety rests on, and they read only the
// replicated state.
type Reclaim struct {
	Floor uint64
	Keys  []ReclaimKey

	// legacy marks a reclaim of a version-1 entry: its clock tick follows
	// the append time (logClock).
	legacy bool
}

// ReclaimKey names a key and the token of the grant the leader saw end.
type ReclaimKey struct {
	Key   string
	Token fence.Token
}

// ReclaimResult is what a Reclaim entry did, in Result.Reclaim.
type ReclaimResult struct {
	// Reclaimed is the number of keys forgotten, Skipped the number the
	// rule kept.
	Reclaimed, Skipped int
	// Raised is true when the entry raised the epoch floor.
	Raised bool
	// Forgotten holds the last grant of each key forgotten, in the
	// entry's order: the watchers' deleted events.
	Forgotten []KeyState
}

func (c Reclaim) encode(b []byte) []byte {
	version := version2
	if c.legacy {
		version = version1
	}
	b = append(b, typeReclaim, version)
	b = binary.AppendUvarint(b, c.Floor)
	b = binary.AppendUvarint(b, uint64(len(c.Keys)))
	for _, k := range c.Keys {
		b = appendString(b, k.Key)
		b = binary.AppendUvarint(b, uint64(k.Token))
	}
	return b
}

func (d *decoder) reclaim(version byte) Reclaim {
	c := Reclaim{Floor: d.uvarint(), legacy: version == version1}
	// A key record is at least two bytes (an empty string and a token).
	n := d.count(2)
	if n > 0 {
		c.Keys = make([]ReclaimKey, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		c.Keys = append(c.Keys, ReclaimKey{Key: d.str(), Token: fence.Token(d.uvarint())})
	}
	return c
}

// reclaim applies a Reclaim entry.
func (f *FSM) reclaim(c Reclaim, pos logPos) *Result {
	f.tick(pos, !c.legacy)
	var rr ReclaimResult
	if c.Floor == f.floor+1 && c.Floor <= fence.MaxEpoch && pos.term <= fence.MaxEpoch-c.Floor {
		f.floor, rr.Raised = c.Floor, true
	}
	epoch, ok := uint64(0), f.floor <= fence.MaxEpoch && pos.term <= fence.MaxEpoch-f.floor
	if ok {
		epoch = pos.term + f.floor
	}
	for _, rk := range c.Keys {
		e, exists := f.keys.get(rk.Key)
		if !ok || !exists || e.token != rk.Token || e.state == Held || f.shapeOf(rk.Key) != nil || f.slotDelays(rk.Key) != nil || (!f.reclaimIgnoresEpoch && e.token.Epoch() >= epoch) {
			rr.Skipped++
			continue
		}
		f.hist.retire(Retired{Key: rk.Key, RequestID: f.requestID(rk.Key, e), Token: e.token, Owner: OwnerOf(f.holderOf(rk.Key, e))}, f.policy(!c.legacy))
		rr.Forgotten = append(rr.Forgotten, f.keyState(rk.Key, e))
		f.forget(rk.Key)
		rr.Reclaimed++
	}
	return &Result{Changed: rr.Reclaimed > 0 || rr.Raised, Reclaim: &rr}
}

// Ended returns every key whose last grant has ended (released or expired)
// and that has no live permit, with that grant's token, in no particular order: what a new leader may
// reclaim once the retention passed.
func (f *FSM) Ended() []ReclaimKey {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]ReclaimKey, 0)
	for name, e := range f.keys.all() {
		if e.state != Held && f.shapeOf(name) == nil && f.slotDelays(name) == nil {
			out = append(out, ReclaimKey{Key: name, Token: e.token})
		}
	}
	return out
}

// Epoch returns the epoch an entry of term would grant in now: term plus
// the floor, and false when that leaves the epoch space.
func (f *FSM) Epoch(term uint64) (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.floor > fence.MaxEpoch || term > fence.MaxEpoch-f.floor {
		return 0, false
	}
	return term + f.floor, true
}
