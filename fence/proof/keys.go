package proof

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sort"
)

// MaxKeys bounds the keys a key set may hold, so a hostile JWKS cannot make
// a verifier allocate without limit.
const MaxKeys = 1024

// ErrKeySet means a JWKS, or a key in it, is not a usable set of Ed25519
// public keys.
var ErrKeySet = errors.New("malformed key set")

// Key is one Ed25519 public key of a key set.
type Key struct {
	// ID is the key's "kid": its RFC 7638 thumbprint when fenced made it.
	ID string
	// Public is the 32-byte Ed25519 public key.
	Public ed25519.PublicKey
}

// KeySet is a set of public keys by ID: the keys a verifier trusts. The zero
// KeySet, and a nil *KeySet, hold no key. A KeySet is not changed after it is
// built, so it is safe for concurrent use.
type KeySet struct {
	keys map[string]ed25519.PublicKey
}

// NewKeySet returns the set of keys, refusing an empty ID, a key of the wrong
// size and two keys with one ID.
func NewKeySet(keys ...Key) (*KeySet, error) {
	if len(keys) > MaxKeys {
		return nil, fmt.Errorf("%w: %d keys, more than %d", ErrKeySet, len(keys), MaxKeys)
	}
	ks := &KeySet{keys: make(map[string]ed25519.PublicKey, len(keys))}
	for i, k := range keys {
		if k.ID == "" {
			return nil, fmt.Errorf("%w: key %d has no kid", ErrKeySet, i)
		}
		if len(k.Public) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: key %q is %d bytes, want %d", ErrKeySet, k.ID, len(k.Public), ed25519.PublicKeySize)
		}
		if _, dup := ks.keys[k.ID]; dup {
			return nil, fmt.Errorf("%w: kid %q appears twice", ErrKeySet, k.ID)
		}
		ks.keys[k.ID] = append(ed25519.PublicKey(nil), k.Public...)
	}
	return ks, nil
}

// Lookup returns the public key with ID kid.
func (ks *KeySet) Lookup(kid string) (ed25519.PublicKey, bool) {
	if ks == nil {
		return nil, false
	}
	k, ok := ks.keys[kid]
	return k, ok
}

// Len returns the number of keys in the set.
func (ks *KeySet) Len() int {
	if ks == nil {
		return 0
	}
	return len(ks.keys)
}

// Keys returns the keys of the set, by ID.
func (ks *KeySet) Keys() []Key {
	if ks == nil {
		return nil
	}
	out := make([]Key, 0, len(ks.keys))
	for id, pub := range ks.keys {
		out = append(out, Key{ID: id, Public: pub})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// JWK is the JSON form of one Ed25519 public key (RFC 8037 section 2).
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
	// D is the private key. It is never written, and a key set that carries
	// it is refused: a private key has no business in a file of public keys.
	D string `json:"d,omitempty"`
}

// JWKS is the JSON form of a key set (RFC 7517 section 5).
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// PublicJWK returns the JWK of one public key.
func PublicJWK(k Key) JWK {
	return JWK{Kty: "OKP", Crv: "Ed25519", X: b64.EncodeToString(k.Public), Kid: k.ID, Use: "sig", Alg: Algorithm}
}

// MarshalJSON writes the set as a JWKS, keys sorted by ID.
func (ks *KeySet) MarshalJSON() ([]byte, error) {
	set := JWKS{Keys: []JWK{}}
	for _, k := range ks.Keys() {
		set.Keys = append(set.Keys, PublicJWK(k))
	}
	return json.Marshal(set)
}

// UnmarshalJSON reads a JWKS; see ParseJWKS.
func (ks *KeySet) UnmarshalJSON(b []byte) error {
	parsed, err := ParseJWKS(b)
	if err != nil {
		return err
	}
	*ks = *parsed
	return nil
}

// ParseJWKS reads a JWKS of Ed25519 public keys. Every key must be an OKP key
// on Ed25519 with a kid, a 32-byte x and no private part; "use", when
// present, must be "sig" and "alg" must be "EdDSA". Anything else refuses the
// whole set: a key set a verifier half understands is not one it should
// trust.
func ParseJWKS(b []byte) (*KeySet, error) {
	var set struct {
		Keys *[]JWK `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeySet, err)
	}
	if set.Keys == nil {
		return nil, fmt.Errorf("%w: no \"keys\" array", ErrKeySet)
	}
	keys := make([]Key, 0, len(*set.Keys))
	for i, j := range *set.Keys {
		k, err := j.key()
		if err != nil {
			return nil, fmt.Errorf("%w: key %d: %v", ErrKeySet, i, err)
		}
		keys = append(keys, k)
	}
	return NewKeySet(keys...)
}

func (j JWK) key() (Key, error) {
	switch {
	case j.Kty != "OKP":
		return Key{}, fmt.Errorf("kty %q, want OKP", j.Kty)
	case j.Crv != "Ed25519":
		return Key{}, fmt.Errorf("crv %q, want Ed25519", j.Crv)
	case j.D != "":
		return Key{}, errors.New("carries a private key (d)")
	case j.Kid == "":
		return Key{}, errors.New("no kid")
	case j.Use != "" && j.Use != "sig":
		return Key{}, fmt.Errorf("use %q, want sig", j.Use)
	case j.Alg != "" && j.Alg != Algorithm:
		return Key{}, fmt.Errorf("alg %q, want %s", j.Alg, Algorithm)
	}
	x, err := b64.DecodeString(j.X)
	if err != nil {
		return Key{}, fmt.Errorf("x is not base64url: %v", err)
	}
	if len(x) != ed25519.PublicKeySize {
		return Key{}, fmt.Errorf("x is %d bytes, want %d", len(x), ed25519.PublicKeySize)
	}
	return Key{ID: j.Kid, Public: x}, nil
}

// LoadJWKS reads a JWKS file; an error names the file.
func LoadJWKS(path string) (*KeySet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ks, err := ParseJWKS(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ks, nil
}

// Thumbprint returns the RFC 7638 thumbprint of an Ed25519 public key
// (SHA-256, base64url), the kid fenced gives its keys: the same key always
// has the same ID, and two keys never share one.
func Thumbprint(pub ed25519.PublicKey) string {
	// RFC 7638 3.2: the required members in lexicographic order, no spaces.
	canon := `{"crv":"Ed25519","kty":"OKP","x":"` + b64.EncodeToString(pub) + `"}`
	sum := sha256.Sum256([]byte(canon))
	return b64.EncodeToString(sum[:])
}

// Signer is an Ed25519 private key with its ID.
type Signer struct {
	ID      string
	Private ed25519.PrivateKey
}

// Public returns the signer's public key.
func (s Signer) Public() Key {
	return Key{ID: s.ID, Public: s.Private.Public().(ed25519.PublicKey)}
}

// Sign signs c; see Sign.
func (s Signer) Sign(c Claims) (string, error) { return Sign(c, s.Private, s.ID) }

// NewSigner makes a new Ed25519 key, identified by its thumbprint.
func NewSigner() (Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Signer{}, err
	}
	return SignerOf(priv), nil
}

// SignerOf returns the signer of priv, identified by its thumbprint.
func SignerOf(priv ed25519.PrivateKey) Signer {
	return Signer{ID: Thumbprint(priv.Public().(ed25519.PublicKey)), Private: priv}
}

// MarshalPrivatePEM writes the signer's key as a PKCS #8 PEM block, the form
// `openssl genpkey -algorithm ed25519` writes.
func (s Signer) MarshalPrivatePEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(s.Private)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivatePEM reads one PKCS #8 "PRIVATE KEY" PEM block holding an
// Ed25519 key, with nothing else in the input.
func ParsePrivatePEM(b []byte) (Signer, error) {
	block, rest := pem.Decode(b)
	if block == nil {
		return Signer{}, errors.New("no PEM block")
	}
	if len(trimSpace(rest)) != 0 {
		return Signer{}, errors.New("data after the PEM block")
	}
	if block.Type != "PRIVATE KEY" {
		return Signer{}, fmt.Errorf("PEM block %q, want PRIVATE KEY", block.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return Signer{}, err
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return Signer{}, fmt.Errorf("a %T, want an Ed25519 key", k)
	}
	return SignerOf(priv), nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}
