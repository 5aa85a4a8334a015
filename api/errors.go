package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// Client-side errors. They are the same values as the server's layers use, so
// errors.Is works from the FSM through the wire to the caller.
var (
	ErrHeld           = fsm.ErrHeld
	ErrNotHolder      = fsm.ErrNotHolder
	ErrStaleToken     = fsm.ErrStaleToken
	ErrExpired        = fsm.ErrExpired
	ErrUnknownKey     = fsm.ErrUnknownKey
	ErrGrantEnded     = fsm.ErrGrantEnded
	ErrSeqExhausted   = fsm.ErrSeqExhausted
	ErrNotLeader      = cluster.ErrNotLeader
	ErrNotReady       = cluster.ErrNotReady
	ErrBusy           = cluster.ErrBusy
	ErrBadRequest     = cluster.ErrBadRequest
	ErrMalformedToken = fence.ErrMalformed
	ErrNoLease        = cluster.ErrNoLease
	ErrLockDelay      = cluster.ErrLockDelay
	// ErrNotMember: the node asked is not a member of the cluster (it was
	// removed, or has not joined yet); nothing was done, another node may
	// serve the request.
	ErrNotMember = cluster.ErrNotMember
	// ErrTooManyKeys and ErrTooManyWaiters: a limit of the cluster refused
	// the acquire (HTTP 429); nothing was done.
	ErrTooManyKeys    = cluster.ErrTooManyKeys
	ErrTooManyWaiters = cluster.ErrTooManyWaiters
	// ErrUnknownOutcome: a write may or may not have been committed. The
	// client retries such writes itself (they are idempotent); it returns this
	// only when its context ends first. Never read it as "failed".
	ErrUnknownOutcome = cluster.ErrLeadershipLost
	// ErrUnavailable: no node could serve the request (no leader, no node
	// reachable). Nothing was done.
	ErrUnavailable = errors.New("cluster unavailable")
	// ErrLeaseLost: a Lease ended because the grant was lost or could not be
	// renewed before its deadline.
	ErrLeaseLost = errors.New("lease lost")
)

// wireError maps an error to a wire code and status. The first match wins.
var wireErrors = []struct {
	code   string
	status int
	err    error
}{
	{"held", http.StatusConflict, fsm.ErrHeld},
	{"not_holder", http.StatusConflict, fsm.ErrNotHolder},
	{"stale_token", http.StatusConflict, fsm.ErrStaleToken},
	{"expired", http.StatusConflict, fsm.ErrExpired},
	{"grant_ended", http.StatusConflict, fsm.ErrGrantEnded},
	{"no_lease", http.StatusConflict, cluster.ErrNoLease},
	{"lock_delay", http.StatusConflict, cluster.ErrLockDelay},
	{"unknown_key", http.StatusNotFound, fsm.ErrUnknownKey},
	{"compacted", http.StatusGone, fsm.ErrCompacted},
	{"seq_exhausted", http.StatusServiceUnavailable, fsm.ErrSeqExhausted},
	{"epoch_exhausted", http.StatusServiceUnavailable, fsm.ErrEpochExhausted},
	{"epoch_regressed", http.StatusServiceUnavailable, fsm.ErrEpochRegressed},
	{"malformed_token", http.StatusBadRequest, fence.ErrMalformed},
	{"bad_request", http.StatusBadRequest, cluster.ErrBadRequest},
	{"bad_request", http.StatusBadRequest, fsm.ErrInvalid},
	{"not_leader", http.StatusServiceUnavailable, cluster.ErrNotLeader},
	{"not_ready", http.StatusServiceUnavailable, cluster.ErrNotReady},
	{"not_member", http.StatusServiceUnavailable, cluster.ErrNotMember},
	{"busy", http.StatusServiceUnavailable, cluster.ErrBusy},
	{"shutting_down", http.StatusServiceUnavailable, cluster.ErrShutdown},
	{"unavailable", http.StatusServiceUnavailable, ErrUnavailable},
	{"outcome_unknown", http.StatusGatewayTimeout, cluster.ErrLeadershipLost},
	{"unauthenticated", http.StatusUnauthorized, ErrUnauthenticated},
	{"forbidden", http.StatusForbidden, ErrForbidden},
	{"rate_limited", http.StatusTooManyRequests, ErrRateLimited},
	{"request_timeout", http.StatusRequestTimeout, ErrBodyTimeout},
	{"too_many_keys", http.StatusTooManyRequests, cluster.ErrTooManyKeys},
	{"too_many_waiters", http.StatusTooManyRequests, cluster.ErrTooManyWaiters},
}

func codeOf(err error) (string, int) {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return w.code, w.status
		}
	}
	return "internal", http.StatusInternalServerError
}

func errOfCode(code string) error {
	for _, w := range wireErrors {
		if w.code == code {
			return w.err
		}
	}
	return nil
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
func (e *Error) Unwrap() error { return errOfCode(e.Code) }

// safeToRetry reports whether an answer says nothing was done.
func safeToRetry(code string) bool {
	switch code {
	case "not_leader", "not_ready", "busy", "shutting_down", "unavailable", "not_member":
		return true
	}
	return false
}
