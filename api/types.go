// Package api is fenced's HTTP/JSON protocol in one place: the wire types, the
// server handlers with follower-to-leader forwarding, and the Go client.
package api

import (
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
)

// Limits on request fields. Requests outside them are refused with 400 and
// change nothing.
const (
	MaxKeyLen       = 256
	MaxHolderLen    = 128
	MaxRequestIDLen = 64
	MaxBodyBytes    = 64 << 10
	MaxPrefixLen    = MaxKeyLen
	MaxValueLen     = 1024
)

// AcquireRequest is the body of POST /v1/acquire. TTL and Wait are Go duration
// text ("10s", "1m30s"), as Consul takes them.
type AcquireRequest struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	TTL       string `json:"ttl,omitempty"`
	Wait      string `json:"wait,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// LockDelay keeps the key from new holders this long after this grant
	// expires (not after a release), as Chubby and Consul do; off when empty.
	LockDelay string `json:"lock_delay,omitempty"`
	// Value is published with the grant (at most MaxValueLen bytes of
	// UTF-8 text): reads and watch events return it. An acquire by the
	// holder of the grant replaces it, keeping the token.
	Value string `json:"value,omitempty"`
}

// Grant is the answer to a successful acquire: the key, its holder and the
// fencing token of the grant, with its epoch and seq spelled out.
type Grant struct {
	Key     string      `json:"key"`
	Holder  string      `json:"holder"`
	Token   fence.Token `json:"token"`
	Epoch   uint64      `json:"epoch"`
	Seq     uint64      `json:"seq"`
	TTL     string      `json:"ttl"`
	Renewed bool        `json:"renewed,omitempty"`
	Value   string      `json:"value,omitempty"`
}

// RenewRequest is the body of POST /v1/renew.
type RenewRequest struct {
	Key    string      `json:"key"`
	Holder string      `json:"holder"`
	Token  fence.Token `json:"token"`
}

// RenewResponse says a lease was extended by TTL from when the leader answered.
type RenewResponse struct {
	Key    string      `json:"key"`
	Holder string      `json:"holder"`
	Token  fence.Token `json:"token"`
	TTL    string      `json:"ttl"`
}

// KeepaliveRequest is the body of POST /v1/keepalive: renew every key of holder.
type KeepaliveRequest struct {
	Holder string `json:"holder"`
}

// KeepaliveResponse lists the grants whose leases were extended.
type KeepaliveResponse struct {
	Holder  string          `json:"holder"`
	Renewed []RenewResponse `json:"renewed"`
}

// ReleaseRequest is the body of POST /v1/release. Force (admin) ends the
// grant of the key with Token whoever holds it. Token may be omitted with
// Force: the server then ends the grant that is current when it reads the
// key, at each request, so a repeated request without a token can end a grant
// made after the first one (a waiter's). Send the token (as Client.Release
// does) for a forced release that is safe to repeat.
type ReleaseRequest struct {
	Key    string      `json:"key"`
	Holder string      `json:"holder,omitempty"`
	Token  fence.Token `json:"token,omitempty"`
	Force  bool        `json:"force,omitempty"`
}

// ReleaseResponse is the key after the release: the token and holder of the
// grant that was released, and its state.
type ReleaseResponse struct {
	Key    string      `json:"key"`
	Token  fence.Token `json:"token"`
	Holder string      `json:"holder,omitempty"`
	State  string      `json:"state"`
}

// VerifyRequest is the body of POST /v1/verify. Token is decimal text; it is
// taken as a string so a malformed one gets the verdict "malformed".
type VerifyRequest struct {
	Key    string `json:"key"`
	Token  string `json:"token"`
	Holder string `json:"holder,omitempty"`
}

// VerifyResponse is the verdict. Allow is true only when the cluster proved,
// linearizably, that the token is the key's current live grant.
type VerifyResponse struct {
	Allow        bool        `json:"allow"`
	Reason       string      `json:"reason"`
	CurrentToken fence.Token `json:"current_token,omitempty"`
	Holder       string      `json:"holder,omitempty"`
}

// KeyInfo is one key as GET /v1/keys shows it.
type KeyInfo struct {
	Key    string      `json:"key"`
	Holder string      `json:"holder"`
	Token  fence.Token `json:"token"`
	Epoch  uint64      `json:"epoch"`
	Seq    uint64      `json:"seq"`
	State  string      `json:"state"`
	TTL    string      `json:"ttl"`
	// LeaseRemaining is the time left on the leader's clock, for held keys.
	LeaseRemaining string `json:"lease_remaining,omitempty"`
	Index          uint64 `json:"index"`
	Value          string `json:"value,omitempty"`
}

// KeysResponse is the answer of GET /v1/keys. Truncated says the listing was
// cut at its limit; Next is then the last key listed: pass it as after= to
// get the next page.
type KeysResponse struct {
	Keys      []KeyInfo `json:"keys"`
	Truncated bool      `json:"truncated,omitempty"`
	Next      string    `json:"next,omitempty"`
}

// JoinRequest is the body of POST /v1/cluster/join.
type JoinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr,omitempty"`
}

// RemoveRequest is the body of POST /v1/cluster/remove.
type RemoveRequest struct {
	ID string `json:"id"`
}

// ErrorResponse is the body of every non-2xx answer.
type ErrorResponse struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// HeldBy and RetryAfter come with code "held".
	HeldBy     string `json:"held_by,omitempty"`
	RetryAfter string `json:"retry_after,omitempty"`
	// Allow and Reason come with a verify refused for bad input, so a
	// verify answer always carries a verdict.
	Allow  *bool  `json:"allow,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// BackupMeta describes a backup (GET /v1/snapshot, header X-Fenced-Backup).
type BackupMeta = cluster.BackupMeta

// RestoreResult is the answer of POST /v1/snapshot/restore.
type RestoreResult = cluster.RestoreResult

// Status is a node's view of the cluster, the answer of GET /v1/cluster.
type Status = cluster.Status

// Member is one server of the cluster in a Status.
type Member = cluster.Member

// CredentialStatus is a node's report, in its Status, on the credentials it
// authenticates with (tokens digest, last load, last reload's error).
type CredentialStatus = cluster.CredentialStatus
