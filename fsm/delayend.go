package fsm

import (
	"encoding/binary"

	"github.com/fenced/fenced/fence"
)

// typeDelayEnd is the command type of DelayEnd.
const typeDelayEnd byte = 10

// DelayEnd records that the lock-delay after an expiry ended on the
// leader's clock. The leader proposes it when the delay it keeps for a key
// runs out; it changes the key only when, at the entry's apply, the key
// still has the token the entry names, that grant ended by expiry, and it
// still has a lock-delay. The lock-delay is then cleared from the state,
// so a later leader does not keep the key for a full lock-delay again,
// and watchers hear of it (EventLockDelayEnded). Anything else (the key
// granted again since, released, renewed before its expiry, a delay
// already ended) is a no-op without an event.
//
// Whether the delay has run out is the leader's decision by its own
// clock; the entry only records it. Until it is applied, the leader's
// lock-delay still decides admission, so an acquire never depends on the
// entry. A DelayEnd that names a delayed slot of a permit or a shared grant
// frees that slot (slotdelay.go).
type DelayEnd struct {
	Key   string
	Token fence.Token
}

func (c DelayEnd) encode(b []byte) []byte {
	b = append(b, typeDelayEnd, version1)
	b = appendString(b, c.Key)
	return binary.AppendUvarint(b, uint64(c.Token))
}

func (d *decoder) delayEnd() DelayEnd {
	return DelayEnd{Key: d.str(), Token: fence.Token(d.uvarint())}
}

// delayEnd applies a DelayEnd entry.
func (f *FSM) delayEnd(c DelayEnd) *Result {
	k, ok := f.get(c.Key)
	if !ok || k.Token != c.Token || k.State != Expired || k.LockDelay == 0 {
		if slot, ok := f.endSlotDelay(c); ok {
			return &Result{Key: slot, Changed: true}
		}
		return &Result{Key: k}
	}
	k.LockDelay = 0
	k = f.put(k)
	return &Result{Key: k, Changed: true}
}
