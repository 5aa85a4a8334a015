package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/fenced/fenced/fsm"
)

// AcquireMultiArgs is a multi-key acquire: every key to one holder, all or
// none (fsm.AcquireMulti).
type AcquireMultiArgs struct {
	Keys      []string
	Holder    string
	TTL       time.Duration
	Wait      time.Duration
	RequestID string
	// Owner is the authenticated identity the keys and the waiting are
	// counted against (AcquireArgs.Owner).
	Owner string
}

// AcquireMulti grants every key of a.Keys to a.Holder in one log entry, or
// none. A set with a key held by another holder is refused with a
// HeldError naming that key (the first in the request's order), from the
// applied state after a linearizable read, without a log entry. With Wait,
// it waits without holding any key: in the line of every key of the set at
// once (waitq.joinAll), so requests over overlapping sets are served first
// come, first served and never wait for each other in a cycle; once first
// in every line and every key is free, it proposes the set.
func (n *Node) AcquireMulti(ctx context.Context, a AcquireMultiArgs) ([]Grant, error) {
	if _, err := n.requireReady(); err != nil {
		return nil, err
	}
	// Below the free-space floor a set is refused unless the holder already
	// holds every key of it (as a single acquire is).
	for _, k := range a.Keys {
		if err := n.checkSpaceFor(AcquireArgs{Key: k, Holder: a.Holder}); err != nil {
			return nil, err
		}
	}
	// Each key is counted against the holder's and the identity's limits
	// as a single acquire of it would be.
	for _, key := range a.Keys {
		if err := n.checkLimits(AcquireArgs{Key: key, Holder: a.Holder, Wait: a.Wait, Owner: a.Owner}); err != nil {
			return nil, err
		}
	}
	var deadline time.Time
	if a.Wait > 0 {
		deadline = time.Now().Add(a.Wait)
	}
	var w *waiter
	defer func() {
		if w != nil {
			n.waiters.leaveAll(w)
		}
	}()
	for {
		waiting := !deadline.IsZero() && time.Now().Before(deadline)
		if w == nil || n.waiters.isHeadAll(w) {
			gs, err := n.tryMulti(ctx, a, waiting)
			var he *HeldError
			if !errors.As(err, &he) || !waiting {
				return gs, err
			}
		}
		if w == nil {
			w = n.waiters.joinAll(AcquireArgs{Key: a.Keys[0], Holder: a.Holder, TTL: a.TTL, Wait: a.Wait, RequestID: a.RequestID}, a.Keys)
			if n.multiFree(a) {
				notify(w) // freed before we joined: do not miss it
			}
		}
		if err := n.await(ctx, w, deadline); err != nil {
			if errors.Is(err, errWaitTimeout) {
				return n.tryMulti(ctx, a, false)
			}
			return nil, err
		}
	}
}

// multiBlocker returns the first key of a's set that another holder (or a
// semaphore's permits, or shared grants) holds in the applied state, or "".
func (n *Node) multiBlocker(a AcquireMultiArgs) string {
	for _, key := range a.Keys {
		if _, ps := n.fsm.Permits(key); len(ps) > 0 || n.heldByOther(key, a.Holder) {
			return key
		}
	}
	return ""
}

// multiFree reports whether no key of a's set is held by another now.
func (n *Node) multiFree(a AcquireMultiArgs) bool { return n.multiBlocker(a) == "" }

// tryMulti proposes the set unless the applied state refuses it (for a
// waiter), or a linearizable read does (otherwise): then it is refused
// naming the first key held by another, with no log entry. A key in its
// lock-delay refuses the set as held by its expired holder would.
func (n *Node) tryMulti(ctx context.Context, a AcquireMultiArgs, waiting bool) ([]Grant, error) {
	if key := n.multiBlocker(a); key != "" {
		if !waiting {
			if err := n.linearizable(ctx); err != nil {
				return nil, err
			}
		}
		if key := n.multiBlocker(a); key != "" {
			return nil, n.heldError(key)
		}
	}
	for _, key := range a.Keys {
		if left, ok := n.leases.lockDelayLeft(key); ok && !n.holds(key, a.Holder) {
			return nil, &LockDelayError{Key: key, RetryAfter: left.Round(time.Millisecond)}
		}
	}
	res, err := n.apply(fsm.AcquireMulti{Keys: a.Keys, Holder: a.Holder, TTL: a.TTL, RequestID: a.RequestID})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, n.refusal(res.Err)
	}
	out := make([]Grant, len(res.Grants()))
	for i, k := range res.Grants() {
		out[i] = Grant{KeyState: k, Renewed: k.Index != k.Armed}
	}
	return out, nil
}
