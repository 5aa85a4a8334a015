package api

import (
	"crypto"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/fenced/fenced/client"
)

// TestProofsVerifyWithGoJOSE checks fenced's proofs and key set with an
// independent JOSE implementation (go-jose): the JWKS parses as standard
// JWKs whose RFC 7638 thumbprints are their kids, the proof parses as a JWS
// restricted to EdDSA, verifies with the key its kid names, and its payload
// is the grant's. A tampered proof fails there too.
func TestProofsVerifyWithGoJOSE(t *testing.T) {
	lead, _ := leaderOf(t, startCluster(t, 2))
	var g client.Grant
	if code := postJSON(t, lead.url+"/v1/acquire", client.AcquireRequest{Key: "orders", Holder: "alice", TTL: "30s"}, &g); code != 200 || g.Proof == "" {
		t.Fatalf("acquire: %d, proof %q", code, g.Proof)
	}
	resp, err := http.Get(lead.url + "/v1/signing-keys")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatalf("go-jose cannot read the JWKS: %v\n%s", err, raw)
	}
	for _, k := range set.Keys {
		tp, err := k.Thumbprint(crypto.SHA256)
		if err != nil || base64.RawURLEncoding.EncodeToString(tp) != k.KeyID {
			t.Fatalf("kid %s is not the RFC 7638 thumbprint (%v)", k.KeyID, err)
		}
	}
	jws, err := jose.ParseSigned(g.Proof, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatalf("go-jose cannot parse the proof: %v", err)
	}
	if len(jws.Signatures) != 1 {
		t.Fatalf("%d signatures", len(jws.Signatures))
	}
	h := jws.Signatures[0].Protected
	if h.Algorithm != "EdDSA" || h.ExtraHeaders["typ"] != "fenced-grant+jwt" {
		t.Fatalf("header %+v", h)
	}
	keys := set.Key(h.KeyID)
	if len(keys) != 1 {
		t.Fatalf("kid %s names %d keys of the set", h.KeyID, len(keys))
	}
	payload, err := jws.Verify(keys[0])
	if err != nil {
		t.Fatalf("go-jose does not verify the proof: %v", err)
	}
	var claims struct {
		Key, Token, Holder, Cluster, Kid string
		TTL                              int64 `json:"ttl_ms"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	if claims.Key != "orders" || claims.Token != g.Token.String() || claims.Holder != "alice" || claims.Kid != h.KeyID || claims.TTL != 30000 || claims.Cluster == "" {
		t.Fatalf("payload %s", payload)
	}
	// The same bytes with one signature bit flipped fail in go-jose too.
	sig := []byte(g.Proof)
	sig[len(sig)-3] ^= 1
	if bad, err := jose.ParseSigned(string(sig), []jose.SignatureAlgorithm{jose.EdDSA}); err == nil {
		if _, err := bad.Verify(keys[0]); err == nil {
			t.Fatal("go-jose verified a tampered proof")
		}
	}
	// And go-jose refuses the proof under any other algorithm list.
	if _, err := jose.ParseSigned(g.Proof, []jose.SignatureAlgorithm{jose.ES256}); err == nil {
		t.Fatal("go-jose parsed an EdDSA proof as ES256")
	}
}
