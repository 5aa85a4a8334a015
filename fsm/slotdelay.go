package fsm

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/fence"
)

// A permit or a shared grant may carry a lock-delay, as a lock's grant
// does. When it expires, its slot stays taken for the delay: a semaphore
// counts it against its limit and an exclusive acquire is kept out, since
// its holder may still be at work without knowing its lease ended. The
// leader decides by its own clock when the delay ends (cluster/delays.go);
// the state machine records the delayed slot from the expiry until the
// leader's DelayEnd names its token, and keeps the slot taken until then
// (slotRefusal): unlike a lock's delay, which keeps a whole key, a slot
// must be counted where grants are made, or acquires the leader let
// through together would fill it. A new leader keeps the slot for a full
// delay again, as it keeps a lock's key.
//
// A delayed slot is not the key's last grant: the key table's entry of a
// permit never carries its lock-delay (LockDelayed lists a lock's delays
// from the key table and the slots from here, each once).

// maxSlotDelays is the most delayed slots a key keeps: a semaphore's most
// permits. Live grants and delayed slots together never exceed a shape's
// capacity (slotRefusal), so only a crafted state could reach it; the
// slot of the lowest token is then dropped.
const maxSlotDelays = MaxLimit

// slotRefusal returns the refusal a new grant of key gets from its delayed
// slots, or nil: with live grants beside them, capacity being the most
// grants of the new grant's shape (1 for an exclusive one), there must be
// a slot free of both. The state machine decides it, not only the leader:
// acquires the leader let through together, each seeing a slot free, must
// not fill the same slot twice. A slot is free once a DelayEnd names it.
func (f *FSM) slotRefusal(key string, live, capacity int) error {
	ds := f.slotDelays(key)
	if len(ds) == 0 || live+len(ds) < capacity {
		return nil
	}
	toks := make([]fence.Token, len(ds))
	for i, k := range ds {
		toks[i] = k.Token
	}
	return &SlotDelayedError{Key: key, Tokens: toks}
}

// slotDelays returns key's delayed slots (the state machine's own slice;
// the caller holds f.mu).
func (f *FSM) slotDelays(key string) []KeyState {
	if f.slots == nil {
		return nil
	}
	return f.slots[key]
}

// delaySlot records the delayed slot of permit p, which just expired.
func (f *FSM) delaySlot(p KeyState) {
	if p.LockDelay == 0 {
		return
	}
	if f.slots == nil {
		f.slots = make(map[string][]KeyState)
	}
	ds := f.slots[p.Key]
	if len(ds) >= maxSlotDelays {
		ds = slices.Delete(ds, 0, 1)
	}
	p = slotOf(p)
	// In token order, as a restore builds them: every node drops the same
	// slot at the cap, whether it replayed the log or restored a snapshot.
	i, _ := slices.BinarySearchFunc(ds, p.Token, func(k KeyState, tok fence.Token) int { return cmp.Compare(k.Token, tok) })
	f.slots[p.Key] = slices.Insert(ds, i, p)
}

// endSlotDelay applies a DelayEnd that names a delayed slot of key: the
// slot is free from now on. It reports false when no slot has the token.
func (f *FSM) endSlotDelay(c DelayEnd) (KeyState, bool) {
	ds := f.slotDelays(c.Key)
	i := slices.IndexFunc(ds, func(k KeyState) bool { return k.Token == c.Token })
	if i < 0 {
		return KeyState{}, false
	}
	k := ds[i]
	ds = slices.Delete(ds, i, i+1)
	if len(ds) == 0 {
		delete(f.slots, c.Key)
		if len(f.slots) == 0 {
			f.slots = nil
		}
	} else {
		f.slots[c.Key] = ds
	}
	k.LockDelay = 0
	return k, true
}

// slotOf is what a delayed slot keeps of expired permit p: what a
// snapshot carries of it.
func slotOf(p KeyState) KeyState {
	p.State, p.Value, p.RequestID, p.Index, p.Armed = Expired, "", "", 0, 0
	return p
}

// putPermit stores permit p as its key's last grant, without its
// lock-delay (see above), and returns p as the permit list holds it.
func (f *FSM) putPermit(p KeyState) KeyState {
	delay := p.LockDelay
	p.LockDelay = 0
	p = f.put(p)
	p.LockDelay = delay
	return p
}

// DelayPending reports whether the state still records the lock-delay
// after the expiry of grant tok of key: a lock's last grant, expired with a
// delay, or a delayed slot. A leader proposes a DelayEnd only then.
func (f *FSM) DelayPending(key string, tok fence.Token) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if k, ok := f.get(key); ok && k.Token == tok && k.State == Expired && k.LockDelay > 0 {
		return true
	}
	return slices.ContainsFunc(f.slotDelays(key), func(k KeyState) bool { return k.Token == tok })
}

// SlotDelays returns key's delayed slots in token order (copies).
func (f *FSM) SlotDelays(key string) []KeyState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.slotDelays(key))
}

// allSlotDelays copies every delayed slot, in key then token order. The
// caller holds f.mu.
func (f *FSM) allSlotDelays() []KeyState {
	if len(f.slots) == 0 {
		return nil
	}
	var out []KeyState
	for _, ds := range f.slots {
		out = append(out, ds...)
	}
	sortSlots(out)
	return out
}

func sortSlots(ks []KeyState) {
	slices.SortFunc(ks, func(a, b KeyState) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
}

// appendPermitDelays writes version 7's section: each live permit's
// lock-delay, in the order of the semaphore section, then the delayed
// slots (count; each key, holder, token, TTL, lock-delay and limit, with
// limit 0 for a shared grant), in key then token order.
func appendPermitDelays(b []byte, sems []Semaphore, slots []KeyState) []byte {
	for _, s := range sems {
		for _, p := range s.Permits {
			b = binary.AppendUvarint(b, uint64(p.LockDelay))
		}
	}
	b = binary.AppendUvarint(b, uint64(len(slots)))
	for _, k := range slots {
		b = appendString(b, k.Key)
		b = appendString(b, k.Holder)
		b = binary.AppendUvarint(b, uint64(k.Token))
		b = binary.AppendUvarint(b, uint64(k.TTL))
		b = binary.AppendUvarint(b, uint64(k.LockDelay))
		b = binary.AppendUvarint(b, uint64(k.Limit))
	}
	return b
}

// minSlotRecord is the smallest delayed-slot record: a key and a holder
// (a length and a byte each) and four numbers.
const minSlotRecord = 8

// permitDelays decodes version 7's section into img (whose semaphores are
// decoded already).
func (d *decoder) permitDelays(img *Image) {
	for i := range img.Semaphores {
		for j := range img.Semaphores[i].Permits {
			img.Semaphores[i].Permits[j].LockDelay = time.Duration(d.int64())
		}
	}
	n := d.count(minSlotRecord)
	if n == 0 {
		return
	}
	img.SlotDelays = make([]KeyState, 0, d.sized(n))
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := KeyState{Key: d.str(), Holder: d.str(), Token: fence.Token(d.uvarint()), TTL: time.Duration(d.int64()), State: Expired,
			LockDelay: time.Duration(d.int64())}
		limit := d.uvarint()
		if d.err == nil && limit > MaxLimit {
			d.fail("slot delay record")
			return
		}
		k.Limit, k.Shared = uint16(limit), limit == 0
		img.SlotDelays = append(img.SlotDelays, k)
	}
}

// validDelay reports whether d is a lock-delay the state machine keeps:
// whole milliseconds, at most maxMs.
func validDelay(d time.Duration) bool {
	return d >= 0 && d <= maxMs && d%time.Millisecond == 0
}

// checkSlotDelays checks a snapshot's permit lock-delays and delayed slots
// against its keys and live permits: only what Apply could have produced.
// Slots in strictly increasing key then token order, each of a key of the
// snapshot, with a token of that key's grants (at most its last grant's)
// that is no live permit's, a holder, a TTL and a lock-delay; at most
// maxSlotDelays a key.
func checkSlotDelays(sems []Semaphore, slots []KeyState, last func(key string) (KeyState, bool)) bool {
	for _, s := range sems {
		for _, p := range s.Permits {
			if !validDelay(p.LockDelay) {
				return false
			}
		}
	}
	run := 0
	for i, k := range slots {
		lk, ok := last(k.Key)
		if i > 0 && k.Key == slots[i-1].Key {
			run++
		} else {
			run = 1
		}
		if !ok || i > 0 && (k.Key < slots[i-1].Key || k.Key == slots[i-1].Key && k.Token <= slots[i-1].Token) || run > maxSlotDelays ||
			k.Holder == "" || k.Token.Seq() == 0 || k.Token > lk.Token || permitLive(sems, k) ||
			k.TTL < time.Millisecond || k.TTL > maxMs || k.TTL%time.Millisecond != 0 || k.LockDelay == 0 || !validDelay(k.LockDelay) {
			return false
		}
	}
	return true
}

// permitLive reports whether k's token is a live permit of its key.
func permitLive(sems []Semaphore, k KeyState) bool {
	i, ok := slices.BinarySearchFunc(sems, k.Key, func(s Semaphore, key string) int { return strings.Compare(s.Key, key) })
	return ok && slices.ContainsFunc(sems[i].Permits, func(p KeyState) bool { return p.Token == k.Token })
}

// loadSlotDelays builds the delayed slots from checked snapshot records.
func loadSlotDelays(slots []KeyState) map[string][]KeyState {
	if len(slots) == 0 {
		return nil
	}
	out := make(map[string][]KeyState)
	for _, k := range slots {
		out[k.Key] = append(out[k.Key], k)
	}
	return out
}

// permitDelayed reports whether a live permit has a lock-delay.
func permitDelayed(sems []Semaphore) bool {
	for _, s := range sems {
		if slices.ContainsFunc(s.Permits, func(p KeyState) bool { return p.LockDelay != 0 }) {
			return true
		}
	}
	return false
}

// delaySlot records, for a restore that ends every live permit, the slot
// of permit p as delayed when it has a lock-delay: its holder may still be
// at work, as after an expiry.
func (img *Image) delaySlot(p KeyState) {
	if p.LockDelay == 0 {
		return
	}
	img.SlotDelays = append(img.SlotDelays, slotOf(p))
}

// capSlots puts the image's delayed slots in order and keeps at most
// maxSlotDelays a key, those of the highest tokens, as Apply does.
func (img *Image) capSlots() {
	sortSlots(img.SlotDelays)
	out := img.SlotDelays[:0]
	for i := 0; i < len(img.SlotDelays); {
		j := i + 1
		for j < len(img.SlotDelays) && img.SlotDelays[j].Key == img.SlotDelays[i].Key {
			j++
		}
		out = append(out, img.SlotDelays[max(i, j-maxSlotDelays):j]...)
		i = j
	}
	if len(out) == 0 {
		out = nil
	}
	img.SlotDelays = out
}
