package cluster

import (
	"runtime"
	"time"

	"github.com/fenced/fenced/fence/proof"
	"github.com/fenced/fenced/fsm"
)

// A grant's proof is an Ed25519 signature, 25–40 µs of CPU that an acquire
// used to spend after its commit, with its client waiting. It is signed
// while the acquire's entry commits instead, for the grant the leader
// expects (the key's next token, fsm.NextToken), and handed out only when
// the grant turns out to have exactly the claims signed; any other grant is
// signed afresh. Ed25519 signatures and the proof's encoding are
// deterministic, so a proof signed early is byte for byte the one signed
// late.
//
// Only an acquire alone in flight signs early. With others in flight the
// processors are busy: signing before the commit then only delays the
// goroutines of raft that carry the batch, and the signature costs the same
// CPU wherever it is done.

// presigned is a proof signed before its grant was known, with its claims.
type presigned struct {
	claims proof.Claims
	proof  string
}

// presign signs the proof of the grant a's acquire is expected to make in an
// entry of term, or returns nil when there is no such grant to expect or the
// node does not sign. The caller has just proposed the entry: it yields
// first, so that raft's goroutines it woke send the entry before this one
// takes the processor for the signature.
func (n *Node) presign(a AcquireArgs, term uint64) *presigned {
	tok, ok := n.fsm.NextToken(a.Key, a.Holder, term)
	if !ok {
		return nil
	}
	runtime.Gosched()
	c, s, ok := n.claimsOf(fsm.KeyState{Key: a.Key, Holder: a.Holder, Token: tok, TTL: a.TTL}, time.Now())
	if !ok {
		return nil
	}
	p := n.sign(c, s)
	if p == "" {
		return nil
	}
	return &presigned{claims: c, proof: p}
}

// GrantProof returns grant g's proof, as Proof does: the one signed while
// the grant's entry committed when the grant is the one it was signed for,
// under the node's current key and in the same second, else one signed now.
func (n *Node) GrantProof(g Grant, now time.Time) string {
	c, s, ok := n.claimsOf(g.KeyState, now)
	if !ok {
		return ""
	}
	if p := g.presigned; p != nil && p.claims == c {
		return p.proof
	}
	return n.sign(c, s)
}
