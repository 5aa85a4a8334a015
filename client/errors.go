package client

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fenced/fenced/fence"
)

// Errors of the API. Each non-2xx answer carries a wire code (ErrorResponse's
// Code); an *Error unwraps to the sentinel of its code, so errors.Is(err,
// ErrHeld) works on what any call returns. The server maps its own layers'
// errors onto these codes.
var (
	// ErrHeld: the key is held by another holder (409 held, with HeldBy
	// and RetryAfter); for a semaphore key, every permit is taken.
	ErrHeld = errors.New("key is held by another holder")
	// ErrLimitMismatch: the key has live grants of another shape: a
	// semaphore of another limit, a lock asked for as a semaphore, or a
	// semaphore asked for as a lock (409 limit_mismatch).
	ErrLimitMismatch = errors.New("the key is held with another limit")
	// ErrNotHolder: the request names a holder that does not hold the key.
	ErrNotHolder = errors.New("not the holder of the key")
	// ErrStaleToken: the token is not the key's current grant.
	ErrStaleToken = errors.New("token is not the key's current grant")
	// ErrExpired: the grant expired.
	ErrExpired = errors.New("grant expired")
	// ErrUnknownKey: the cluster has no such key.
	ErrUnknownKey = errors.New("unknown key")
	// ErrGrantEnded: a retried request's grant has already ended.
	ErrGrantEnded = errors.New("the grant of this request has already ended")
	// ErrCompacted: a watch asked to resume from history the cluster no
	// longer holds.
	ErrCompacted = errors.New("history compacted")
	// ErrSeqExhausted, ErrEpochExhausted, ErrEpochRegressed: the cluster
	// cannot mint a higher token for the key now; nothing was granted.
	ErrSeqExhausted   = errors.New("sequence space of the current epoch is exhausted; a new term is needed")
	ErrEpochExhausted = errors.New("epoch space is exhausted")
	ErrEpochRegressed = errors.New("epoch is lower than the key's last grant; raise the epoch floor")
	// ErrMalformedToken: a token that is not fenced's strict decimal form.
	ErrMalformedToken = fence.ErrMalformed
	// ErrBadRequest: the request was refused for bad input; nothing changed.
	ErrBadRequest = errors.New("bad request")
	// ErrNotLeader, ErrNotReady, ErrBusy, ErrShutdown: the node could not
	// serve the request now; nothing was done, another attempt may succeed.
	ErrNotLeader = errors.New("not the leader")
	ErrNotReady  = errors.New("leader is not ready yet")
	ErrBusy      = errors.New("leader is busy; the request was not proposed")
	ErrShutdown  = errors.New("node is shutting down")
	// ErrNotMember: the node asked is not a member of the cluster (it was
	// removed, or has not joined yet); nothing was done, another node may
	// serve the request.
	ErrNotMember = errors.New("this node is not a member of the cluster")
	// ErrNoLease: the grant has no live lease to renew.
	ErrNoLease = errors.New("no live lease for this grant")
	// ErrLockDelay: the key is in its lock-delay after an expiry.
	ErrLockDelay = errors.New("key is in its lock-delay after an expiry")
	// ErrTooManyKeys and ErrTooManyWaiters: a limit of the cluster refused
	// the acquire (HTTP 429); nothing was done.
	ErrTooManyKeys    = errors.New("too many keys held by this holder")
	ErrTooManyWaiters = errors.New("too many acquires waiting for this key")
	// ErrTooManyEndedKeys: the identity has as many ended keys kept as the
	// cluster allows (--max-ended-keys-per-identity); an acquire of a new
	// key name is refused until the retention reclaims some (taking one of
	// its ended keys again is not refused).
	ErrTooManyEndedKeys = errors.New("too many ended keys kept for this identity")
	// ErrNoSpace: the leader's data dir is low on free space, so it takes
	// no new key; renewals, releases and verifies go on. Nothing was done.
	// Retry once an operator freed space (fencectl status shows each
	// node's data dir).
	ErrNoSpace = errors.New("the leader's data dir is low on free space: no new keys until space is freed")
	// ErrTooManyWatches: the identity has as many watches and blocking
	// reads open on the node as it may (HTTP 429); close one first.
	ErrTooManyWatches = errors.New("too many watches and blocking reads open")
	// ErrUnknownOutcome: a write may or may not have been committed. The
	// client retries such writes itself (they are idempotent); it returns this
	// only when its context ends first. Never read it as "failed".
	ErrUnknownOutcome = errors.New("leadership lost while committing: outcome unknown")
	// ErrUnavailable: no node could serve the request (no leader, no node
	// reachable). Nothing was done.
	ErrUnavailable = errors.New("cluster unavailable")
	// ErrNoConnection: no endpoint accepted a connection within the
	// client's connect timeout (WithConnectTimeout); nothing was sent. It
	// comes with ErrUnavailable: errors.Is finds both. It is the client's
	// own; no answer carries it.
	ErrNoConnection = errors.New("no endpoint accepted a connection")
	// ErrUnauthenticated: the request carried no valid credentials.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: the identity may not do this.
	ErrForbidden = errors.New("forbidden")
	// ErrRateLimited: the identity's request rate is over its limit.
	ErrRateLimited = errors.New("rate limited")
	// ErrBodyTimeout: the request body was not sent in time.
	ErrBodyTimeout = errors.New("request body timeout")
	// ErrLeaseLost: a Lease ended because the grant was lost or could not be
	// renewed before its deadline. It is the client's own; no answer
	// carries it.
	ErrLeaseLost = errors.New("lease lost")
)

// codes lists every wire code with the HTTP status it is answered with and
// its sentinel. It is the one table of the protocol's errors: the server
// answers with these codes and statuses, the client reads them back.
var codes = []struct {
	code   string
	status int
	err    error
}{
	{"held", http.StatusConflict, ErrHeld},
	{"limit_mismatch", http.StatusConflict, ErrLimitMismatch},
	{"not_holder", http.StatusConflict, ErrNotHolder},
	{"stale_token", http.StatusConflict, ErrStaleToken},
	{"expired", http.StatusConflict, ErrExpired},
	{"grant_ended", http.StatusConflict, ErrGrantEnded},
	{"no_lease", http.StatusConflict, ErrNoLease},
	{"lock_delay", http.StatusConflict, ErrLockDelay},
	{"unknown_key", http.StatusNotFound, ErrUnknownKey},
	{"compacted", http.StatusGone, ErrCompacted},
	{"seq_exhausted", http.StatusServiceUnavailable, ErrSeqExhausted},
	{"epoch_exhausted", http.StatusServiceUnavailable, ErrEpochExhausted},
	{"epoch_regressed", http.StatusServiceUnavailable, ErrEpochRegressed},
	{"malformed_token", http.StatusBadRequest, ErrMalformedToken},
	{"bad_request", http.StatusBadRequest, ErrBadRequest},
	{"not_leader", http.StatusServiceUnavailable, ErrNotLeader},
	{"not_ready", http.StatusServiceUnavailable, ErrNotReady},
	{"not_member", http.StatusServiceUnavailable, ErrNotMember},
	{"busy", http.StatusServiceUnavailable, ErrBusy},
	{"shutting_down", http.StatusServiceUnavailable, ErrShutdown},
	{"unavailable", http.StatusServiceUnavailable, ErrUnavailable},
	{"outcome_unknown", http.StatusGatewayTimeout, ErrUnknownOutcome},
	{"unauthenticated", http.StatusUnauthorized, ErrUnauthenticated},
	{"forbidden", http.StatusForbidden, ErrForbidden},
	{"rate_limited", http.StatusTooManyRequests, ErrRateLimited},
	{"request_timeout", http.StatusRequestTimeout, ErrBodyTimeout},
	{"too_many_keys", http.StatusTooManyRequests, ErrTooManyKeys},
	{"too_many_waiters", http.StatusTooManyRequests, ErrTooManyWaiters},
	{"too_many_ended_keys", http.StatusTooManyRequests, ErrTooManyEndedKeys},
	{"too_many_watches", http.StatusTooManyRequests, ErrTooManyWatches},
	{"no_space", http.StatusInsufficientStorage, ErrNoSpace},
}

// ErrorOfCode returns the sentinel of a wire code; nil for a code this
// client does not know.
func ErrorOfCode(code string) error {
	for _, c := range codes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}

// StatusOfCode returns the HTTP status an answer with a wire code has;
// 500 for a code this client does not know.
func StatusOfCode(code string) int {
	for _, c := range codes {
		if c.code == code {
			return c.status
		}
	}
	return http.StatusInternalServerError
}

// Error is a non-2xx answer of the server. errors.Is(err, ErrHeld) and the
// other sentinels work on it.
type Error struct {
	Status int
	ErrorResponse
}

func (e *Error) Error() string {
	if e.Code == "held" && e.HeldBy != "" {
		return fmt.Sprintf("%s: held by %q", e.Message, e.HeldBy)
	}
	return fmt.Sprintf("%s (%s)", e.Message, e.Code)
}

// Unwrap returns the sentinel of the wire code.
func (e *Error) Unwrap() error { return ErrorOfCode(e.Code) }

// safeToRetry reports whether an answer says nothing was done.
func safeToRetry(code string) bool {
	switch code {
	case "not_leader", "not_ready", "busy", "shutting_down", "unavailable", "not_member":
		return true
	}
	return false
}
