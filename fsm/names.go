package fsm

import (
	"encoding/hex"
	"unsafe"
)

// An entry keeps its holder, request id and key in one string, in that
// order (entry.names). A request id made of lower-case hexadecimal digits,
// an even number of them, is kept as the bytes it spells, half its length:
// the clients make theirs so (the Go client 24 digits, twelve random
// bytes), and at a million keys the names are a third of a key's memory.
// The entry's flagPackedID says which form its names hold; nothing outside
// the entry sees the packed form: a key's state, the snapshot and the
// answers carry the request id as it was sent.

// packIDs turns the packing on; tests turn it off to compare.
var packIDs = true

// packable reports whether requestID is kept packed.
func packable(requestID string) bool {
	if !packIDs || len(requestID) == 0 || len(requestID)%2 != 0 {
		return false
	}
	for i := 0; i < len(requestID); i++ {
		if c := requestID[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// bytesOf returns s's bytes, to read only.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// joinNames returns holder, request id and key as one string, the request
// id packed when it can be, and whether it was.
func joinNames(holder, requestID, key string) (string, bool) {
	return joinNameBytes(bytesOf(holder), bytesOf(requestID), bytesOf(key))
}

// joinNameBytes is joinNames of byte slices (a restore's, decoded in
// place), with one allocation.
func joinNameBytes(holder, requestID, key []byte) (string, bool) {
	packed := packable(unsafe.String(unsafe.SliceData(requestID), len(requestID)))
	rl := len(requestID)
	if packed {
		rl /= 2
	}
	b := make([]byte, len(holder)+rl+len(key))
	n := copy(b, holder)
	if packed {
		_, _ = hex.Decode(b[n:n+rl], requestID) // packable: no error
	} else {
		copy(b[n:], requestID)
	}
	copy(b[n+rl:], key)
	return unsafe.String(unsafe.SliceData(b), len(b)), packed
}

// unpackID returns the request id that stored, the part of an entry's
// names between holder and key, holds.
func unpackID(stored string, packed bool) string {
	var b []byte
	return unpackIDInto(stored, packed, &b)
}

// unpackIDInto is unpackID into buf, reused: the string is valid until buf
// is written again (a snapshot's encoding, one key at a time).
func unpackIDInto(stored string, packed bool, buf *[]byte) string {
	if !packed || stored == "" {
		return stored
	}
	*buf = hex.AppendEncode((*buf)[:0], bytesOf(stored))
	return unsafe.String(unsafe.SliceData(*buf), len(*buf))
}

// sameID reports whether stored, packed or not, holds requestID, without
// unpacking it.
func sameID(stored string, packed bool, requestID string) bool {
	if !packed {
		return stored == requestID
	}
	if len(requestID) != 2*len(stored) {
		return false
	}
	const digits = "0123456789abcdef"
	for i := 0; i < len(stored); i++ {
		if requestID[2*i] != digits[stored[i]>>4] || requestID[2*i+1] != digits[stored[i]&15] {
			return false
		}
	}
	return true
}
