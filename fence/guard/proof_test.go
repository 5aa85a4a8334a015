package guard

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/proof"
)

// signedFixture is a cluster's key, another cluster's, and proofs of
// grants they signed.
type signedFixture struct {
	cluster, other proof.Signer
	keys           *proof.KeySet
}

func newSignedFixture(t testing.TB) *signedFixture {
	a, err := proof.NewSigner()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := proof.NewSigner()
	ks, err := proof.NewKeySet(a.Public())
	if err != nil {
		t.Fatal(err)
	}
	return &signedFixture{cluster: a, other: b, keys: ks}
}

func (f *signedFixture) sign(t testing.TB, s proof.Signer, cluster, key string, tok fence.Token) string {
	p, err := s.Sign(proof.Claims{Key: key, Token: tok, Holder: "alice", Cluster: cluster, TTLMillis: 30000})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hostileProofs are the (token, proof) pairs a buggy or hostile client
// could send for key "k" whose real grant is tok; each must be refused with
// its reason, before any token is compared.
func hostileProofs(t testing.TB, f *signedFixture, tok fence.Token) []struct {
	name   string
	tok    fence.Token
	proof  string
	reason string
} {
	genuine := f.sign(t, f.cluster, "c1", "k", tok)
	parts := strings.Split(genuine, ".")
	high := fence.MaxToken
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	swapped := strings.Replace(string(payload), `"`+tok.String()+`"`, `"`+high.String()+`"`, 1)
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"`+f.cluster.ID+`","typ":"`+proof.Type+`"}`)) + "." + parts[1] + "."
	resignedHdr := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(swapped))
	resigned := resignedHdr + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(f.other.Private, []byte(resignedHdr)))
	return []struct {
		name   string
		tok    fence.Token
		proof  string
		reason string
	}{
		{"missing", high, "", "proof_missing"},
		{"forged signature", high, parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 64)), "proof_signature"},
		{"truncated", tok, genuine[:len(genuine)-7], "proof_malformed"},
		{"too long", tok, genuine + strings.Repeat("A", proof.MaxLen), "proof_malformed"},
		{"not three parts", high, "garbage", "proof_malformed"},
		{"re-signed with another key", high, resigned, "proof_signature"},
		{"higher token swapped in", high, parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(swapped)) + "." + parts[2], "proof_signature"},
		{"genuine proof, higher token", high, genuine, "proof_wrong_token"},
		{"other key's proof", high, f.sign(t, f.cluster, "c1", "other", high), "proof_wrong_key"},
		{"other cluster's proof", high, f.sign(t, f.cluster, "c2", "k", high), "proof_wrong_cluster"},
		{"unknown signer", high, f.sign(t, f.other, "c1", "k", high), "proof_unknown_signer"},
		{"alg none", high, none, "proof_algorithm"},
	}
}

// TestSignedGuardsRefuseHostileProofs runs every hostile proof against
// every guard: each is refused with ErrProof and its reason, and the key's
// highest token is unchanged, so the real holder still writes.
func TestSignedGuardsRefuseHostileProofs(t *testing.T) {
	f := newSignedFixture(t)
	ctx := context.Background()
	tok := fence.Token(5<<32 | 1)
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			g := NewSigned(im.open(t), Proofs{Keys: f.keys, Cluster: "c1", Require: true})
			if err := g.AdmitProof(ctx, "k", tok, f.sign(t, f.cluster, "c1", "k", tok)); err != nil {
				t.Fatalf("a genuine proof: %v", err)
			}
			for _, h := range hostileProofs(t, f, tok) {
				err := g.AdmitProof(ctx, "k", h.tok, h.proof)
				var pe *ProofError
				if !errors.Is(err, ErrProof) || !errors.As(err, &pe) || pe.Reason != h.reason {
					t.Errorf("%s: %v, want ErrProof %s", h.name, err, h.reason)
				}
				if errors.Is(err, ErrStale) {
					t.Errorf("%s: compared tokens before the proof", h.name)
				}
			}
			if err := g.Admit(ctx, "k", tok+1); !errors.Is(err, proof.ErrMissing) {
				t.Errorf("Admit without a proof where required: %v", err)
			}
			if h, _ := g.Highest(ctx, "k"); h != tok {
				t.Fatalf("highest %s after the hostile tokens, want %s", h, tok)
			}
			next := tok + 1
			if err := g.AdmitProof(ctx, "k", next, f.sign(t, f.cluster, "c1", "k", next)); err != nil {
				t.Fatalf("the next real holder: %v", err)
			}
			// A genuine proof of a lower token is stale as ever.
			if err := g.AdmitProof(ctx, "k", tok, f.sign(t, f.cluster, "c1", "k", tok)); !errors.Is(err, ErrStale) {
				t.Fatalf("a genuine but stale token: %v", err)
			}
		})
	}
}

// TestUncheckedGuardIsPoisoned is the positive control: a guard that does
// not check proofs admits the made-up highest token, and refuses every
// real holder from then on, the hole proofs close.
func TestUncheckedGuardIsPoisoned(t *testing.T) {
	ctx := context.Background()
	for _, im := range impls() {
		g := im.open(t)
		if err := g.Admit(ctx, "k", fence.MaxToken); err != nil {
			t.Fatalf("%s: %v", im.name, err)
		}
		if err := g.Admit(ctx, "k", fence.Token(6<<32|1)); !errors.Is(err, ErrStale) {
			t.Fatalf("%s: the real holder after the poison: %v", im.name, err)
		}
	}
}

func TestSignedOptionalProof(t *testing.T) {
	f := newSignedFixture(t)
	ctx := context.Background()
	g := NewSigned(NewMemory(), Proofs{Keys: f.keys})
	if err := g.Admit(ctx, "k", 7); err != nil {
		t.Fatalf("no proof, not required: %v", err)
	}
	if err := g.AdmitProof(ctx, "k", 8, "garbage"); !errors.Is(err, proof.ErrMalformed) {
		t.Fatalf("a bad proof, not required: %v", err)
	}
}

func TestMiddlewareChecksProofs(t *testing.T) {
	f := newSignedFixture(t)
	g := NewSigned(NewMemory(), Proofs{Keys: f.keys, Cluster: "c1", Require: true})
	h := Middleware(g, KeyFromHeader("Fencing-Key"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	tok := fence.Token(3<<32 | 1)
	send := func(tok fence.Token, proofs ...string) (int, ErrorBody) {
		req := httptest.NewRequest("PUT", "/", nil)
		req.Header.Set("Fencing-Key", "k")
		req.Header.Set(HeaderName, tok.String())
		for _, p := range proofs {
			req.Header.Add(ProofHeaderName, p)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var body ErrorBody
		json.Unmarshal(rec.Body.Bytes(), &body)
		return rec.Code, body
	}
	good := f.sign(t, f.cluster, "c1", "k", tok)
	if code, body := send(tok, good); code != 204 {
		t.Fatalf("genuine: %d %+v", code, body)
	}
	for _, hp := range hostileProofs(t, f, tok) {
		var proofs []string
		if hp.proof != "" {
			proofs = []string{hp.proof}
		}
		if code, body := send(hp.tok, proofs...); code != 403 || body.Code != CodeInvalidProof || body.Reason != hp.reason {
			t.Errorf("%s: %d %+v, want 403 invalid_proof %s", hp.name, code, body, hp.reason)
		}
	}
	if code, body := send(tok, good, good); code != 403 || body.Reason != "proof_malformed" {
		t.Fatalf("two proof headers: %d %+v", code, body)
	}
}

func TestLoadKeys(t *testing.T) {
	f := newSignedFixture(t)
	raw, _ := json.Marshal(f.keys)
	var doc map[string]any
	json.Unmarshal(raw, &doc)
	doc["cluster_id"] = "c1"
	withCluster, _ := json.Marshal(doc)
	path := filepath.Join(t.TempDir(), "keys.json")
	os.WriteFile(path, withCluster, 0o600)
	ks, cluster, err := LoadKeys(path)
	if err != nil || cluster != "c1" || ks.Len() != 1 {
		t.Fatalf("LoadKeys: %v, %q, %d", err, cluster, ks.Len())
	}
	os.WriteFile(path, []byte(`{"keys":[{"kty":"OKP"}]}`), 0o600)
	if _, _, err := LoadKeys(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a malformed key file: %v", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(withCluster) }))
	defer srv.Close()
	if ks, cluster, err := FetchKeys(context.Background(), nil, srv.URL); err != nil || cluster != "c1" || ks.Len() != 1 {
		t.Fatalf("FetchKeys: %v", err)
	}
}
