package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Errors of a node's read and write paths. They say whether a retry is safe:
// the API layer translates them to wire codes, and clients decide on them.
var (
	// ErrNotLeader: this node is not the leader; nothing was proposed, so
	// retrying on the leader is safe.
	ErrNotLeader = errors.New("not the leader")
	// ErrNotReady: this node leads but has not yet confirmed its state after
	// the election (barrier and lease re-arming); nothing was done, retry is safe.
	ErrNotReady = errors.New("leader is not ready yet")
	// ErrBusy: the proposal could not be queued in time; nothing was proposed.
	ErrBusy = errors.New("leader is busy; the request was not proposed")
	// ErrLeadershipLost: leadership was lost after the request was proposed.
	// It may or may not be committed: the outcome is unknown, and retrying the
	// same request (same holder, same request id) is how to learn it.
	ErrLeadershipLost = errors.New("leadership lost while committing: outcome unknown")
	// ErrShutdown: the node is shutting down.
	ErrShutdown = errors.New("node is shutting down")
	// ErrBadRequest: the request's fields are invalid.
	ErrBadRequest = errors.New("bad request")
	// ErrLockDelay: the key's last grant expired moments ago and its
	// lock-delay still keeps it from new holders; see LockDelayError.
	ErrLockDelay = errors.New("key is in its lock-delay after an expiry")
	// ErrNotMember: this node is not a member of the cluster: it was
	// removed, or it has not joined yet. Nothing was done; another node of
	// the cluster may serve the request.
	ErrNotMember = errors.New("this node is not a member of the cluster")
	// ErrNoLease: renew of a grant that this leader does not hold a live lease
	// for: it is superseded, released, expired or unknown.
	ErrNoLease = errors.New("no live lease for this grant")
)

// LockDelayError says how long a key's lock-delay lasts.
type LockDelayError struct {
	Key        string
	RetryAfter time.Duration
}

func (e *LockDelayError) Error() string {
	return fmt.Sprintf("key %q is in its lock-delay for %v after an expiry", e.Key, e.RetryAfter)
}

// Is makes errors.Is(err, ErrLockDelay) true.
func (e *LockDelayError) Is(target error) bool { return target == ErrLockDelay }

// translate maps raft's errors to this package's, keeping apart "nothing was
// proposed" (safe to retry) and "proposed, outcome unknown".
func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return ErrNotLeader
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return ErrBusy
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrAbortedByRestore):
		return ErrLeadershipLost
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrLeadershipLost
	}
	// Any other failure came after the entry was handed to raft: the
	// leader's log write failing, say, while followers may already hold the
	// entry. Whether it commits is unknown, and saying so is the safe answer.
	return fmt.Errorf("%w: %v", ErrLeadershipLost, err)
}

// translateRead maps errors of a read or of a leadership confirmation, which
// change nothing, so every failure is safe to retry.
func translateRead(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return ErrNotLeader
	}
	return err
}
