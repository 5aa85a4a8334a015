package api

import (
	"errors"
	"net/http"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// Refusals of the HTTP layer itself; nothing was done. The client module
// defines them, with every other wire code, so both sides name the same
// values.
var (
	// ErrUnavailable: this node cannot serve the request (503).
	ErrUnavailable = client.ErrUnavailable
	// ErrUnauthenticated: the request carried no valid credentials (401).
	ErrUnauthenticated = client.ErrUnauthenticated
	// ErrForbidden: the identity's role does not allow the operation, or it
	// named a holder it may not act as (403).
	ErrForbidden = client.ErrForbidden
	// ErrRateLimited: the client sent requests faster than its rate (429).
	ErrRateLimited = client.ErrRateLimited
	// ErrBodyTimeout: the client did not send its request body in time (408).
	ErrBodyTimeout = client.ErrBodyTimeout
)

// wireErrors maps the errors of the server's layers to wire codes; the
// client module's table gives each code its HTTP status. The first match
// wins.
var wireErrors = []struct {
	code string
	err  error
}{
	{"held", fsm.ErrHeld},
	{"limit_mismatch", fsm.ErrLimitMismatch},
	{"not_holder", fsm.ErrNotHolder},
	{"stale_token", fsm.ErrStaleToken},
	{"expired", fsm.ErrExpired},
	{"grant_ended", fsm.ErrGrantEnded},
	{"no_lease", cluster.ErrNoLease},
	{"lock_delay", cluster.ErrLockDelay},
	{"unknown_key", fsm.ErrUnknownKey},
	{"compacted", fsm.ErrCompacted},
	{"seq_exhausted", fsm.ErrSeqExhausted},
	{"epoch_exhausted", fsm.ErrEpochExhausted},
	{"epoch_regressed", fsm.ErrEpochRegressed},
	{"malformed_token", fence.ErrMalformed},
	{"bad_request", cluster.ErrBadRequest},
	{"bad_request", fsm.ErrInvalid},
	{"not_leader", cluster.ErrNotLeader},
	{"not_ready", cluster.ErrNotReady},
	{"not_member", cluster.ErrNotMember},
	{"busy", cluster.ErrBusy},
	{"shutting_down", cluster.ErrShutdown},
	{"unavailable", ErrUnavailable},
	{"outcome_unknown", cluster.ErrLeadershipLost},
	{"unauthenticated", ErrUnauthenticated},
	{"forbidden", ErrForbidden},
	{"rate_limited", ErrRateLimited},
	{"request_timeout", ErrBodyTimeout},
	{"too_many_keys", cluster.ErrTooManyKeys},
	{"too_many_waiters", cluster.ErrTooManyWaiters},
	{"too_many_ended_keys", cluster.ErrTooManyEndedKeys},
	{"no_space", cluster.ErrNoSpace},
	{"too_many_watches", client.ErrTooManyWatches},
}

// codeOf returns the wire code and HTTP status of an error.
func codeOf(err error) (string, int) {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return w.code, client.StatusOfCode(w.code)
		}
	}
	return "internal", http.StatusInternalServerError
}
