package cluster

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// A semaphore key has several live grants (permits), each with its own
// lease. The lease table is keyed by name, one lease a name; a permit's
// lease goes under the name of its key, a NUL byte and its token in
// decimal (permitLease). No key contains a NUL (the API refuses control
// characters), so the name cannot be a key's, and the table needs nothing
// of its own for permits: re-arming after an election, the touch before a
// permit's first renewal, the expiry pipeline and the per-holder counts
// all work on them unchanged. The expiry of a permit names its key and
// token (leases.takeDue cuts the name back to the key); the state machine
// finds the permit by its token.

// permitLease returns the lease-table name of the permit tok of key.
func permitLease(key string, tok fence.Token) string {
	return key + "\x00" + strconv.FormatUint(uint64(tok), 10)
}

// grantKey returns the key a lease-table name belongs to: the name itself
// for a lock, the part before the NUL for a permit.
func grantKey(name string) string {
	if i := strings.IndexByte(name, 0); i >= 0 {
		return name[:i]
	}
	return name
}

// leaseOf returns k with its key replaced by its lease-table name.
func leaseOf(k fsm.KeyState) fsm.KeyState {
	if k.Permit() {
		k.Key = permitLease(k.Key, k.Token)
	}
	return k
}

// walkLeases walks every live grant as the lease table names it: locks
// under their key, permits under permitLease.
func (n *Node) walkLeases(begin func(n int), fn func(fsm.KeyState)) {
	n.fsm.WalkGrants(begin, func(k fsm.KeyState) { fn(leaseOf(k)) })
}

// permitEnded tells the key's reclamation of a permit's end once the key
// has no live permit left (its last grant, not the permit, is what a
// Reclaim names).
func (n *Node) permitEnded(key string) {
	if _, ps := n.fsm.Permits(key); len(ps) != 0 {
		return
	}
	if last, ok := n.fsm.Get(key); ok && last.State != fsm.Held {
		n.reclaim.ended(last)
	}
}

// acquirePermit is Acquire for an acquire with a limit: one of the key's
// permits. Waiters queue in the same line as a lock's, first come, first
// served: a newcomer that waits queues behind anyone waiting (unless it
// holds a permit already: its acquire is a renewal), and as permits free
// up the head of the line takes one, leaves, and wakes the next.
func (n *Node) acquirePermit(ctx context.Context, a AcquireArgs) (Grant, error) {
	var deadline time.Time
	if a.Wait > 0 {
		deadline = time.Now().Add(a.Wait)
	}
	var w *waiter
	defer func() {
		if w != nil {
			n.waiters.leave(a.Key, w)
		}
	}()
	for {
		if w != nil {
			select {
			case h := <-w.handoff:
				return h.grant, h.err
			default:
			}
		}
		queued := w == nil && n.waiters.waiting(a.Key) && !n.hasPermit(a.Key, a.Holder)
		if queued && a.Shared && deadline.IsZero() {
			// No starvation: once anyone waits (an exclusive acquire
			// behind the readers), a new shared acquire goes behind it,
			// and one that does not wait is refused.
			return Grant{}, n.heldError(a.Key)
		}
		mustQueue := !deadline.IsZero() && queued
		if !mustQueue && (w == nil || n.waiters.isHead(a.Key, w)) {
			g, err := n.tryPermit(ctx, a, !deadline.IsZero())
			switch g, err, next := n.settleAttempt(ctx, a.Key, &w, deadline, g, err); next {
			case attemptAnswer:
				return g, err
			case attemptAgain:
				continue
			}
		}
		if w == nil {
			w = n.waiters.join(a)
		}
		if !n.permitsFull(a.Key) {
			n.waiters.kick(a.Key) // freed before we joined: do not miss it
		}
		if err := n.await(ctx, w, deadline); err != nil {
			if h, handed := n.leaveLine(a.Key, &w); handed {
				return h.grant, h.err
			}
			if errors.Is(err, errWaitTimeout) {
				return n.tryPermit(ctx, a, false)
			}
			return Grant{}, err
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hasPermit reports whether holder has a live permit of key.
func (n *Node) hasPermit(key, holder string) bool {
	_, ps := n.fsm.Permits(key)
	for _, p := range ps {
		if p.Holder == holder {
			return true
		}
	}
	return false
}

// permitsFull reports whether key is held: every permit of a semaphore
// taken, shared grants live, or held as a lock.
func (n *Node) permitsFull(key string) bool {
	limit, ps := n.fsm.Permits(key)
	if len(ps) == 0 {
		k, ok := n.fsm.Get(key)
		return ok && k.State == fsm.Held
	}
	return limit == 0 || len(ps) >= limit
}

// handoffFits reports whether the end of grant tok of key may carry the
// first waiter's acquire in the same entry: when it frees the key for
// anyone (a lock's grant; a shared grant only when it is the key's last)
// or a permit for the next (a semaphore's), and the state records no
// delayed slot of the key. Otherwise the waiter is woken by the end and
// asks for itself, where the delayed slots are counted (slotDelayRefusal).
func (n *Node) handoffFits(key string, tok fence.Token) bool {
	if len(n.fsm.SlotDelays(key)) > 0 {
		return false
	}
	limit, ps := n.fsm.Permits(key)
	return limit != 0 || len(ps) == 0 || len(ps) == 1 && ps[0].Token == tok
}

// slotDelayRefusal returns the refusal the key's delayed slots give a's
// acquire, or nil, by the state machine's own rule (fsm's slotRefusal),
// without a log entry. An exclusive acquire waits for every one of them:
// a reader or a permit holder whose lease expired may still be at work. A
// permit or a shared acquire counts them against the key's capacity,
// beside the live grants, unless its holder has a live grant of the key
// already (a renewal); when the live grants alone fill it, the state
// machine answers held.
func (n *Node) slotDelayRefusal(a AcquireArgs) error {
	slots := n.fsm.SlotDelays(a.Key)
	if len(slots) == 0 {
		return nil
	}
	toks := make([]fence.Token, len(slots))
	for i, s := range slots {
		toks[i] = s.Token
	}
	if a.Limit == 0 && !a.Shared {
		if n.holds(a.Key, a.Holder) {
			return nil
		}
		return n.slotDelayError(a.Key, toks, len(toks))
	}
	_, ps := n.fsm.Permits(a.Key)
	capacity := a.Limit
	if a.Shared {
		capacity = fsm.MaxLimit
	}
	over := len(ps) + len(toks) - capacity // slots that must free up first, less one
	if over < 0 || len(ps) >= capacity || n.hasPermit(a.Key, a.Holder) {
		return nil
	}
	return n.slotDelayError(a.Key, toks, over+1)
}

// delayEndWait is how long a refused acquire is told to wait for a delayed
// slot whose delay is over on this leader but whose end is not committed.
const delayEndWait = 20 * time.Millisecond

// slotDelayError is the refusal of an acquire of key that must wait until
// need of the delayed slots toks are free: retry after the need-th of
// their delays to end on this leader's clock. A slot whose delay this
// leader no longer keeps while the state still records it had its end
// proposed and not committed (the entry was lost): it is proposed again,
// or the slot would stay taken until the next leader.
func (n *Node) slotDelayError(key string, toks []fence.Token, need int) error {
	lefts := make([]time.Duration, 0, len(toks))
	for _, tok := range toks {
		left, kept := n.leases.slotLeft(key, tok)
		if !kept && n.leases.reproposeDue(key, tok) {
			n.proposeDelayEnd(n.ready.Load(), fsm.DelayEnd{Key: key, Token: tok})
		}
		lefts = append(lefts, max(left, delayEndWait))
	}
	slices.Sort(lefts)
	return &LockDelayError{Key: key, RetryAfter: lefts[min(max(need, 1), len(lefts))-1].Round(time.Millisecond)}
}

// fullFor returns the refusal the applied state gives a's acquire without
// a log entry (every permit taken by others), or nil when it must be
// proposed. A key of another shape is proposed: the state machine answers
// limit_mismatch.
func (n *Node) fullFor(a AcquireArgs) error {
	limit, ps := n.fsm.Permits(a.Key)
	if a.Shared && len(ps) == 0 {
		if k, ok := n.fsm.Get(a.Key); ok && k.State == fsm.Held {
			return n.heldError(a.Key) // an exclusive grant is live
		}
		return nil
	}
	if limit != a.Limit || len(ps) < max(limit, fsm.MaxLimit*boolInt(a.Shared)) {
		return nil
	}
	for _, p := range ps {
		if p.Holder == a.Holder {
			return nil
		}
	}
	return n.withRetryAfter(&fsm.HeldError{Key: a.Key, Holder: ps[0].Holder, Token: ps[0].Token})
}

// tryPermit is tryAcquireUnlessHeld for a permit: refused without a log
// entry while every permit is taken (from the applied state for a waiter,
// after a linearizable read otherwise).
func (n *Node) tryPermit(ctx context.Context, a AcquireArgs, waiting bool) (Grant, error) {
	if err := n.fullFor(a); err != nil {
		if waiting {
			return Grant{}, err
		}
		if err := n.linearizable(ctx); err != nil {
			return Grant{}, err
		}
		if err := n.fullFor(a); err != nil {
			return Grant{}, err
		}
	}
	return n.tryAcquire(a)
}

// renewPermitLease is Renew's fallback for a token that has no lock lease
// of key: the permit's own lease.
func (n *Node) renewPermitLease(key, holder string, tok fence.Token) (fsm.KeyState, time.Time, renewal, string) {
	name := permitLease(key, tok)
	k, deadline, r := n.leases.renewLease(name, holder, tok)
	k.Key = key
	return k, deadline, r, name
}

// judgePermit is judge for a key with live permits: tok is allowed when it
// is one of them (of holder, when given) with a live lease. A token that
// is no live permit is not granted yet (above the key's last grant), or
// ended: released or expired when it was the key's last grant, superseded
// otherwise (a later grant of the key exists and it is not live).
func (n *Node) judgePermit(last fsm.KeyState, ps []fsm.KeyState, tok fence.Token, holder string) Verdict {
	v := Verdict{Current: &last}
	for i := range ps {
		p := ps[i]
		if p.Token != tok {
			continue
		}
		v.Current = &p
		if holder != "" && holder != p.Holder {
			v.Reason = ReasonHolderMismatch
			return v
		}
		deadline, live := n.leases.live(permitLease(p.Key, tok), tok)
		if !live {
			v.Reason = ReasonExpired
			return v
		}
		v.Allow, v.Reason, v.Deadline = true, ReasonOK, deadline
		return v
	}
	switch {
	case tok > last.Token:
		v.Reason = ReasonNotGrantedYet
	case tok == last.Token && last.State == fsm.Released:
		v.Reason = ReasonReleased
	case tok == last.Token && last.State == fsm.Expired:
		v.Reason = ReasonExpired
	default:
		v.Reason = ReasonSuperseded
	}
	return v
}

// PermitInfo is a live permit with its lease deadline.
type PermitInfo struct {
	fsm.KeyState
	Deadline time.Time
}

// permitInfos returns the live permits of key with their deadlines, and
// its limit (0: not a semaphore now).
func (n *Node) permitInfos(key string) (int, []PermitInfo) {
	limit, ps := n.fsm.Permits(key)
	if len(ps) == 0 {
		return 0, nil
	}
	out := make([]PermitInfo, len(ps))
	for i, p := range ps {
		out[i].KeyState = p
		out[i].Deadline, _ = n.leases.live(permitLease(key, p.Token), p.Token)
	}
	return limit, out
}
