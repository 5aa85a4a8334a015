// Package guard is the resource side of fencing: it admits a token for a key only when it is not lower than the highest already admitted.
package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/fenced/fenced/fence"
)

// Guard keeps, for each key, the highest token it has admitted, and refuses any
// lower one. It is what makes a resource a fenced resource: a holder that froze,
// lost its grant and woke up again carries a token lower than its successor's,
// and the guard refuses it.
//
// Implementations must make the comparison and the recording of the new highest
// one atomic step, or two holders racing through the check could both pass and
// the lower could be recorded last.
type Guard interface {
	// Admit admits tok for key when tok is not lower than the highest token
	// admitted so far for that key, and records tok as the new highest in the
	// same atomic step. An equal token is admitted, so the current holder can
	// write more than once. A lower token is refused with a *StaleError (which
	// matches ErrStale); the zero token, and any token fence.Parse would refuse,
	// with ErrInvalidToken.
	Admit(ctx context.Context, key string, tok fence.Token) error

	// Highest returns the highest token admitted for key, or the zero Token when
	// none has been.
	Highest(ctx context.Context, key string) (fence.Token, error)
}

var (
	// ErrStale means the token is lower than one already admitted for the same
	// key: its holder has lost the key to a newer holder and must not write. It
	// is never retryable with the same token. Guards return it wrapped in a
	// *StaleError; test for it with errors.Is.
	ErrStale = errors.New("stale fencing token")

	// ErrInvalidToken means the token can never have been granted: it is zero,
	// has a zero sequence, or does not fit a signed 64-bit integer. Such a token
	// is refused rather than recorded, because recording it could raise the
	// highest above every real token and lock the key forever.
	ErrInvalidToken = errors.New("invalid fencing token")

	// ErrInvalidKey means the key is empty or otherwise unusable.
	ErrInvalidKey = errors.New("invalid fencing key")
)

// StaleError describes a refused token: the key, the token that was presented
// and the highest token already admitted for the key when it was refused.
type StaleError struct {
	Key     string
	Token   fence.Token
	Highest fence.Token
}

// Error implements error.
func (e *StaleError) Error() string {
	return fmt.Sprintf("%s: key %q: token %s is lower than admitted token %s",
		ErrStale, e.Key, e.Token, e.Highest)
}

// Is makes errors.Is(err, ErrStale) true for a *StaleError.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// checkToken refuses the tokens fenced never grants, so a guard cannot be
// poisoned by a bogus huge or zero value.
func checkToken(tok fence.Token) error {
	switch {
	case tok == 0:
		return fmt.Errorf("%w: zero", ErrInvalidToken)
	case tok > fence.MaxToken:
		return fmt.Errorf("%w: %s is above 2^63-1", ErrInvalidToken, tok)
	case tok.Seq() == 0:
		return fmt.Errorf("%w: %s has a zero sequence", ErrInvalidToken, tok)
	}
	return nil
}

// checkKey refuses the empty key, which no implementation can store.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	return nil
}

// checkAdmit validates the arguments every Admit shares, and the context, so
// a cancelled caller never changes the recorded state.
func checkAdmit(ctx context.Context, key string, tok fence.Token) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkToken(tok); err != nil {
		return err
	}
	return ctx.Err()
}

// keyLock is a mutex that a waiter can abandon when its context ends. It is a
// channel with room for one: holding the lock is having put the token in.
type keyLock chan struct{}

func newKeyLock() keyLock { return make(keyLock, 1) }

// lock waits for the lock or for ctx to end, whichever comes first.
func (l keyLock) lock(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	default:
	}
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l keyLock) unlock() { <-l }
