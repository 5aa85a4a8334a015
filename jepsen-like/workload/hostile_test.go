package workload

import (
	"math/rand"
	"testing"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/proof"
	"github.com/fenced/fenced/jepsen-like/history"
	"github.com/fenced/fenced/jepsen-like/resource"
)

// TestHostileNeverReplaysAGrantAsItsOwnHolder: when fenced has made a grant
// in a new epoch that the resource has not seen yet, the resource's highest
// plus one epoch can be that grant's own token, and replaying its proof
// with it is the holder's own write, which the resource rightly admits.
// The hostile client must make up a token no proof it holds was made for.
func TestHostileNeverReplaysAGrantAsItsOwnHolder(t *testing.T) {
	s, err := proof.NewSigner()
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := proof.NewKeySet(s.Public())
	sign := func(tok fence.Token) string {
		p, _ := s.Sign(proof.Claims{Key: "k", Token: tok, Cluster: "c1"})
		return p
	}
	old, granted := fence.Token(6<<32|1), fence.Token(7<<32|1)
	res := resource.New(true)
	res.RequireProofs(ks, "c1", false)
	if r := res.Write("k", old, 1, sign(old)); !r.Accepted {
		t.Fatalf("the holder of %s: %+v", old, r)
	}
	w := &Workload{rec: history.NewRecorder(), res: res,
		proofs: map[string]grantProof{"k": {proof: sign(granted), token: granted}}}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 64; i++ {
		w.hostileWrite("k", i, rng)
	}
	for _, o := range w.rec.Ops() {
		if o.Outcome == history.OK {
			t.Errorf("the resource admitted the hostile %s with %s (%s)", o.Token, o.Error, o.Code)
		}
	}
	if res.High("k") != old {
		t.Fatalf("the resource's highest moved to %s", res.High("k"))
	}
}
