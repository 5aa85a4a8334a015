// Package resource is the fenced resource of the chaos suite: an in-harness
// store that keeps, per key, the highest token it admitted and refuses any
// lower one on reads and writes, atomically with the access (Jepsen's
// lock-set, fenced). Its own order of accesses is recorded so the checker can
// see exactly what it admitted.
package resource

import (
	"sync"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/proof"
)

// Resource is a set of fenced registers, one per key. The zero value is not
// usable; call New.
type Resource struct {
	// check is false in the "resource-no-check" positive control: the
	// resource then admits any token, as an unfenced store would.
	check bool

	// keys and cluster, once set, make every access need a genuine proof
	// of its grant, checked before tokens are compared; skipProof is the
	// "resource-skip-proof" positive control, which compares tokens only.
	proofKeys *proof.KeySet
	cluster   string
	skipProof bool

	mu   sync.Mutex
	seq  int
	keys map[string]*register
}

type register struct {
	high   fence.Token
	values []int
}

// New returns an empty resource. check=false makes it admit every token.
func New(check bool) *Resource {
	return &Resource{check: check, keys: map[string]*register{}}
}

// Checks reports whether the resource fences (false in the positive control).
func (r *Resource) Checks() bool { return r.check }

// RequireProofs makes every later access need a genuine proof, by a key of
// ks, of its grant (key, token, cluster), as a guard that requires proofs
// does; skip is the positive control that requires nothing. Call it before
// the clients start.
func (r *Resource) RequireProofs(ks *proof.KeySet, cluster string, skip bool) {
	r.proofKeys, r.cluster, r.skipProof = ks, cluster, skip
}

// RequiresProofs reports whether accesses need proofs (true in the
// skip-proof control too: its clients send them, it ignores them).
func (r *Resource) RequiresProofs() bool { return r.proofKeys != nil }

// SkipsProofs reports the skip-proof positive control.
func (r *Resource) SkipsProofs() bool { return r.skipProof }

// checkProof refuses an access whose proof is not genuine for its grant,
// naming the reason; "" admits it to the token comparison.
func (r *Resource) checkProof(key string, tok fence.Token, p string) string {
	if r.proofKeys == nil || r.skipProof {
		return ""
	}
	_, err := proof.Verify(p, r.proofKeys, proof.Expect{Key: key, Token: tok, Cluster: r.cluster})
	return proof.Reason(err)
}

// Result is the answer of an access.
type Result struct {
	// Accepted is false when the token was lower than the highest admitted.
	Accepted bool
	// High is the highest token admitted for the key after the access.
	High fence.Token
	// Values is the register's content after the access (reads only).
	Values []int
	// Seq is the position of the access in the resource's order.
	Seq int
	// ProofRefused is the reason a proof was refused (proof_missing, …),
	// before any token was compared; "" otherwise.
	ProofRefused string
}

// Write appends v to key's register if tok is at least the highest token
// admitted for key, and raises that mark to tok. With proofs required, p
// must be a genuine proof of the grant first.
func (r *Resource) Write(key string, tok fence.Token, v int, p string) Result {
	reason := r.checkProof(key, tok, p)
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.reg(key)
	r.seq++
	if reason != "" {
		return Result{Accepted: false, High: reg.high, Seq: r.seq, ProofRefused: reason}
	}
	if r.check && tok < reg.high {
		return Result{Accepted: false, High: reg.high, Seq: r.seq}
	}
	reg.high = max(reg.high, tok)
	reg.values = append(reg.values, v)
	return Result{Accepted: true, High: reg.high, Seq: r.seq}
}

// Read returns key's register if tok is at least the highest token admitted,
// and raises the mark to tok: a reader with a stale token is refused too.
func (r *Resource) Read(key string, tok fence.Token, p string) Result {
	reason := r.checkProof(key, tok, p)
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.reg(key)
	r.seq++
	if reason != "" {
		return Result{Accepted: false, High: reg.high, Seq: r.seq, ProofRefused: reason}
	}
	if r.check && tok < reg.high {
		return Result{Accepted: false, High: reg.high, Seq: r.seq}
	}
	reg.high = max(reg.high, tok)
	return Result{Accepted: true, High: reg.high, Values: append([]int(nil), reg.values...), Seq: r.seq}
}

// High returns the highest token admitted for key.
func (r *Resource) High(key string) fence.Token {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg := r.keys[key]; reg != nil {
		return reg.high
	}
	return 0
}

func (r *Resource) reg(key string) *register {
	reg := r.keys[key]
	if reg == nil {
		reg = &register{}
		r.keys[key] = reg
	}
	return reg
}
