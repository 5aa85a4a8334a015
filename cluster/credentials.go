package cluster

import "time"

// CredentialStatus is what a node reports, in its Status, about the
// credentials it authenticates requests with: which bearer tokens are in
// use, since when, and whether the latest reload (SIGHUP) failed. A node
// whose reload failed keeps the material it had, so a revoked token keeps
// working there: operators compare these across nodes.
type CredentialStatus struct {
	// TokensDigest names the bearer tokens in use: the first 16 hex
	// digits of the SHA-256 of the tokens file they were read from. Nodes
	// given the same file report the same digest. Empty without tokens.
	TokensDigest string `json:"tokens_digest,omitempty"`
	// LoadedAt is when the material in use was last loaded successfully,
	// all of it (at start, or by a reload that succeeded).
	LoadedAt time.Time `json:"loaded_at"`
	// ReloadedAt is when the latest reload was tried; zero before the
	// first.
	ReloadedAt time.Time `json:"reloaded_at,omitzero"`
	// ReloadError says why the latest reload failed, for each material
	// that failed; empty when it succeeded.
	ReloadError string `json:"reload_error,omitempty"`
}
