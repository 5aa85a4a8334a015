package fsm

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// typeSigningKey is the command type of SigningKey.
const typeSigningKey byte = 12

const (
	// MaxSigningKeysPerNode bounds the keys kept for one member: registering
	// one more forgets that member's oldest.
	MaxSigningKeysPerNode = 4
	// signingPublicLen is the size of an Ed25519 public key.
	signingPublicLen = 32
	// maxKidLen bounds a key ID (a thumbprint is 43 bytes).
	maxKidLen = 128
)

// SigningKey registers the public key a member signs grants' proofs with
// (see fence/proof). The member's earlier keys stay published until
// RetireOthersAt, a wall-clock time (Unix ms) the proposer chose: it is
// data, compared with a clock only by whoever serves the key set, never by
// Apply. A key ID already registered for the member makes that key current
// again; one registered for another member is refused. A member's keys are
// forgotten when the member is (DelMember).
type SigningKey struct {
	Node           string
	Kid            string
	Public         []byte
	RetireOthersAt int64
}

// SigningKeyState is one registered public key.
type SigningKeyState struct {
	// Node is the member that signs with it.
	Node string
	// Kid is the key's ID (its RFC 7638 thumbprint).
	Kid string
	// Public is the 32-byte Ed25519 public key.
	Public []byte
	// Index is the log index of the entry that registered it.
	Index uint64
	// NotAfter is 0 for a member's current key; for a key its member has
	// replaced, the wall-clock time (Unix ms) after which it is no longer
	// published.
	NotAfter int64
}

func (c SigningKey) encode(b []byte) []byte {
	b = append(b, typeSigningKey, version1)
	b = appendString(b, c.Node)
	b = appendString(b, c.Kid)
	b = appendString(b, string(c.Public))
	return binary.AppendUvarint(b, uint64(c.RetireOthersAt))
}

func (d *decoder) signingKey() SigningKey {
	return SigningKey{Node: d.str(), Kid: d.str(), Public: []byte(d.str()), RetireOthersAt: d.int64()}
}

// validSigningKey reports whether a key record is one Apply could hold.
func validSigningKey(node, kid string, public []byte) bool {
	return node != "" && len(node) <= maxOwnerLen && kid != "" && len(kid) <= maxKidLen && len(public) == signingPublicLen
}

// registerSigningKey applies a SigningKey entry.
func (f *FSM) registerSigningKey(c SigningKey, pos logPos) *Result {
	if !validSigningKey(c.Node, c.Kid, c.Public) || c.RetireOthersAt < 0 {
		return &Result{Err: fmt.Errorf("%w: a signing key needs a node, a kid of 1 to %d bytes and a %d-byte public key", ErrInvalid, maxKidLen, signingPublicLen)}
	}
	for _, k := range f.signing {
		if k.Kid == c.Kid && k.Node != c.Node {
			return &Result{Err: fmt.Errorf("%w: kid %q is registered for another member", ErrInvalid, c.Kid)}
		}
	}
	// The member's other current keys start their overlap; the same key is
	// made current again (a node restarted with a key it had replaced).
	keep := f.signing[:0]
	for _, k := range f.signing {
		switch {
		case k.Node == c.Node && k.Kid == c.Kid:
			continue // re-added below, at this index
		case k.Node == c.Node && k.NotAfter == 0:
			k.NotAfter = max(c.RetireOthersAt, 1)
		}
		keep = append(keep, k)
	}
	f.signing = append(keep, SigningKeyState{Node: c.Node, Kid: c.Kid, Public: slices.Clone(c.Public), Index: pos.index})
	f.trimSigningKeys(c.Node)
	return &Result{Changed: true}
}

// trimSigningKeys forgets node's oldest keys beyond MaxSigningKeysPerNode.
// f.signing is in registration order, so the first are the oldest.
func (f *FSM) trimSigningKeys(node string) {
	n := 0
	for _, k := range f.signing {
		if k.Node == node {
			n++
		}
	}
	keep := f.signing[:0]
	for _, k := range f.signing {
		if k.Node == node && n > MaxSigningKeysPerNode {
			n--
			continue
		}
		keep = append(keep, k)
	}
	f.signing = keep
}

// forgetSigningKeys drops the keys of a member that left: a removed member
// signs nothing the cluster vouches for.
func (f *FSM) forgetSigningKeys(node string) {
	f.signing = slices.DeleteFunc(f.signing, func(k SigningKeyState) bool { return k.Node == node })
}

// SigningKeys returns the registered public keys, in registration order.
func (f *FSM) SigningKeys() []SigningKeyState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return cloneSigningKeys(f.signing)
}

// SigningKey returns the registered key with ID kid.
func (f *FSM) SigningKey(kid string) (SigningKeyState, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, k := range f.signing {
		if k.Kid == kid {
			return k, true
		}
	}
	return SigningKeyState{}, false
}

// cloneSigningKeys copies keys; none is nil, as a snapshot without them
// decodes.
func cloneSigningKeys(in []SigningKeyState) []SigningKeyState {
	if len(in) == 0 {
		return nil
	}
	out := make([]SigningKeyState, len(in))
	for i, k := range in {
		k.Public = slices.Clone(k.Public)
		out[i] = k
	}
	return out
}

// appendSigningKeys encodes the signing-key section of a snapshot.
func appendSigningKeys(b []byte, keys []SigningKeyState) []byte {
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k.Node)
		b = appendString(b, k.Kid)
		b = appendString(b, string(k.Public))
		b = binary.AppendUvarint(b, k.Index)
		b = binary.AppendUvarint(b, uint64(k.NotAfter))
	}
	return b
}

// signingKeys decodes the signing-key section (version 6 on): records Apply could have
// made, in registration order (indexes not decreasing, none after the
// image's applied index), no kid twice, at most MaxSigningKeysPerNode a
// member.
func (d *decoder) signingKeys(img *Image, version byte) {
	n := d.count(5 + signingPublicLen)
	if d.err == nil && n == 0 && version == snapVersion6 {
		d.fail("empty signing key section") // a state without keys is written in an older version
	}
	if n == 0 {
		return // a later version carries the section whatever it holds
	}
	img.SigningKeys = make([]SigningKeyState, 0, d.sized(n))
	seen := make(map[string]bool, d.sized(n))
	perNode := map[string]int{}
	var prev uint64
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := SigningKeyState{Node: d.str(), Kid: d.str(), Public: []byte(d.str()), Index: d.uvarint(), NotAfter: d.int64()}
		if d.err != nil {
			return
		}
		perNode[k.Node]++
		if !validSigningKey(k.Node, k.Kid, k.Public) || seen[k.Kid] || k.Index < prev || k.Index > img.Applied || perNode[k.Node] > MaxSigningKeysPerNode {
			d.fail("signing key record")
			return
		}
		seen[k.Kid], prev = true, k.Index
		img.SigningKeys = append(img.SigningKeys, k)
	}
}
