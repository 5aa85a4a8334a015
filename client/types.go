package client

import (
	"time"

	"github.com/fenced/fenced/fence"
)

// The page sizes of GET /v1/keys: DefaultKeysLimit keys when the request
// names no limit (or 0), at most MaxKeysLimit.
const (
	DefaultKeysLimit = 1000
	MaxKeysLimit     = 10000
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
	// A permit's or a shared grant's keeps its slot: a semaphore counts it
	// against the limit, an exclusive acquire waits for it.
	LockDelay string `json:"lock_delay,omitempty"`
	// Value is published with the grant (at most MaxValueLen bytes of
	// UTF-8 text): reads and watch events return it. An acquire by the
	// holder of the grant replaces it, keeping the token.
	Value string `json:"value,omitempty"`
	// Limit, from 1 to MaxLimit, asks for one of the key's permits: the key
	// is a semaphore of Limit permits, each to a different holder with its
	// own token. Absent (or 0), the key is a lock. The first live grant of
	// a key sets its shape: while any grant is live, an acquire naming
	// another limit (or none) is refused with limit_mismatch. A permit has
	// no lock-delay.
	Limit int `json:"limit,omitempty"`
	// Mode is ModeShared for a shared grant, ModeExclusive (the default,
	// when empty) for an exclusive one, which is a lock. Shared grants of a
	// key coexist (at most MaxLimit of them), each with its own token; an
	// exclusive grant excludes every other. Once an acquire waits for the
	// key, a new shared acquire waits behind it (or, without wait, is
	// refused as held): readers never starve a writer. Not with Limit.
	Mode string `json:"mode,omitempty"`
}

// AcquireMultiRequest is the body of POST /v1/acquire/multi: 1 to
// MaxMultiKeys distinct keys for one holder, granted all in one log entry
// or none. Without Wait, a set with a key held by another holder is refused
// with held naming that key (HeldBy, and the key in the message), and no
// key changes; with Wait, the request waits without holding any key, first
// come first served among requests over overlapping sets, never in a
// cycle. Each key granted is a lock's grant of its own (its own token,
// renewed, released and verified per key). RequestID makes a retry
// answered with the same grants, never a second set.
type AcquireMultiRequest struct {
	Keys      []string `json:"keys"`
	Holder    string   `json:"holder"`
	TTL       string   `json:"ttl,omitempty"`
	Wait      string   `json:"wait,omitempty"`
	RequestID string   `json:"request_id,omitempty"`
}

// MaxMultiKeys is the most keys a multi-key acquire names.
const MaxMultiKeys = 64

// MultiGrant answers a multi-key acquire: a grant per key, in the
// request's order.
type MultiGrant struct {
	Grants []Grant `json:"grants"`
}

// Refs returns the grants of a multi-key acquire as a set to renew or
// release (Client.RenewMulti, Client.ReleaseMulti), in its order.
func (g *MultiGrant) Refs() []GrantRef {
	out := make([]GrantRef, len(g.Grants))
	for i, gr := range g.Grants {
		out[i] = GrantRef{Key: gr.Key, Token: gr.Token}
	}
	return out
}

// GrantRef names one grant of a set: its key and token (a lock's grant, a
// permit or a shared grant).
type GrantRef struct {
	Key   string      `json:"key"`
	Token fence.Token `json:"token"`
}

// ReleaseMultiRequest is the body of POST /v1/release/multi: 1 to
// MaxMultiKeys grants of one holder, on distinct keys, released all in one
// log entry or none. A set naming a grant that is not the holder's live
// one is refused with the error a release of that grant alone would get
// (not_holder, stale_token, expired, unknown_key), the key named in the
// message, and nothing changes; a grant already released is no refusal.
// RequestID makes the release safe to repeat, as a single release's: once
// applied, a repeat is answered with the grants the first one ended.
type ReleaseMultiRequest struct {
	Keys      []GrantRef `json:"keys"`
	Holder    string     `json:"holder"`
	RequestID string     `json:"request_id,omitempty"`
}

// ReleaseMultiResponse answers a set's release: each grant released, in
// the request's order.
type ReleaseMultiResponse struct {
	Released []ReleaseResponse `json:"released"`
}

// RenewMultiRequest is the body of POST /v1/renew/multi: renew the lease of
// each of 1 to MaxMultiKeys grants of one holder, on distinct keys, each by
// its TTL. Every grant is checked before any is renewed: a set naming one
// without a live lease of the holder renews none and gets the error a
// renewal of it alone would (the key named in the message). RequestID is
// accepted, as on every write, and needs no memory.
type RenewMultiRequest struct {
	Keys      []GrantRef `json:"keys"`
	Holder    string     `json:"holder"`
	RequestID string     `json:"request_id,omitempty"`
}

// RenewMultiResponse answers a set's renewal: each grant renewed, in the
// request's order, with a fresh proof.
type RenewMultiResponse struct {
	Renewed []RenewResponse `json:"renewed"`
}

// MaxLimit is the most permits a semaphore key may have, and the most
// shared grants of a key.
const MaxLimit = 1024

// The modes of an acquire (AcquireRequest.Mode).
const (
	ModeExclusive = "exclusive"
	ModeShared    = "shared"
)

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
	// Limit is the key's limit when the grant is a semaphore permit.
	Limit int `json:"limit,omitempty"`
	// Proof is the grant's proof: a JWS (EdDSA/Ed25519) signed by the
	// leader that committed it over key, token, holder and the cluster's
	// ID. A resource checks it offline against the cluster's public keys
	// (GET /v1/signing-keys) with fence/proof or fence/guard, and so refuses
	// a token fenced never issued. Empty while the leader's key is not yet
	// published (docs/FENCING.md).
	Proof string `json:"proof,omitempty"`
	// Mode is ModeShared for a shared grant; empty otherwise.
	Mode string `json:"mode,omitempty"`
}

// RenewRequest is the body of POST /v1/renew. A renewal names its grant by
// token, so a repeat can only renew that grant again or be refused:
// RequestID is accepted, as on every write, and needs no memory.
type RenewRequest struct {
	Key       string      `json:"key"`
	Holder    string      `json:"holder"`
	Token     fence.Token `json:"token"`
	RequestID string      `json:"request_id,omitempty"`
}

// RenewResponse says a lease was extended by TTL from when the leader answered.
type RenewResponse struct {
	Key    string      `json:"key"`
	Holder string      `json:"holder"`
	Token  fence.Token `json:"token"`
	TTL    string      `json:"ttl"`
	// Proof is a fresh proof of the renewed grant, as Grant.Proof; the
	// renewals of a keepalive carry none.
	Proof string `json:"proof,omitempty"`
}

// KeepaliveRequest is the body of POST /v1/keepalive: renew every key of
// holder. A repeat renews the holder's live leases again, which is what the
// first meant: RequestID is accepted, as on every write, and needs no
// memory.
type KeepaliveRequest struct {
	Holder    string `json:"holder"`
	RequestID string `json:"request_id,omitempty"`
}

// KeepaliveResponse lists the grants whose leases were extended.
type KeepaliveResponse struct {
	Holder  string          `json:"holder"`
	Renewed []RenewResponse `json:"renewed"`
}

// ReleaseRequest is the body of POST /v1/release. Force (admin) ends the
// grant of the key with Token whoever holds it. Token may be omitted with
// Force: the server then ends the grant that is current when it first
// applies the request. RequestID makes any release safe to repeat, from any
// client: once applied, a repeat with the same id is answered with the grant
// the first one ended (State released), and never ends or hands off a later
// grant. Without a request id, a repeated token-less forced release can end
// a grant made after the first one (a waiter's).
type ReleaseRequest struct {
	Key       string      `json:"key"`
	Holder    string      `json:"holder,omitempty"`
	Token     fence.Token `json:"token,omitempty"`
	Force     bool        `json:"force,omitempty"`
	RequestID string      `json:"request_id,omitempty"`
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
	// LockDelay is the grant's lock-delay: how long the key stays out of
	// reach after the grant expires (not after a release); absent when 0.
	LockDelay string `json:"lock_delay,omitempty"`
	// LockDelayRemaining is what is left of a lock-delay in force, on the
	// leader's clock; absent when none is.
	LockDelayRemaining string `json:"lock_delay_remaining,omitempty"`
	// Limit, Permits and Waiters describe a semaphore key in GET
	// /v1/keys/{key}: its limit and its live permits (each a grant of its
	// own, in token order), while any is live (a listing gives the limit,
	// not the permits); the fields above are then the key's last grant,
	// whose token is the key's high-water mark.
	// Waiters are the holders waiting for the key on the leader, first
	// come first (locks too; the console shows how many); absent when none.
	Limit   int       `json:"limit,omitempty"`
	Permits []KeyInfo `json:"permits,omitempty"`
	Waiters []string  `json:"waiters,omitempty"`
	// Mode is ModeShared for a key with live shared grants (listed in
	// Permits) and for each of them.
	Mode string `json:"mode,omitempty"`
	// Live is how many grants of a semaphore key or shared grants of a key
	// are live, in GET /v1/keys/{key} and in GET /v1/keys alike (a listing
	// gives Limit, Mode and Live, not Permits); absent for a lock.
	Live int `json:"live,omitempty"`
	// Delayed, in GET /v1/keys/{key}, are the slots of permits or shared
	// grants that expired with a lock-delay not yet over: each keeps its
	// slot (a semaphore counts it against its limit; an exclusive acquire
	// waits for it) until its LockDelayRemaining runs out. Absent when none.
	Delayed []KeyInfo `json:"delayed,omitempty"`
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
	// SigningKey is the joining node's Ed25519 public key (32 bytes,
	// base64url without padding), published with the cluster's keys so
	// that its proofs verify once it leads.
	SigningKey string `json:"signing_key,omitempty"`
}

// SigningKeys is the answer of GET /v1/signing-keys: the cluster's public
// signing keys as a JWKS (RFC 7517), Ed25519 keys (RFC 8037) whose kid is
// their RFC 7638 thumbprint, and the cluster's ID that proofs name. Keys
// is what fence/proof.ParseJWKS reads (it ignores the other members).
type SigningKeys struct {
	Keys    []SigningKey `json:"keys"`
	Cluster string       `json:"cluster_id"`
}

// SigningKey is one public key of SigningKeys: a JWK with the member that
// signs with it and, for a key its member replaced, when it stops being
// published.
type SigningKey struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	// Node is the member that signs with the key.
	Node string `json:"fenced_node"`
	// NotAfter is set on a replaced key: when (RFC 3339) it is no longer
	// published. Proofs it signed stay genuine; a verifier that pinned it
	// may keep it as long as it needs those proofs.
	NotAfter string `json:"fenced_not_after,omitempty"`
}

// RotateKeyRequest is the body of POST /v1/signing-keys/rotate: the leader
// makes a new signing key; its replaced key stays published for Overlap
// (a Go duration, 24h when empty).
type RotateKeyRequest struct {
	Overlap   string `json:"overlap,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// RotateKeyResponse names the new key and the member that holds it.
type RotateKeyResponse struct {
	Node    string `json:"node"`
	Kid     string `json:"kid"`
	Overlap string `json:"overlap"`
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

// MaxBatchItems bounds the checks of a verify batch and the holders of a
// keepalive batch. The body is also bounded by MaxBodyBytes.
const MaxBatchItems = 1024

// VerifyBatchRequest is the body of POST /v1/verify/batch: 1 to
// MaxBatchItems checks, each what POST /v1/verify takes.
type VerifyBatchRequest struct {
	Checks []VerifyRequest `json:"checks"`
}

// VerifyBatchResponse answers a verify batch: Results[i] answers Checks[i].
type VerifyBatchResponse struct {
	Results []VerifyResult `json:"results"`
}

// VerifyResult is what POST /v1/verify would have answered for one check:
// Status is its HTTP status; with 200 the verdict fields are set, otherwise
// Code and Message too, with the verdict of a refused verify (allow false,
// reason malformed), as the single route's error body has them.
type VerifyResult struct {
	Status       int         `json:"status"`
	Allow        bool        `json:"allow"`
	Reason       string      `json:"reason"`
	CurrentToken fence.Token `json:"current_token,omitempty"`
	Holder       string      `json:"holder,omitempty"`
	Code         string      `json:"code,omitempty"`
	Message      string      `json:"message,omitempty"`
}

// KeepaliveBatchRequest is the body of POST /v1/keepalive/batch: 1 to
// MaxBatchItems holders, each what POST /v1/keepalive takes.
type KeepaliveBatchRequest struct {
	Holders []string `json:"holders"`
}

// KeepaliveBatchResponse answers a keepalive batch: Results[i] answers
// Holders[i].
type KeepaliveBatchResponse struct {
	Results []KeepaliveResult `json:"results"`
}

// KeepaliveResult is what POST /v1/keepalive would have answered for one
// holder: Status is its HTTP status; with 200, Holder and Renewed are set,
// otherwise Code and Message.
type KeepaliveResult struct {
	Status  int             `json:"status"`
	Holder  string          `json:"holder,omitempty"`
	Renewed []RenewResponse `json:"renewed,omitempty"`
	Code    string          `json:"code,omitempty"`
	Message string          `json:"message,omitempty"`
}

// WatchEvent is one event of a watch stream (the data of a server-sent
// event, whose name is Type). Changes of keys (Watch* below: granted,
// renewed, released, force_released, expired, lock_delay_ended, handed_off,
// deleted) carry the key's grant after the change; lock_delay_ended names
// the expired grant whose lock-delay ran out, with no new grant; deleted
// names the last grant of a key a reclamation forgot (State StateAbsent);
// "state" gives a key's current state when a stream starts without a
// resume index (StateAbsent for a watched key that does not exist); "sync"
// says every change up to Index was sent; "reset" says the stream ends and
// the watcher must resync from a fresh read (Reason: lagged, restored, or
// the client's own compacted); "unavailable" says the node cannot serve
// the stream now (Reason: the error code).
type WatchEvent struct {
	Type      string      `json:"type"`
	Index     uint64      `json:"index"`
	Key       string      `json:"key,omitempty"`
	Holder    string      `json:"holder,omitempty"`
	Token     fence.Token `json:"token,omitempty"`
	State     string      `json:"state,omitempty"`
	TTL       string      `json:"ttl,omitempty"`
	LockDelay string      `json:"lock_delay,omitempty"`
	// PrevHolder and PrevToken name the grant a handoff ended; Ended says
	// how it ended (released, force_released, expired).
	PrevHolder string      `json:"prev_holder,omitempty"`
	PrevToken  fence.Token `json:"prev_token,omitempty"`
	Ended      string      `json:"ended,omitempty"`
	Reason     string      `json:"reason,omitempty"`
	Value      string      `json:"value,omitempty"`
	// Limit is the key's limit when the event's grant is a semaphore
	// permit: each permit's grant and end is an event of its own.
	Limit int `json:"limit,omitempty"`
	// Mode is ModeShared when the event's grant is a shared one (each
	// shared grant's grant and end is an event of its own).
	Mode string `json:"mode,omitempty"`
}

// Watch event types of the changes of a key: each is a committed log entry
// that changed the key, and carries the key's grant after it (see
// docs/WATCH.md for each).
const (
	// WatchGranted: a new grant (a new holder, a new token).
	WatchGranted = "granted"
	// WatchRenewed: the holder acquired its own grant again; the token is
	// unchanged, the TTL and lock-delay may be new.
	WatchRenewed = "renewed"
	// WatchReleased: the holder released its grant.
	WatchReleased = "released"
	// WatchForceReleased: an operator ended the grant.
	WatchForceReleased = "force_released"
	// WatchExpired: the lease ran out on the leader's clock; a lock-delay,
	// when set, starts with it.
	WatchExpired = "expired"
	// WatchLockDelayEnded: the lock-delay an expiry started ran out; Holder
	// and Token name the grant that expired (no new grant).
	WatchLockDelayEnded = "lock_delay_ended"
	// WatchHandedOff: the grant ended (Ended says how) and the first waiter
	// got the key in the same entry; Prev* name the ended grant.
	WatchHandedOff = "handed_off"
	// WatchDeleted: the key was forgotten (reclaimed).
	WatchDeleted = "deleted"
)

// StateAbsent is the State of a key that does not exist: in a deleted
// event, and in the state event that a fresh watch of one key sends when
// the key does not exist.
const StateAbsent = "absent"

// Watch event types beyond the changes of a key.
const (
	WatchState = "state"
	WatchSync  = "sync"
	WatchReset = "reset"
	// WatchUnavailable: the node cannot serve a stream yet (no leader, not
	// ready, a limit; Reason is the error code) and ends the stream; try
	// again later, or another node. A node answers so instead of a 503 or
	// a 429, which would stop a browser's EventSource for good. The Go
	// client does not deliver it: it moves on to another endpoint.
	WatchUnavailable = "unavailable"
	// WatchError is the Go client's last event of a watch the cluster
	// refused for good; Reason says why. Servers never send it.
	WatchError = "error"
)

// IndexedKey is the answer of a blocking read: the key, and the index to
// pass as ?index= to wait for its next change.
type IndexedKey struct {
	KeyInfo
	WatchIndex uint64 `json:"watch_index"`
}

// ReadIndexResponse is the answer of GET /v1/watch/index.
type ReadIndexResponse struct {
	Index uint64 `json:"index"`
}

// Bounds on durations in requests.
const (
	MinTTL     = 100 * time.Millisecond
	MaxTTL     = 24 * time.Hour
	DefaultTTL = 10 * time.Second
	MaxWait    = 5 * time.Minute
	// MaxLockDelay bounds the lock-delay of a grant.
	MaxLockDelay = 5 * time.Minute
)

// LeaderHeader carries, on every answer, the HTTP address of the leader as the
// answering node knows it.
const LeaderHeader = "X-Fenced-Leader"

// LeaderIDHeader carries, on every answer, the id of the leader as the
// answering node knows it, and NodeHeader the answering node's own id: a
// client that reaches the nodes through addresses of its own (proxies, NAT,
// published ports), which the leader's address does not match, finds the
// leader's endpoint by its id.
const (
	LeaderIDHeader = "X-Fenced-Leader-Id"
	NodeHeader     = "X-Fenced-Node"
)

// MaxRestoreBytes bounds the size of a backup given to restore.
const MaxRestoreBytes = 4 << 30

// BackupMetaHeader carries a backup's metadata (JSON) beside its bytes.
const BackupMetaHeader = "X-Fenced-Backup"

// TransferRequest is the body of POST /v1/cluster/transfer; an empty ID
// lets raft pick the most up-to-date voter.
type TransferRequest struct {
	ID string `json:"id,omitempty"`
}

// IndexHeader carries, on the answer of a blocking read, the index to pass
// as ?index= next time.
const IndexHeader = "X-Fenced-Index"

// Watch defaults and bounds.
const (
	// DefaultBlockWait is how long a blocking read waits without ?wait=.
	DefaultBlockWait = 30 * time.Second
	// DefaultProgress is how often a watch stream, when nothing else
	// happens, confirms with the leader that it is current and says so
	// with a sync event.
	DefaultProgress = 10 * time.Second
	// MinProgress and MaxProgress bound ?progress=.
	MinProgress = 100 * time.Millisecond
	MaxProgress = time.Minute
)

// ACLCheckRequest is the body of POST /v1/acl/check (admin): which rule of
// the answering node's ACL file, if any, lets Identity exercise Right
// (lock, read or verify) on Key.
type ACLCheckRequest struct {
	Identity string `json:"identity"`
	Right    string `json:"right"`
	Key      string `json:"key"`
}

// ACLCheckResponse is the node's verdict: Allow, and the rule that decides
// (Line and Rule, as the file gives it) or why nothing allows it. Digest
// names the node's ACL file (empty without one).
type ACLCheckResponse struct {
	Identity string `json:"identity"`
	Right    string `json:"right"`
	Key      string `json:"key"`
	Allow    bool   `json:"allow"`
	Line     int    `json:"line,omitempty"`
	Rule     string `json:"rule,omitempty"`
	Reason   string `json:"reason"`
	Digest   string `json:"digest,omitempty"`
}
