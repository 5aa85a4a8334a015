package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence/proof"
	"github.com/fenced/fenced/internal/testutil"
)

func postJSON(t testing.TB, url string, body any, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: %v: %s", url, err, raw)
		}
	}
	if resp.StatusCode != 200 {
		t.Logf("%s answered %d: %s", url, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// fetchKeys reads GET /v1/signing-keys as a resource would: the key set
// through fence/proof, and the cluster's ID.
func fetchKeys(t testing.TB, base string) (*proof.KeySet, client.SigningKeys) {
	t.Helper()
	resp, err := http.Get(base + "/v1/signing-keys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var doc client.SigningKeys
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	ks, err := proof.ParseJWKS(raw)
	if err != nil {
		t.Fatalf("the served JWKS does not parse: %v: %s", err, raw)
	}
	return ks, doc
}

func verifyGrant(ks *proof.KeySet, cluster string, g client.Grant) (*proof.Claims, error) {
	return proof.Verify(g.Proof, ks, proof.Expect{Key: g.Key, Token: g.Token, Cluster: cluster, Holder: g.Holder})
}

// TestGrantsCarryProofs: a grant and its renewal carry proofs the
// published keys verify; keys announced with a join are published, so a
// key set pinned before a leader change verifies the new leader's proofs;
// a rotation publishes the new key and keeps the old for its overlap.
func TestGrantsCarryProofs(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, _ := leaderOf(t, nodes)

	var g client.Grant
	if code := postJSON(t, lead.url+"/v1/acquire", client.AcquireRequest{Key: "orders", Holder: "alice", TTL: "30s"}, &g); code != 200 {
		t.Fatalf("acquire: %d", code)
	}
	if g.Proof == "" {
		t.Fatal("a grant without a proof")
	}
	ks, doc := fetchKeys(t, nodes[2].url)
	testutil.Eventually(t, 10*time.Second, func() error {
		ks, doc = fetchKeys(t, nodes[2].url) // a follower serves the keys it applied
		if _, err := verifyGrant(ks, doc.Cluster, g); err != nil {
			return err
		}
		return nil
	})
	c, _ := verifyGrant(ks, doc.Cluster, g)
	if c.Kid != lead.node.Signer().ID || doc.Cluster == "" || c.Cluster != doc.Cluster {
		t.Fatalf("claims %+v, cluster %q, leader kid %s", c, doc.Cluster, lead.node.Signer().ID)
	}
	var rn client.RenewResponse
	postJSON(t, lead.url+"/v1/renew", client.RenewRequest{Key: "orders", Holder: "alice", Token: g.Token}, &rn)
	if _, err := proof.Verify(rn.Proof, ks, proof.Expect{Key: "orders", Token: g.Token, Cluster: doc.Cluster}); err != nil {
		t.Fatalf("renewal's proof: %v", err)
	}
	// A semaphore's permit carries a proof of its own token.
	var permit client.Grant
	if code := postJSON(t, lead.url+"/v1/acquire", client.AcquireRequest{Key: "pool", Holder: "alice", TTL: "30s", Limit: 2}, &permit); code != 200 {
		t.Fatalf("permit: %d", code)
	}
	if _, err := verifyGrant(ks, doc.Cluster, permit); err != nil {
		t.Fatalf("a permit's proof: %v", err)
	}
	// A proof is for its own token: the same proof with a higher token is
	// refused.
	if _, err := proof.Verify(g.Proof, ks, proof.Expect{Key: "orders", Token: g.Token + 1, Cluster: doc.Cluster}); !errors.Is(err, proof.ErrWrongToken) {
		t.Fatalf("a higher token with a genuine proof: %v", err)
	}

	// The followers announce their keys with a join, as fenced does.
	for _, n := range nodes {
		if n == lead {
			continue
		}
		req := client.JoinRequest{ID: n.node.ID(), RaftAddr: n.node.Addr(), HTTPAddr: n.srv.Listener.Addr().String(),
			SigningKey: base64.RawURLEncoding.EncodeToString(n.node.Signer().Public().Public)}
		if code := postJSON(t, lead.url+"/v1/cluster/join", req, nil); code != 200 {
			t.Fatalf("join of %s: %d", n.node.ID(), code)
		}
	}
	// A key ID another member's key claims is never taken: the leader
	// computes it from the key.
	bogus := client.JoinRequest{ID: nodes[0].node.ID(), RaftAddr: nodes[0].node.Addr(), SigningKey: "short"}
	if code := postJSON(t, lead.url+"/v1/cluster/join", bogus, nil); code != 400 {
		t.Fatalf("a malformed signing_key: %d, want 400", code)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if ks, _ = fetchKeys(t, nodes[0].url); ks.Len() != 3 {
			return fmt.Errorf("%d keys published", ks.Len())
		}
		return nil
	})
	pinned := ks

	// A leader change: the new leader's proofs verify with the pinned set.
	var next *testNode
	for _, n := range nodes {
		if n != lead {
			next = n
			break
		}
	}
	if code := postJSON(t, lead.url+"/v1/cluster/transfer", client.TransferRequest{ID: next.node.ID()}, nil); code != 200 {
		t.Fatalf("transfer: %d", code)
	}
	testutil.Eventually(t, 15*time.Second, func() error {
		if !next.node.Ready() {
			return errors.New("not ready yet")
		}
		return nil
	})
	var g2 client.Grant
	postJSON(t, next.url+"/v1/acquire", client.AcquireRequest{Key: "invoices", Holder: "bob", TTL: "30s"}, &g2)
	c2, err := verifyGrant(pinned, doc.Cluster, g2)
	if err != nil {
		t.Fatalf("the new leader's proof with the pinned keys: %v", err)
	}
	if c2.Kid != next.node.Signer().ID {
		t.Fatalf("signed by %s, want the new leader's %s", c2.Kid, next.node.Signer().ID)
	}

	// Rotation: a new key, the old one published for the overlap.
	old := next.node.Signer().ID
	var rot client.RotateKeyResponse
	if code := postJSON(t, next.url+"/v1/signing-keys/rotate", client.RotateKeyRequest{Overlap: "1h"}, &rot); code != 200 {
		t.Fatalf("rotate: %d", code)
	}
	if rot.Kid == old || rot.Node != next.node.ID() {
		t.Fatalf("rotation answered %+v (old kid %s)", rot, old)
	}
	var g3 client.Grant
	postJSON(t, next.url+"/v1/acquire", client.AcquireRequest{Key: "shipments", Holder: "carol", TTL: "30s"}, &g3)
	after, afterDoc := fetchKeys(t, next.url)
	if c3, err := verifyGrant(after, doc.Cluster, g3); err != nil || c3.Kid != rot.Kid {
		t.Fatalf("a proof after the rotation: %+v, %v", c3, err)
	}
	if _, err := verifyGrant(after, doc.Cluster, g2); err != nil {
		t.Fatalf("a proof of the replaced key during the overlap: %v", err)
	}
	if _, err := verifyGrant(pinned, doc.Cluster, g3); !errors.Is(err, proof.ErrUnknownSigner) {
		t.Fatalf("a key set pinned before the rotation: %v, want ErrUnknownSigner", err)
	}
	retiring := 0
	for _, k := range afterDoc.Keys {
		if k.Kid == old && k.NotAfter != "" {
			retiring++
		}
	}
	if retiring != 1 {
		t.Fatalf("the replaced key is not marked with its end: %+v", afterDoc.Keys)
	}
	// With no overlap the replaced key leaves the set at once.
	postJSON(t, next.url+"/v1/signing-keys/rotate", client.RotateKeyRequest{Overlap: "0s"}, &rot)
	now, _ := fetchKeys(t, next.url)
	if _, ok := now.Lookup(old); !ok {
		t.Fatal("the first key's overlap ended early") // it still has its hour
	}
	if _, err := verifyGrant(now, doc.Cluster, g3); !errors.Is(err, proof.ErrUnknownSigner) {
		t.Fatalf("the key replaced with no overlap is still published: %v", err)
	}
}
