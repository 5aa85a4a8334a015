package cluster

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fence/proof"
	"github.com/fenced/fenced/fsm"
)

// SigningKeyFileName is the file in the data dir that holds the node's
// Ed25519 signing key when --signing-key-file does not name one.
const SigningKeyFileName = "signing.key"

// DefaultKeyOverlap is how long a replaced signing key stays published
// after a rotation, unless the rotation states another overlap.
const DefaultKeyOverlap = 24 * time.Hour

// MaxKeyOverlap bounds the overlap a rotation may state.
const MaxKeyOverlap = 90 * 24 * time.Hour

// ErrKeySupplied refuses a rotation of a key the operator supplied with
// --signing-key-file: the node does not overwrite the operator's file.
var ErrKeySupplied = errors.New("the signing key was supplied by --signing-key-file; replace that file and restart to rotate it")

// signingKeyPath returns the key file and whether the operator supplied it.
func (c *Config) signingKeyPath() (string, bool) {
	if c.SigningKeyFile != "" {
		return c.SigningKeyFile, true
	}
	return filepath.Join(c.DataDir, SigningKeyFileName), false
}

// loadSigner reads the node's signing key, or, when the data dir has none
// and none was supplied, makes one and writes it (0600). A file that exists
// but is not one Ed25519 key refuses to start, naming the file.
func loadSigner(c *Config) (proof.Signer, error) {
	path, supplied := c.signingKeyPath()
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		s, err := proof.ParsePrivatePEM(b)
		if err != nil {
			return proof.Signer{}, fmt.Errorf("signing key file %s: %w", path, err)
		}
		return s, nil
	case !errors.Is(err, os.ErrNotExist) || supplied:
		return proof.Signer{}, fmt.Errorf("signing key file %s: %w", path, err)
	}
	s, err := proof.NewSigner()
	if err != nil {
		return proof.Signer{}, err
	}
	if err := writeSigner(path, s); err != nil {
		return proof.Signer{}, fmt.Errorf("signing key file %s: %w", path, err)
	}
	return s, nil
}

// writeSigner writes s to path atomically, readable by the owner only.
func writeSigner(path string, s proof.Signer) error {
	pemBytes, err := s.MarshalPrivatePEM()
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(pemBytes); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Signer returns the node's current signing key.
func (n *Node) Signer() proof.Signer { return *n.signer.Load() }

// SigningKeyRegistered reports whether the node's current key is its
// current key in the replicated state: what a proof's verifier fetches.
func (n *Node) SigningKeyRegistered() bool { return n.registered(n.Signer()) }

// registered reports whether s is its node's current key in the replicated
// state.
func (n *Node) registered(s proof.Signer) bool {
	k, ok := n.fsm.SigningKey(s.ID)
	return ok && k.Node == n.cfg.ID && k.NotAfter == 0
}

// registerSigningKey records the node's key in the replicated state unless
// it is there already, as a new leader's last step before it serves: every
// proof it signs then names a key the cluster publishes. A failure is
// logged; the leader then answers grants without proofs until a later
// takeover registers the key.
func (n *Node) registerSigningKey(r *raft.Raft, gen uint64) {
	if n.fsm.ClusterID() == "" {
		if err := n.wait(r.Apply(fsm.Encode(fsm.SetClusterID{ID: newClusterID()}), n.cfg.ApplyTimeout)); err != nil && n.gen.Load() == gen {
			n.log.Warn("could not record the cluster id", "error", err)
		}
	}
	if n.SigningKeyRegistered() {
		return
	}
	s := n.Signer()
	f := r.Apply(fsm.Encode(fsm.SigningKey{Node: n.cfg.ID, Kid: s.ID, Public: s.Public().Public,
		RetireOthersAt: time.Now().Add(DefaultKeyOverlap).UnixMilli()}), n.cfg.ApplyTimeout)
	err := n.wait(f)
	if err == nil {
		if res, ok := f.Response().(*fsm.Result); ok && res.Err != nil {
			err = res.Err
		}
	}
	if err != nil {
		if n.gen.Load() == gen {
			n.log.Warn("could not register the signing key; grants carry no proof until it is", "kid", s.ID, "error", err)
		}
		return
	}
	n.log.Info("registered the signing key", "kid", s.ID)
}

// RegisterSigningKey records the public key a member announced (with its
// join), on the leader. The key's ID is its thumbprint, computed here: a
// member names its key, never the ID another key is published under.
func (n *Node) RegisterSigningKey(ctx context.Context, id string, public []byte) error {
	if _, err := n.requireReady(); err != nil {
		return err
	}
	if len(public) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: signing_key must be a %d-byte Ed25519 public key", ErrBadRequest, ed25519.PublicKeySize)
	}
	if !n.isMember(id) {
		return fmt.Errorf("%w: no member %q", ErrBadRequest, id)
	}
	kid := proof.Thumbprint(public)
	if k, ok := n.fsm.SigningKey(kid); ok && k.Node == id && k.NotAfter == 0 {
		return nil
	}
	res, err := n.apply(fsm.SigningKey{Node: id, Kid: kid, Public: public, RetireOthersAt: time.Now().Add(DefaultKeyOverlap).UnixMilli()})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, res.Err)
	}
	return nil
}

// RotateSigningKey gives the leader a new signing key: it is written to the
// data dir, registered, and used from then on; the replaced key stays
// published for overlap (0: not at all), so a resource that fetches the
// key set within it can still check proofs signed before.
func (n *Node) RotateSigningKey(ctx context.Context, overlap time.Duration) (proof.Key, error) {
	if _, err := n.requireReady(); err != nil {
		return proof.Key{}, err
	}
	if overlap < 0 || overlap > MaxKeyOverlap {
		return proof.Key{}, fmt.Errorf("%w: overlap must be between 0 and %s", ErrBadRequest, MaxKeyOverlap)
	}
	path, supplied := n.cfg.signingKeyPath()
	if supplied {
		return proof.Key{}, fmt.Errorf("%w: %w", ErrBadRequest, ErrKeySupplied)
	}
	n.rotateMu.Lock()
	defer n.rotateMu.Unlock()
	s, err := proof.NewSigner()
	if err != nil {
		return proof.Key{}, err
	}
	// The file first: a node that crashes after it registers the new key at
	// its next takeover, and one that crashes before keeps the old.
	if err := writeSigner(path, s); err != nil {
		return proof.Key{}, fmt.Errorf("signing key file %s: %w", path, err)
	}
	n.signer.Store(&s)
	res, err := n.apply(fsm.SigningKey{Node: n.cfg.ID, Kid: s.ID, Public: s.Public().Public, RetireOthersAt: time.Now().Add(overlap).UnixMilli()})
	if err != nil {
		return proof.Key{}, err
	}
	if res.Err != nil {
		return proof.Key{}, res.Err
	}
	n.log.Info("rotated the signing key", "kid", s.ID, "overlap", overlap)
	return s.Public(), nil
}

// PublishedKeys returns the signing keys a verifier should trust at now:
// each member's current key, and replaced keys until their overlap ends.
func (n *Node) PublishedKeys(now time.Time) []fsm.SigningKeyState {
	all := n.fsm.SigningKeys()
	out := all[:0]
	for _, k := range all {
		if k.NotAfter == 0 || k.NotAfter > now.UnixMilli() {
			out = append(out, k)
		}
	}
	return out
}

// Proof signs the proof of grant k with the node's key, or returns "" when
// the key or the cluster's ID is not yet in the replicated state (a proof
// no published key verifies would only be refused). Only the leader that
// committed a grant calls it; signing writes nothing.
func (n *Node) Proof(k fsm.KeyState, now time.Time) string {
	c, s, ok := n.claimsOf(k, now)
	if !ok {
		return ""
	}
	return n.sign(c, s)
}

// claimsOf returns the claims of grant k's proof and the key to sign them
// with; ok is false when the node does not sign (see Proof).
func (n *Node) claimsOf(k fsm.KeyState, now time.Time) (c proof.Claims, s proof.Signer, ok bool) {
	cid := n.fsm.ClusterID()
	s = n.Signer()
	if cid == "" || !n.registered(s) {
		return proof.Claims{}, proof.Signer{}, false
	}
	return proof.Claims{Key: k.Key, Token: k.Token, Holder: k.Holder, Cluster: cid, Kid: s.ID,
		IssuedAt: now.Unix(), TTLMillis: k.TTL.Milliseconds()}, s, true
}

// sign signs c with s, or returns "" (and logs why) when it cannot.
func (n *Node) sign(c proof.Claims, s proof.Signer) string {
	p, err := s.Sign(c)
	if err != nil {
		n.log.Warn("could not sign a proof", "key", c.Key, "error", err)
		return ""
	}
	return p
}

// ClusterID returns the ID the cluster's first leader recorded, which
// proofs name.
func (n *Node) ClusterID() string { return n.fsm.ClusterID() }
