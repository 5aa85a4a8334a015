package proof

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fenced/fenced/fence"
)

func mustSigner(t testing.TB) Signer {
	t.Helper()
	s, err := NewSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustSet(t testing.TB, keys ...Key) *KeySet {
	t.Helper()
	ks, err := NewKeySet(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func sampleClaims() Claims {
	return Claims{Key: "orders", Token: fence.Token(7<<32 | 3), Holder: "alice", Cluster: "c-1", IssuedAt: 1700000000, TTLMillis: 30000}
}

func mustSign(t testing.TB, c Claims, s Signer) string {
	t.Helper()
	p, err := s.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// craft builds a compact JWS from raw header and payload JSON, signed by s
// (or with a zero signature when s is nil).
func craft(hdr, payload string, s *Signer) string {
	in := b64.EncodeToString([]byte(hdr)) + "." + b64.EncodeToString([]byte(payload))
	sig := make([]byte, ed25519.SignatureSize)
	if s != nil {
		sig = ed25519.Sign(s.Private, []byte(in))
	}
	return in + "." + b64.EncodeToString(sig)
}

func payloadJSON(t testing.TB, c Claims) string {
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestVerifyAcceptsGenuine(t *testing.T) {
	s := mustSigner(t)
	ks := mustSet(t, s.Public())
	c := sampleClaims()
	p := mustSign(t, c, s)
	got, err := Verify(p, ks, Expect{Key: c.Key, Token: c.Token, Cluster: c.Cluster, Holder: c.Holder})
	if err != nil {
		t.Fatal(err)
	}
	c.Kid = s.ID
	if *got != c {
		t.Fatalf("claims %+v, want %+v", *got, c)
	}
	if len(p) > 600 {
		t.Fatalf("a proof of %d bytes; expected a few hundred", len(p))
	}
	// Cluster and holder are optional expectations.
	if _, err := Verify(p, ks, Expect{Key: c.Key, Token: c.Token}); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyRefusesHostile is the table of every proof a hostile or buggy
// client could present; each must be refused with its own reason.
func TestVerifyRefusesHostile(t *testing.T) {
	s := mustSigner(t)
	other := mustSigner(t) // a key the verifier does not trust
	ks := mustSet(t, s.Public())
	c := sampleClaims()
	good := mustSign(t, c, s)
	want := Expect{Key: c.Key, Token: c.Token, Cluster: c.Cluster, Holder: c.Holder}
	parts := strings.Split(good, ".")

	higher := c
	higher.Token = fence.Token(9<<32 | 1)
	higher.Kid = s.ID
	// The payload of a genuine proof with a higher token swapped in, keeping
	// the original header and signature.
	swapped := parts[0] + "." + b64.EncodeToString([]byte(payloadJSON(t, higher))) + "." + parts[2]

	// Re-signed with another key under the trusted kid.
	resigned := craft(`{"alg":"EdDSA","kid":"`+s.ID+`","typ":"`+Type+`"}`, payloadJSON(t, higher), &other)
	// Signed by an untrusted key under its own kid.
	foreign := mustSign(t, higher, other)

	otherCluster := c
	otherCluster.Cluster = "c-2"
	otherKey := c
	otherKey.Key = "invoices"
	otherHolder := c
	otherHolder.Holder = "mallory"

	none := craft(`{"alg":"none","kid":"`+s.ID+`","typ":"`+Type+`"}`, payloadJSON(t, higher), nil)
	noneEmptySig := none[:strings.LastIndex(none, ".")+1]
	hs := craft(`{"alg":"HS256","kid":"`+s.ID+`","typ":"`+Type+`"}`, payloadJSON(t, c), nil)
	lowerAlg := craft(`{"alg":"eddsa","kid":"`+s.ID+`","typ":"`+Type+`"}`, payloadJSON(t, c), &s)
	jwtTyp := craft(`{"alg":"EdDSA","kid":"`+s.ID+`","typ":"JWT"}`, payloadJSON(t, c), &s)
	crit := craft(`{"alg":"EdDSA","kid":"`+s.ID+`","typ":"`+Type+`","crit":["exp"]}`, payloadJSON(t, c), &s)
	embeddedJWK := craft(`{"alg":"EdDSA","kid":"`+s.ID+`","typ":"`+Type+`","jwk":{}}`, payloadJSON(t, c), &s)
	noKid := craft(`{"alg":"EdDSA","typ":"`+Type+`"}`, payloadJSON(t, c), &s)
	kidMismatch := c
	kidMismatch.Kid = other.ID
	payloadKid := craft(`{"alg":"EdDSA","kid":"`+s.ID+`","typ":"`+Type+`"}`, payloadJSON(t, kidMismatch), &s)
	numericToken := craft(`{"alg":"EdDSA","kid":"`+s.ID+`","typ":"`+Type+`"}`,
		`{"key":"orders","token":30064771075,"holder":"alice","cluster":"c-1","kid":"`+s.ID+`"}`, &s)
	trailing := craft(`{"alg":"EdDSA","kid":"`+s.ID+`","typ":"`+Type+`"}x`, payloadJSON(t, c), &s)
	padded := parts[0] + "=." + parts[1] + "." + parts[2]
	stdB64 := base64.StdEncoding.EncodeToString([]byte(`{"alg":"EdDSA","kid":"`+s.ID+`","typ":"`+Type+`"}`)) + "." + parts[1] + "." + parts[2]

	cases := []struct {
		name  string
		proof string
		want  Expect
		err   error
	}{
		{"missing", "", want, ErrMissing},
		{"too long", good + strings.Repeat("A", MaxLen), want, ErrMalformed},
		{"one part", parts[0], want, ErrMalformed},
		{"two parts", parts[0] + "." + parts[1], want, ErrMalformed},
		{"four parts", good + ".AAAA", want, ErrMalformed},
		{"truncated signature", good[:len(good)-5], want, ErrMalformed},
		{"truncated payload", parts[0] + "." + parts[1][:len(parts[1])/2] + "." + parts[2], want, ErrSignature},
		{"empty signature", parts[0] + "." + parts[1] + ".", want, ErrMalformed},
		{"header not base64url", "@@@." + parts[1] + "." + parts[2], want, ErrMalformed},
		{"padded header", padded, want, ErrMalformed},
		{"header not json", b64.EncodeToString([]byte("not json")) + "." + parts[1] + "." + parts[2], want, ErrMalformed},
		{"data after header", trailing, want, ErrMalformed},
		{"alg none", none, want, ErrAlgorithm},
		{"alg none empty signature", noneEmptySig, want, ErrAlgorithm},
		{"alg HS256", hs, want, ErrAlgorithm},
		{"alg lower case", lowerAlg, want, ErrAlgorithm},
		{"typ JWT", jwtTyp, want, ErrAlgorithm},
		{"crit header", crit, want, ErrMalformed},
		{"embedded jwk", embeddedJWK, want, ErrMalformed},
		{"no kid", noKid, want, ErrMalformed},
		{"forged signature", parts[0] + "." + parts[1] + "." + b64.EncodeToString(make([]byte, 64)), want, ErrSignature},
		{"higher token swapped in", swapped, Expect{Key: c.Key, Token: higher.Token, Cluster: c.Cluster}, ErrSignature},
		{"re-signed with another key", resigned, Expect{Key: c.Key, Token: higher.Token, Cluster: c.Cluster}, ErrSignature},
		{"signed by an unknown key", foreign, Expect{Key: c.Key, Token: higher.Token, Cluster: c.Cluster}, ErrUnknownSigner},
		{"genuine proof, higher token presented", good, Expect{Key: c.Key, Token: higher.Token, Cluster: c.Cluster}, ErrWrongToken},
		{"genuine proof, lower token presented", good, Expect{Key: c.Key, Token: c.Token - 1, Cluster: c.Cluster}, ErrWrongToken},
		{"other key's proof", mustSign(t, otherKey, s), want, ErrWrongKey},
		{"other cluster's proof", mustSign(t, otherCluster, s), want, ErrWrongCluster},
		{"other holder's proof", mustSign(t, otherHolder, s), want, ErrWrongHolder},
		{"payload kid differs", payloadKid, want, ErrMalformed},
		{"token as a JSON number", numericToken, want, ErrMalformed},
		{"standard base64 header", stdB64, want, ErrMalformed},
		{"no key set", good, want, ErrUnknownSigner},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := ks
			if tc.name == "no key set" {
				set = nil
			}
			got, err := Verify(tc.proof, set, tc.want)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Verify = %v, %v; want %v", got, err, tc.err)
			}
			if got != nil {
				t.Fatalf("claims returned with a refusal: %+v", got)
			}
			for _, other := range allErrors {
				if other != tc.err && errors.Is(err, other) {
					t.Fatalf("%v also matches %v: reasons must be distinct", err, other)
				}
			}
		})
	}
}

var allErrors = []error{ErrMissing, ErrMalformed, ErrAlgorithm, ErrUnknownSigner, ErrSignature,
	ErrWrongKey, ErrWrongToken, ErrWrongHolder, ErrWrongCluster}

func TestRotationOverlap(t *testing.T) {
	old, cur := mustSigner(t), mustSigner(t)
	c := sampleClaims()
	pOld, pCur := mustSign(t, c, old), mustSign(t, c, cur)
	want := Expect{Key: c.Key, Token: c.Token}
	both := mustSet(t, old.Public(), cur.Public())
	for _, p := range []string{pOld, pCur} {
		if _, err := Verify(p, both, want); err != nil {
			t.Fatalf("during the overlap: %v", err)
		}
	}
	after := mustSet(t, cur.Public())
	if _, err := Verify(pOld, after, want); !errors.Is(err, ErrUnknownSigner) {
		t.Fatalf("a retired key's proof: %v, want ErrUnknownSigner", err)
	}
}

func TestSignRefusesBadKey(t *testing.T) {
	if _, err := Sign(sampleClaims(), ed25519.PrivateKey{1, 2}, "k"); err == nil {
		t.Fatal("a short key signed")
	}
	s := mustSigner(t)
	if _, err := Sign(sampleClaims(), s.Private, ""); err == nil {
		t.Fatal("signed with an empty kid")
	}
	c := sampleClaims()
	c.Key = strings.Repeat("k", MaxLen)
	if _, err := Sign(c, s.Private, s.ID); err == nil {
		t.Fatal("signed a proof longer than MaxLen")
	}
}

func TestJWKSRoundTrip(t *testing.T) {
	a, b := mustSigner(t), mustSigner(t)
	ks := mustSet(t, a.Public(), b.Public())
	raw, err := json.Marshal(ks)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseJWKS(raw)
	if err != nil {
		t.Fatal(err)
	}
	if back.Len() != 2 {
		t.Fatalf("%d keys back", back.Len())
	}
	for _, k := range ks.Keys() {
		pub, ok := back.Lookup(k.ID)
		if !ok || !pub.Equal(k.Public) {
			t.Fatalf("key %s lost in the round trip", k.ID)
		}
	}
	var viaJSON KeySet
	if err := json.Unmarshal(raw, &viaJSON); err != nil || viaJSON.Len() != 2 {
		t.Fatalf("UnmarshalJSON: %v, %d keys", err, viaJSON.Len())
	}
}

// TestThumbprintRFC8037 checks the kid against the thumbprint worked in RFC
// 8037 appendix A.3.
func TestThumbprintRFC8037(t *testing.T) {
	x, _ := b64.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	if got, want := Thumbprint(x), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"; got != want {
		t.Fatalf("thumbprint %s, want %s", got, want)
	}
}

// TestRFC8037Example verifies the signed example of RFC 8037 appendix A.4
// with the package's own primitives (its typ and kid differ from a proof's,
// so Check would refuse it; the signature must still match).
func TestRFC8037Example(t *testing.T) {
	x, _ := b64.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	jws := "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
	i := strings.LastIndex(jws, ".")
	sig, err := b64.DecodeString(jws[i+1:])
	if err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(x, []byte(jws[:i]), sig) {
		t.Fatal("RFC 8037 A.4 does not verify")
	}
}

func TestParseJWKSRefuses(t *testing.T) {
	s := mustSigner(t)
	x := b64.EncodeToString(s.Public().Public)
	cases := map[string]string{
		"not json":      `{`,
		"no keys":       `{}`,
		"keys null":     `{"keys":null}`,
		"rsa":           `{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}`,
		"x25519":        `{"keys":[{"kty":"OKP","crv":"X25519","kid":"a","x":"` + x + `"}]}`,
		"private part":  `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `","d":"` + x + `"}]}`,
		"no kid":        `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `"}]}`,
		"short x":       `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"AAAA"}]}`,
		"x not b64url":  `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"+/+/"}]}`,
		"use enc":       `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `","use":"enc"}]}`,
		"alg other":     `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `","alg":"ES256"}]}`,
		"duplicate kid": `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"},{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"}]}`,
	}
	for name, raw := range cases {
		if ks, err := ParseJWKS([]byte(raw)); !errors.Is(err, ErrKeySet) {
			t.Errorf("%s: ParseJWKS = %v, %v; want ErrKeySet", name, ks, err)
		}
	}
	if ks, err := ParseJWKS([]byte(`{"keys":[]}`)); err != nil || ks.Len() != 0 {
		t.Fatalf("an empty set: %v", err)
	}
}

func TestPrivatePEM(t *testing.T) {
	s := mustSigner(t)
	pemBytes, err := s.MarshalPrivatePEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParsePrivatePEM(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != s.ID || !back.Private.Equal(s.Private) {
		t.Fatal("key changed in the round trip")
	}
	for name, raw := range map[string]string{
		"empty":    "",
		"garbage":  "not a key",
		"trailing": string(pemBytes) + "junk",
		"cert":     "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
		"bad der":  "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
	} {
		if _, err := ParsePrivatePEM([]byte(raw)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// FuzzVerify feeds arbitrary text as a proof: Verify must never panic, and
// must never accept anything the trusted key did not sign for the grant.
func FuzzVerify(f *testing.F) {
	s := mustSigner(f)
	ks := mustSet(f, s.Public())
	c := sampleClaims()
	good := mustSign(f, c, s)
	f.Add(good)
	f.Add("")
	f.Add("a.b.c")
	f.Add(good[:len(good)/2])
	f.Add(craft(`{"alg":"none","kid":"`+s.ID+`","typ":"`+Type+`"}`, `{}`, nil))
	want := Expect{Key: c.Key, Token: c.Token, Cluster: c.Cluster, Holder: c.Holder}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := Verify(p, ks, want)
		if err == nil {
			// Only the genuine proof's signed bytes may pass; a different
			// encoding of them would be a malleability bug.
			if p != good {
				t.Fatalf("accepted %q, which is not the proof signed", p)
			}
			if got.Token != c.Token {
				t.Fatalf("accepted token %s", got.Token)
			}
			return
		}
		matched := 0
		for _, e := range allErrors {
			if errors.Is(err, e) {
				matched++
			}
		}
		if matched != 1 {
			t.Fatalf("refusal %v matches %d reasons", err, matched)
		}
	})
}

func TestReasonsDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range allErrors {
		r := Reason(fmt.Errorf("wrapped: %w", e))
		if r == "" || r == "proof_invalid" || seen[r] {
			t.Fatalf("%v: reason %q", e, r)
		}
		seen[r] = true
	}
	if Reason(nil) != "" || Reason(errors.New("x")) != "proof_invalid" {
		t.Fatal("nil or unknown errors")
	}
}
