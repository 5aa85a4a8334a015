// Package fence defines the fencing token and the resource-side checks that use it.
package fence

import (
	"errors"
	"fmt"
	"strconv"
)

// Token is a fencing token: epoch<<32 | seq. It only grows for a given key, so a
// resource that keeps the highest token it admitted can refuse a stale holder.
// The zero Token is never granted.
type Token uint64

const (
	// MaxEpoch is the highest epoch a token can carry (31 bits), so that every
	// token fits a signed 64-bit integer.
	MaxEpoch = 1<<31 - 1
	// MaxSeq is the highest sequence number inside one epoch (32 bits).
	MaxSeq = 1<<32 - 1
	// MaxToken is the highest token value: 2^63-1.
	MaxToken Token = 1<<63 - 1
)

var (
	// ErrMalformed is returned by Parse for text that is not the strict decimal
	// form of a token.
	ErrMalformed = errors.New("malformed token")
	// ErrOutOfRange is returned when an epoch or a sequence does not fit its field.
	ErrOutOfRange = errors.New("token field out of range")
)

// Compose builds the token of the seq-th grant of an epoch. It refuses, rather
// than wraps, an epoch above MaxEpoch or a zero seq.
func Compose(epoch uint64, seq uint64) (Token, error) {
	if epoch > MaxEpoch {
		return 0, fmt.Errorf("%w: epoch %d exceeds %d", ErrOutOfRange, epoch, MaxEpoch)
	}
	if seq == 0 || seq > MaxSeq {
		return 0, fmt.Errorf("%w: seq %d not in 1..%d", ErrOutOfRange, seq, uint64(MaxSeq))
	}
	return Token(epoch<<32 | seq), nil
}

// Epoch returns the epoch (the Raft term plus the epoch floor) of the grant.
func (t Token) Epoch() uint64 { return uint64(t) >> 32 }

// Seq returns the per-key sequence number of the grant inside its epoch.
func (t Token) Seq() uint64 { return uint64(t) & MaxSeq }

// String returns the decimal text of the token, its only wire form.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// MarshalText encodes the token as decimal text, so JSON carries it as a string
// and never as a number that loses precision above 2^53.
func (t Token) MarshalText() ([]byte, error) { return strconv.AppendUint(nil, uint64(t), 10), nil }

// UnmarshalText parses the strict decimal form; see Parse.
func (t *Token) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// Parse reads the strict decimal text of a token: ASCII digits only, no sign,
// spaces, prefix or leading zero, at most 2^63-1, with a non-zero seq.
func Parse(s string) (Token, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if len(s) > 19 {
		return 0, fmt.Errorf("%w: longer than 19 digits", ErrMalformed)
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%w: leading zero", ErrMalformed)
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q is not a decimal digit", ErrMalformed, c)
		}
		v = v*10 + uint64(c-'0') // 19 digits cannot overflow uint64
	}
	if v > uint64(MaxToken) {
		return 0, fmt.Errorf("%w: above 2^63-1", ErrMalformed)
	}
	t := Token(v)
	if t.Seq() == 0 {
		return 0, fmt.Errorf("%w: seq 0 is never granted", ErrMalformed)
	}
	return t, nil
}
