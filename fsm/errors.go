package fsm

import (
	"errors"
	"fmt"

	"github.com/fenced/fenced/fence"
)

// Refusals returned in Result.Err. They are decided by the replicated state, so
// every node reaches the same one for the same entry.
var (
	// ErrHeld: the key is granted to another holder; see HeldError.
	ErrHeld = errors.New("key is held by another holder")
	// ErrSeqExhausted: the key used every seq of the current epoch. Grants of
	// the key resume once the cluster moves to a new term.
	ErrSeqExhausted = errors.New("sequence space of the current epoch is exhausted; a new term is needed")
	// ErrEpochExhausted: term plus floor no longer fits the 31-bit epoch.
	ErrEpochExhausted = errors.New("epoch space is exhausted")
	// ErrEpochRegressed: the entry's epoch is lower than the key's last grant,
	// which can only follow a restore without a raised floor. Refused, never wrapped.
	ErrEpochRegressed = errors.New("epoch is lower than the key's last grant; raise the epoch floor")
	// ErrNotHolder: release by a holder that is not the key's current holder.
	ErrNotHolder = errors.New("not the holder of the key")
	// ErrStaleToken: release with a token that is not the key's current grant.
	ErrStaleToken = errors.New("token is not the key's current grant")
	// ErrExpired: the grant's lease expired before the request was applied.
	ErrExpired = errors.New("grant expired")
	// ErrUnknownKey: the key was never granted.
	ErrUnknownKey = errors.New("unknown key")
	// ErrGrantEnded: a retried acquire whose original grant was made and has
	// since been released or has expired; the retry does not mint a new grant.
	ErrGrantEnded = errors.New("the grant of this request has already ended")
	// ErrSlotDelayed: the key's free slots are kept by the lock-delays of
	// permits or shared grants that expired (slotdelay.go); see
	// SlotDelayedError.
	ErrSlotDelayed = errors.New("the key's free slots are in the lock-delay of expired grants")
	// ErrInvalid: a command whose fields are out of range (an empty key, a
	// non-positive TTL). The API layer rejects these before they are proposed.
	ErrInvalid = errors.New("invalid command")
)

// HeldError says who holds a key. errors.Is(err, ErrHeld) is true.
type HeldError struct {
	Key    string
	Holder string
	Token  fence.Token
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("key %q is held by %q", e.Key, e.Holder)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// SlotDelayedError names the key and its delayed slots' tokens, lowest
// first. errors.Is(err, ErrSlotDelayed) is true.
type SlotDelayedError struct {
	Key    string
	Tokens []fence.Token
}

func (e *SlotDelayedError) Error() string {
	return fmt.Sprintf("key %q has %d slots in the lock-delay of expired grants", e.Key, len(e.Tokens))
}

// Is makes errors.Is(err, ErrSlotDelayed) true.
func (e *SlotDelayedError) Is(target error) bool { return target == ErrSlotDelayed }
