// Package proof signs and checks the proof that comes with every grant: a JWS
// compact serialization (RFC 7515) signed with EdDSA over Ed25519 (RFC 8037),
// whose payload names the key, the token, the holder and the cluster of the
// grant. A resource that pins the cluster's public keys (a JWKS, RFC 7517) can
// then refuse, without calling the cluster, a token that fenced never issued.
//
// A proof says that fenced issued this token for this key to this holder. It
// never says that the grant is still live: only the token order at the
// resource, and a verify against the cluster, say that. Verify therefore reads
// no clock.
//
// The package uses the standard library only, so the server, the Go client
// and the resource guards share one definition of the format.
package proof

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fenced/fenced/fence"
)

const (
	// Algorithm is the only JWS "alg" a proof may carry (RFC 8037).
	Algorithm = "EdDSA"
	// Type is the JWS "typ" of a proof (explicit typing, RFC 8725 3.11), so a
	// proof cannot be mistaken for another kind of signed object.
	Type = "fenced-grant+jwt"
	// MaxLen is the longest proof accepted, in bytes. A real proof is a few
	// hundred bytes; anything longer is refused before it is decoded.
	MaxLen = 2048
)

var (
	// ErrMissing means no proof came with the token where one is required.
	ErrMissing = errors.New("proof missing")
	// ErrMalformed means the proof is not a JWS compact serialization of a
	// fenced grant: too long, not three base64url parts, or a header or payload
	// that does not decode.
	ErrMalformed = errors.New("proof malformed")
	// ErrAlgorithm means the header names an algorithm other than EdDSA,
	// "none" included, or a type other than Type.
	ErrAlgorithm = errors.New("proof algorithm not EdDSA")
	// ErrUnknownSigner means the proof names a signing key the pinned key set
	// does not hold.
	ErrUnknownSigner = errors.New("proof signed by an unknown key")
	// ErrSignature means the signature does not verify: the proof was forged,
	// altered after signing (a higher token swapped in) or re-signed.
	ErrSignature = errors.New("proof signature invalid")
	// ErrWrongKey means the proof is genuine but for another key.
	ErrWrongKey = errors.New("proof is for another key")
	// ErrWrongToken means the proof is genuine but for another token.
	ErrWrongToken = errors.New("proof is for another token")
	// ErrWrongHolder means the proof is genuine but for another holder.
	ErrWrongHolder = errors.New("proof is for another holder")
	// ErrWrongCluster means the proof is genuine but from another cluster.
	ErrWrongCluster = errors.New("proof is from another cluster")
)

// Claims is the payload of a proof. Token is decimal text on the wire, as
// everywhere in fenced, so no JSON parser rounds it through a float.
type Claims struct {
	// Key is the name of the key the grant is for.
	Key string `json:"key"`
	// Token is the grant's fencing token.
	Token fence.Token `json:"token"`
	// Holder is the identity the grant was made to.
	Holder string `json:"holder"`
	// Cluster is the ID of the cluster that made the grant.
	Cluster string `json:"cluster"`
	// Kid is the ID of the signing key, the same as the header's.
	Kid string `json:"kid"`
	// IssuedAt is when the leader signed, in Unix seconds (JWT "iat"). It is
	// informative: Verify does not read it.
	IssuedAt int64 `json:"iat"`
	// TTLMillis is the grant's lease in milliseconds when it was signed. It is
	// a hint, never a proof that the lease is live.
	TTLMillis int64 `json:"ttl_ms"`
}

// header is the protected header of a proof. Only these members are
// accepted, so a "crit", "jwk" or "jku" a verifier would have to honour is
// refused rather than ignored.
type header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

var b64 = base64.RawURLEncoding.Strict()

// Sign returns the proof of c signed with priv, whose key ID is kid (c.Kid is
// set to kid).
func Sign(c Claims, priv ed25519.PrivateKey, kid string) (string, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return "", fmt.Errorf("proof: signing key is %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	if kid == "" {
		return "", errors.New("proof: empty key id")
	}
	c.Kid = kid
	h, err := json.Marshal(header{Alg: Algorithm, Kid: kid, Typ: Type})
	if err != nil {
		return "", err
	}
	p, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	n := b64.EncodedLen(len(h)) + 1 + b64.EncodedLen(len(p))
	out := make([]byte, n, n+1+b64.EncodedLen(ed25519.SignatureSize))
	b64.Encode(out, h)
	out[b64.EncodedLen(len(h))] = '.'
	b64.Encode(out[b64.EncodedLen(len(h))+1:], p)
	sig := ed25519.Sign(priv, out)
	out = append(out, '.')
	out = b64.AppendEncode(out, sig)
	if len(out) > MaxLen {
		return "", fmt.Errorf("proof: %d bytes, longer than %d", len(out), MaxLen)
	}
	return string(out), nil
}

// Expect is what a verifier knows of the grant a proof must be for. Key and
// Token are required; Cluster and Holder are checked when not empty.
type Expect struct {
	Key     string
	Token   fence.Token
	Cluster string
	Holder  string
}

// Verify checks that proof is a genuine proof, by a key of ks, of the grant
// want describes, and returns its claims. It reads no clock. Each refusal
// matches one of the package's errors: ErrMissing, ErrMalformed,
// ErrAlgorithm, ErrUnknownSigner, ErrSignature, ErrWrongKey, ErrWrongToken,
// ErrWrongHolder or ErrWrongCluster.
func Verify(proof string, ks *KeySet, want Expect) (*Claims, error) {
	c, err := Check(proof, ks)
	if err != nil {
		return nil, err
	}
	switch {
	case c.Key != want.Key:
		return nil, fmt.Errorf("%w: signed for key %q, presented for %q", ErrWrongKey, c.Key, want.Key)
	case c.Token != want.Token:
		return nil, fmt.Errorf("%w: signed for token %s, presented with %s", ErrWrongToken, c.Token, want.Token)
	case want.Cluster != "" && c.Cluster != want.Cluster:
		return nil, fmt.Errorf("%w: signed by cluster %q, expected %q", ErrWrongCluster, c.Cluster, want.Cluster)
	case want.Holder != "" && c.Holder != want.Holder:
		return nil, fmt.Errorf("%w: signed for holder %q, presented by %q", ErrWrongHolder, c.Holder, want.Holder)
	}
	return c, nil
}

// Check verifies the signature of proof with the key of ks it names and
// returns its claims, without comparing them to any grant. Use Verify to
// admit a token.
func Check(proof string, ks *KeySet) (*Claims, error) {
	if proof == "" {
		return nil, ErrMissing
	}
	if len(proof) > MaxLen {
		return nil, fmt.Errorf("%w: %d bytes, longer than %d", ErrMalformed, len(proof), MaxLen)
	}
	hEnc, rest, ok := strings.Cut(proof, ".")
	if !ok {
		return nil, fmt.Errorf("%w: not three dot-separated parts", ErrMalformed)
	}
	pEnc, sEnc, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sEnc, ".") {
		return nil, fmt.Errorf("%w: not three dot-separated parts", ErrMalformed)
	}
	hRaw, err := b64.DecodeString(hEnc)
	if err != nil {
		return nil, fmt.Errorf("%w: header is not base64url: %v", ErrMalformed, err)
	}
	var h header
	if err := decodeStrict(hRaw, &h); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	if h.Alg != Algorithm {
		return nil, fmt.Errorf("%w: alg %q", ErrAlgorithm, h.Alg)
	}
	if h.Typ != Type {
		return nil, fmt.Errorf("%w: typ %q, want %q", ErrAlgorithm, h.Typ, Type)
	}
	if h.Kid == "" {
		return nil, fmt.Errorf("%w: header has no kid", ErrMalformed)
	}
	pub, ok := ks.Lookup(h.Kid)
	if !ok {
		return nil, fmt.Errorf("%w: kid %q", ErrUnknownSigner, h.Kid)
	}
	sig, err := b64.DecodeString(sEnc)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: signature is not %d base64url bytes", ErrMalformed, ed25519.SignatureSize)
	}
	signed := proof[:len(hEnc)+1+len(pEnc)]
	if !ed25519.Verify(pub, []byte(signed), sig) {
		return nil, fmt.Errorf("%w (kid %q)", ErrSignature, h.Kid)
	}
	pRaw, err := b64.DecodeString(pEnc)
	if err != nil {
		return nil, fmt.Errorf("%w: payload is not base64url: %v", ErrMalformed, err)
	}
	var c Claims
	if err := json.Unmarshal(pRaw, &c); err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	if c.Kid != h.Kid {
		return nil, fmt.Errorf("%w: payload kid %q differs from header kid %q", ErrMalformed, c.Kid, h.Kid)
	}
	if c.Key == "" || c.Token == 0 {
		return nil, fmt.Errorf("%w: payload lacks key or token", ErrMalformed)
	}
	return &c, nil
}

// decodeStrict decodes one JSON object with no unknown members and nothing
// after it.
func decodeStrict(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("data after the object")
	}
	return nil
}

// Reason returns the short, stable name of a refusal, the same in every
// fenced guard and CLI: proof_missing, proof_malformed, proof_algorithm,
// proof_unknown_signer, proof_signature, proof_wrong_key,
// proof_wrong_token, proof_wrong_holder or proof_wrong_cluster; "" for nil
// and proof_invalid for an error of no known kind.
func Reason(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	if err == nil {
		return ""
	}
	return "proof_invalid"
}

var reasons = []struct {
	err  error
	name string
}{
	{ErrMissing, "proof_missing"},
	{ErrMalformed, "proof_malformed"},
	{ErrAlgorithm, "proof_algorithm"},
	{ErrUnknownSigner, "proof_unknown_signer"},
	{ErrSignature, "proof_signature"},
	{ErrWrongKey, "proof_wrong_key"},
	{ErrWrongToken, "proof_wrong_token"},
	{ErrWrongHolder, "proof_wrong_holder"},
	{ErrWrongCluster, "proof_wrong_cluster"},
}
