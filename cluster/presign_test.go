package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenced/fenced/fence/proof"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// An acquire's proof is signed while its entry commits, for the grant the
// leader expects, and that proof is the grant's: a new key, the holder's
// acquire of a key it holds (the same token) and a key granted again after
// its release each get a presigned proof whose claims are the grant's, and
// GrantProof hands out exactly what signing the grant afresh gives.
func TestAcquireProofIsSignedWhileItCommits(t *testing.T) {
	n := signingLeader(t)
	ctx := context.Background()
	acquire := func(holder string) Grant {
		t.Helper()
		g, err := n.Acquire(ctx, AcquireArgs{Key: "orders", Holder: holder, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	first := acquire("a")
	again := acquire("a")
	if _, err := n.Release(ctx, ReleaseArgs{Key: "orders", Holder: "a", Token: first.Token}); err != nil {
		t.Fatal(err)
	}
	next := acquire("b")
	for name, g := range map[string]Grant{"new key": first, "held by its holder": again, "after a release": next} {
		p := g.presigned
		if p == nil || p.claims.Token != g.Token {
			t.Fatalf("%s: grant %d, presigned %+v", name, g.Token, p)
		}
		now := time.Unix(p.claims.IssuedAt, 0)
		got := n.GrantProof(g, now)
		if got != p.proof || got != n.Proof(g.KeyState, now) {
			t.Fatalf("%s: GrantProof %q, presigned %q, signed afresh %q", name, got, p.proof, n.Proof(g.KeyState, now))
		}
	}
}

// A proof signed for a grant the leader expected but did not make (another
// token, holder or TTL, a later second, a rotated key) is never handed out:
// GrantProof signs the grant it has.
func TestGrantProofRefusesAProofForAnotherGrant(t *testing.T) {
	n := signingLeader(t)
	g, err := n.Acquire(context.Background(), AcquireArgs{Key: "orders", Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(g.presigned.claims.IssuedAt, 0)
	var pub []proof.Key
	for _, k := range n.PublishedKeys(now) {
		pub = append(pub, proof.Key{ID: k.Kid, Public: k.Public})
	}
	keys, err := proof.NewKeySet(pub...)
	if err != nil {
		t.Fatal(err)
	}
	other := []struct {
		name string
		k    fsm.KeyState
		at   time.Time
	}{
		{"another token", fsm.KeyState{Key: g.Key, Holder: g.Holder, Token: g.Token + 1, TTL: g.TTL}, now},
		{"another holder", fsm.KeyState{Key: g.Key, Holder: "b", Token: g.Token, TTL: g.TTL}, now},
		{"another ttl", fsm.KeyState{Key: g.Key, Holder: g.Holder, Token: g.Token, TTL: 2 * g.TTL}, now},
		{"a later second", g.KeyState, now.Add(time.Second)},
	}
	for _, o := range other {
		wrong := Grant{KeyState: o.k, presigned: g.presigned}
		got := n.GrantProof(wrong, o.at)
		if got == g.presigned.proof {
			t.Fatalf("%s: the proof signed for grant %d was handed out", o.name, g.Token)
		}
		c, err := proof.Verify(got, keys, proof.Expect{Key: o.k.Key, Token: o.k.Token, Holder: o.k.Holder, Cluster: n.ClusterID()})
		if err != nil || c.TTLMillis != o.k.TTL.Milliseconds() || c.IssuedAt != o.at.Unix() {
			t.Fatalf("%s: proof %+v %v", o.name, c, err)
		}
	}
}

// signingLeader is the leader of a one-node cluster, once it signs proofs.
func signingLeader(t *testing.T) *Node {
	t.Helper()
	tc := newTestCluster(t, 1)
	_, n := tc.leader()
	testutil.Eventually(t, 10*time.Second, func() error {
		if !n.SigningKeyRegistered() || n.ClusterID() == "" {
			return errors.New("the leader's signing key or the cluster id is not recorded yet")
		}
		return nil
	})
	return n
}
