package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence/proof"
	"github.com/fenced/fenced/fsm"
)

// SigningNode is what the server needs of a node that signs grants'
// proofs; a Node without it answers grants without proofs and serves an
// empty key set.
type SigningNode interface {
	GrantProof(g cluster.Grant, now time.Time) string
	RegisterSigningKey(ctx context.Context, id string, public []byte) error
	RotateSigningKey(ctx context.Context, overlap time.Duration) (proof.Key, error)
	PublishedKeys(now time.Time) []fsm.SigningKeyState
	ClusterID() string
	ID() string
}

var _ SigningNode = (*cluster.Node)(nil)

// signing returns the node's signing side, when it has one.
func (s *Server) signing() (SigningNode, bool) {
	n, ok := s.node.(SigningNode)
	return n, ok
}

// proofOf signs grant k's proof, or returns "" when the node does not sign.
func (s *Server) proofOf(k fsm.KeyState) string { return s.grantProof(cluster.Grant{KeyState: k}) }

// grantProof returns an acquire's proof, or "" when the node does not sign:
// the node may have signed it while the grant's entry committed.
func (s *Server) grantProof(g cluster.Grant) string {
	if n, ok := s.signing(); ok {
		return n.GrantProof(g, time.Now())
	}
	return ""
}

// The signing keys are public: a resource fetches them without
// credentials. Rotating the leader's key is an admin's act.
func init() {
	routeAccess["GET /v1/signing-keys"] = accessOpen
	routeAccess["POST /v1/signing-keys/rotate"] = accessAdmin
}

// routeSigningKeys mounts the key set and the rotation.
func (s *Server) routeSigningKeys() {
	s.mux.HandleFunc("GET /v1/signing-keys", s.signingKeys)
	s.mux.HandleFunc("POST /v1/signing-keys/rotate", s.write(s.rotateKey))
}

// signingKeys answers the published keys from this node's replicated
// state, never forwarded: any member can hand a resource the keys, and a
// key registers before its leader signs with it.
func (s *Server) signingKeys(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.keySet(time.Now()))
}

// keySet is the JWKS of the keys published at now.
func (s *Server) keySet(now time.Time) client.SigningKeys {
	out := client.SigningKeys{Keys: []client.SigningKey{}}
	n, ok := s.signing()
	if !ok {
		return out
	}
	out.Cluster = n.ClusterID()
	for _, k := range n.PublishedKeys(now) {
		j := proof.PublicJWK(proof.Key{ID: k.Kid, Public: k.Public})
		sk := client.SigningKey{Kty: j.Kty, Crv: j.Crv, X: j.X, Kid: j.Kid, Use: j.Use, Alg: j.Alg, Node: k.Node}
		if k.NotAfter != 0 {
			sk.NotAfter = time.UnixMilli(k.NotAfter).UTC().Format(time.RFC3339)
		}
		out.Keys = append(out.Keys, sk)
	}
	return out
}

// rotateKey gives the leader a new signing key (fencectl keys rotate).
func (s *Server) rotateKey(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.RotateKeyRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := checkName("request_id", req.RequestID, client.MaxRequestIDLen, false); err != nil {
		return nil, err
	}
	overlap, err := parseDuration("overlap", req.Overlap, cluster.DefaultKeyOverlap, 0, cluster.MaxKeyOverlap)
	if err != nil {
		return nil, err
	}
	n, ok := s.signing()
	if !ok {
		return nil, fmt.Errorf("%w: this node does not sign grants", cluster.ErrBadRequest)
	}
	k, err := n.RotateSigningKey(ctx, overlap)
	if err != nil {
		return nil, err
	}
	return client.RotateKeyResponse{Node: n.ID(), Kid: k.ID, Overlap: overlap.String()}, nil
}

// registerJoined records the signing key a joining node announced.
func (s *Server) registerJoined(ctx context.Context, id string, public []byte) error {
	n, ok := s.signing()
	if !ok || public == nil {
		return nil
	}
	return n.RegisterSigningKey(ctx, id, public)
}
