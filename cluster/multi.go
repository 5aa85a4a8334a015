package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/metrics"
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
		if err := n.slotDelayRefusal(AcquireArgs{Key: key, Holder: a.Holder}); err != nil {
			return nil, err
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

// ReleaseMultiArgs is a release of a set of one holder's grants, all or
// none (fsm.ReleaseMulti).
type ReleaseMultiArgs struct {
	Keys      []fsm.ReleaseKey
	Holder    string
	RequestID string
}

// ReleaseMulti ends every grant of a.Keys in one log entry, or none: a set
// with a grant that is not the holder's live one is refused naming that
// key (an *fsm.KeyError wrapping the single release's refusal). It returns
// the grants ended, in the request's order. Waiters for the keys are woken
// as each key's end is applied (Ended) and ask for themselves: a set's
// release carries no handoff.
func (n *Node) ReleaseMulti(ctx context.Context, a ReleaseMultiArgs) ([]fsm.KeyState, error) {
	if _, err := n.requireReady(); err != nil {
		return nil, err
	}
	res, err := n.apply(fsm.ReleaseMulti{Keys: a.Keys, Holder: a.Holder, RequestID: a.RequestID})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return res.Grants(), nil
}

// RenewMulti renews the lease of every grant of keys (locks, permits or
// shared grants of holder) by a full TTL, without a log write, after this
// node proved it leads, as Renew does each. Every grant is checked before
// any is renewed, so a set naming a grant without a live lease of holder
// renews none and is refused naming that key (an *fsm.KeyError wrapping
// Renew's refusal). The grants armed before this leadership's takeover are
// touched first, in as few entries as hold them.
func (n *Node) RenewMulti(ctx context.Context, holder string, keys []fsm.ReleaseKey) ([]RenewedLease, error) {
	if err := n.confirmRenewal(ctx); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if !n.leases.heldBy(k.Key, holder, k.Token) && !n.leases.heldBy(permitLease(k.Key, k.Token), holder, k.Token) {
			return nil, &fsm.KeyError{Key: k.Key, Err: n.whyNoLease(k.Key, holder, k.Token)}
		}
	}
	out := make([]RenewedLease, len(keys))
	var touch []fsm.TouchKey
	var pending []int
	for i, k := range keys {
		st, deadline, r, _ := n.renewGrantLease(k.Key, holder, k.Token)
		switch r {
		case renewDone:
			out[i] = RenewedLease{Key: st, Deadline: deadline}
		case renewTouch:
			touch, pending = append(touch, fsm.TouchKey{Key: k.Key, Token: k.Token}), append(pending, i)
		default:
			// Its lease ran out since the check: the others stay
			// renewed, which only extends leases the holder has.
			return nil, &fsm.KeyError{Key: k.Key, Err: n.whyNoLease(k.Key, holder, k.Token)}
		}
	}
	if len(touch) > 0 {
		if err := n.touch(touch); err != nil {
			return nil, err
		}
		for _, i := range pending {
			k := keys[i]
			st, deadline, r, _ := n.renewGrantLease(k.Key, holder, k.Token)
			if r != renewDone {
				return nil, &fsm.KeyError{Key: k.Key, Err: n.whyNoLease(k.Key, holder, k.Token)}
			}
			out[i] = RenewedLease{Key: st, Deadline: deadline}
		}
	}
	metrics.Renewals.WithLabelValues("renew").Add(float64(len(out)))
	return out, nil
}
