package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/proof"
)

// ProofHeaderName is the HTTP header that carries a grant's proof, next to
// Fencing-Token.
const ProofHeaderName = "Fencing-Proof"

// ErrProof means a token was refused because of its proof, before any
// token was compared: the proof is missing where one is required, or it is
// not a genuine proof of this grant by a pinned key. A *ProofError carries
// the reason, and errors.Is matches the fence/proof sentinel too
// (proof.ErrSignature, proof.ErrUnknownSigner, …).
var ErrProof = errors.New("fencing proof refused")

// ProofError describes a refused proof.
type ProofError struct {
	Key   string
	Token fence.Token
	// Reason is proof.Reason of the refusal: proof_missing,
	// proof_signature, proof_unknown_signer, …
	Reason string
	Err    error
}

// Error implements error.
func (e *ProofError) Error() string {
	return fmt.Sprintf("%s (%s): key %q token %s: %v", ErrProof, e.Reason, e.Key, e.Token, e.Err)
}

// Unwrap makes errors.Is match ErrProof and the fence/proof sentinel.
func (e *ProofError) Unwrap() []error { return []error{ErrProof, e.Err} }

// Proofs is what a guard checks proofs with: the cluster's public keys,
// pinned (a JWKS file read with LoadKeys, or fetched once with FetchKeys),
// and the cluster's ID. No clock is read: a proof says fenced issued the
// token, never that its lease is live; the token order says the rest.
type Proofs struct {
	// Keys are the trusted public keys.
	Keys *proof.KeySet
	// Cluster, when set, is the only cluster whose proofs are accepted.
	Cluster string
	// Require refuses a token that comes without a proof. Without it a
	// token with no proof is compared as before (a migration step), and a
	// token with a proof is still refused when the proof is not genuine.
	Require bool
}

// Check verifies that p is a genuine proof of key's grant tok. It is pure:
// call it before an atomic admit-and-write (Memory.AdmitFunc,
// File.AdmitFunc, SQL.AdmitTx) as Signed.AdmitProof does before Admit.
func (ps *Proofs) Check(key string, tok fence.Token, p string) error {
	if p == "" && !ps.Require {
		return nil
	}
	if _, err := proof.Verify(p, ps.Keys, proof.Expect{Key: key, Token: tok, Cluster: ps.Cluster}); err != nil {
		return &ProofError{Key: key, Token: tok, Reason: proof.Reason(err), Err: err}
	}
	return nil
}

// Signed is a Guard that checks each token's proof before the guard it
// wraps compares tokens: a client that sends a made-up higher token, which
// would otherwise raise the key's highest above every real grant, is
// refused with ErrProof and changes nothing. Admit without a proof is
// refused when Proofs.Require is set; Middleware reads the proof from the
// Fencing-Proof header.
type Signed struct {
	Guard
	Proofs Proofs
}

var _ Guard = (*Signed)(nil)

// NewSigned wraps g so that it checks proofs with ps.
func NewSigned(g Guard, ps Proofs) *Signed { return &Signed{Guard: g, Proofs: ps} }

// AdmitProof checks p, then admits tok for key as the wrapped guard does.
func (s *Signed) AdmitProof(ctx context.Context, key string, tok fence.Token, p string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkToken(tok); err != nil {
		return err
	}
	if err := s.Proofs.Check(key, tok, p); err != nil {
		return err
	}
	return s.Guard.Admit(ctx, key, tok)
}

// Admit admits a token that comes without a proof: refused with ErrProof
// when proofs are required.
func (s *Signed) Admit(ctx context.Context, key string, tok fence.Token) error {
	return s.AdmitProof(ctx, key, tok, "")
}

// LoadKeys reads a pinned key set: the JSON of GET /v1/signing-keys (or
// `fencectl signing-keys list -o json`), whose cluster_id it returns, or
// any JWKS of Ed25519 keys (cluster ""). An error names the file.
func LoadKeys(path string) (*proof.KeySet, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	ks, err := proof.ParseJWKS(raw)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return ks, clusterOf(raw), nil
}

// FetchKeys fetches the cluster's key set once from a node's
// /v1/signing-keys (base is the node's URL), for a resource that pins it
// at start. It returns the keys and the cluster's ID.
func FetchKeys(ctx context.Context, hc *http.Client, base string) (*proof.KeySet, string, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/signing-keys", nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("%s/v1/signing-keys: %s", base, resp.Status)
	}
	ks, err := proof.ParseJWKS(raw)
	if err != nil {
		return nil, "", fmt.Errorf("%s/v1/signing-keys: %w", base, err)
	}
	return ks, clusterOf(raw), nil
}

func clusterOf(raw []byte) string {
	var doc struct {
		Cluster string `json:"cluster_id"`
	}
	_ = json.Unmarshal(raw, &doc)
	return doc.Cluster
}
