package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/metrics"
)

// AcquireArgs is an acquire request. Wait > 0 blocks up to that long while
// another holder has the key.
type AcquireArgs struct {
	Key       string
	Holder    string
	TTL       time.Duration
	Wait      time.Duration
	RequestID string
	// LockDelay keeps the key from new holders this long after this grant
	// expires (not after a release); 0 is off.
	LockDelay time.Duration
	// Value is published with the grant (fsm.Acquire.Value).
	Value string
	// Limit, from 1 to fsm.MaxLimit, asks for one of the key's permits as
	// a semaphore of that many (fsm.Acquire.Limit); 0 is a lock.
	Limit int
	// Shared asks for a shared grant (fsm.Acquire.Shared): shared grants
	// coexist, an exclusive one (a lock) excludes them all.
	Shared bool
	// Owner is the authenticated client identity the acquire is counted
	// against (Limits.MaxKeysPerIdentity, MaxWaitersPerIdentity); empty
	// for an admin or without authentication.
	Owner string
}

// Grant is a successful acquire.
type Grant struct {
	fsm.KeyState
	// Renewed is true when the holder already had this grant.
	Renewed bool
	// presigned is the proof signed while the grant's entry committed, for
	// the grant the leader expected (GrantProof).
	presigned *presigned
}

// requireReady refuses work on a node that is not a ready leader.
func (n *Node) requireReady() (uint64, error) {
	if gen := n.ready.Load(); gen != 0 && n.IsLeader() {
		return gen, nil
	}
	if n.IsLeader() {
		return 0, ErrNotReady
	}
	if err := n.MemberErr(); err != nil {
		return 0, err
	}
	return 0, ErrNotLeader
}

// apply proposes a command and returns the FSM's result.
func (n *Node) apply(cmd fsm.Command) (*fsm.Result, error) { return n.applyWhile(cmd, nil) }

// applyWhile is apply that, while the entry commits, calls meanwhile (when
// not nil) with the current term, the one the entry was most likely
// proposed in.
func (n *Node) applyWhile(cmd fsm.Command, meanwhile func(term uint64)) (*fsm.Result, error) {
	defer metrics.ObserveApply(commandName(cmd), time.Now())
	r := n.r()
	f := r.Apply(fsm.Encode(cmd), n.cfg.ApplyTimeout)
	if meanwhile != nil {
		meanwhile(r.CurrentTerm())
	}
	return n.applied(f)
}

func commandName(c fsm.Command) string {
	switch c.(type) {
	case fsm.Acquire:
		return "acquire"
	case fsm.Release:
		return "release"
	case fsm.Expire:
		return "expire"
	}
	return "other"
}

// Acquire grants a key to a holder. A refusal of the FSM comes back as the
// error (errors.Is with fsm.ErrHeld and the others); an error of this package
// says whether the request may have been committed.
func (n *Node) Acquire(ctx context.Context, a AcquireArgs) (Grant, error) {
	if _, err := n.requireReady(); err != nil {
		return Grant{}, err
	}
	if err := n.checkLimits(a); err != nil {
		return Grant{}, err
	}
	if err := n.checkSpaceFor(a); err != nil {
		return Grant{}, err
	}
	if a.Limit > 0 || a.Shared {
		return n.acquirePermit(ctx, a)
	}
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
		// Waiters are served first come, first served: a newcomer that waits
		// does not overtake them, except the current holder renewing its own
		// grant. One that does not wait answers from the state as it is,
		// like any read: while the key is free for a moment (a lock-delay
		// running, a handoff refused), a refusal naming a holder would be
		// one that no order of the operations explains.
		mustQueue := !deadline.IsZero() && w == nil && n.waiters.waiting(a.Key) && !n.holds(a.Key, a.Holder)
		if !mustQueue && (w == nil || n.waiters.isHead(a.Key, w)) {
			g, err := n.tryAcquireUnlessHeld(ctx, a, !deadline.IsZero())
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
		if k, ok := n.fsm.Get(a.Key); !ok || k.State != fsm.Held {
			n.waiters.kick(a.Key) // freed before we joined: do not miss it
		}
		if err := n.await(ctx, w, deadline); err != nil {
			if h, handed := n.leaveLine(a.Key, &w); handed {
				return h.grant, h.err
			}
			if errors.Is(err, errWaitTimeout) {
				// The last word is the state as it is now, from a
				// linearizable read: the key may be free for a moment.
				return n.tryAcquireUnlessHeld(ctx, a, false)
			}
			return Grant{}, err
		}
		if h := n.hook().woken; h != nil {
			h(a.Key)
		}
	}
}

var errWaitTimeout = errors.New("wait timed out")

// errNoHandoff tells a waiter that left the line that the command which had
// claimed it did not free the key: it answers with its own refusal.
var errNoHandoff = errors.New("no handoff")

// attemptNext is what an acquire does after one attempt: answer, try again
// at once (a lock-delay it waited out), or wait in line.
type attemptNext int

const (
	attemptAnswer attemptNext = iota
	attemptAgain
	attemptWait
)

// settleAttempt judges one attempt (g, err) of an acquire of key with its
// deadline (zero: it does not wait), w its place in line if it has one. A
// lock-delay that ends before the deadline is waited out; a key held before
// the deadline means waiting; anything else is the answer. A refusal that
// ends the acquire first leaves the line: a release may already carry the
// acquire, and then that handoff's outcome is the answer, not the refusal.
func (n *Node) settleAttempt(ctx context.Context, key string, w **waiter, deadline time.Time, g Grant, err error) (Grant, error, attemptNext) {
	var lde *LockDelayError
	if errors.As(err, &lde) && !deadline.IsZero() && time.Now().Add(lde.RetryAfter).Before(deadline) {
		if err := sleepCtx(ctx, lde.RetryAfter); err != nil {
			if h, handed := n.leaveLine(key, w); handed {
				return h.grant, h.err, attemptAnswer
			}
			return Grant{}, err, attemptAnswer
		}
		return Grant{}, nil, attemptAgain
	}
	if errors.Is(err, fsm.ErrHeld) && !deadline.IsZero() && time.Now().Before(deadline) {
		return Grant{}, nil, attemptWait
	}
	if err != nil {
		if h, handed := n.leaveLine(key, w); handed {
			return h.grant, h.err, attemptAnswer
		}
	}
	return g, err, attemptAnswer
}

// leaveLine is giveUp for the waiter *w, if any, which it then forgets.
func (n *Node) leaveLine(key string, w **waiter) (handoffResult, bool) {
	if *w == nil {
		return handoffResult{}, false
	}
	h, handed := n.giveUp(key, *w)
	*w = nil
	return h, handed
}

// giveUp takes w out of the line. When a release or an expiry already
// carries w's acquire, the outcome of that command is w's answer: giveUp
// waits for it and reports true.
func (n *Node) giveUp(key string, w *waiter) (handoffResult, bool) {
	if !n.waiters.leave(key, w) {
		return handoffResult{}, false
	}
	h := <-w.handoff
	if errors.Is(h.err, errNoHandoff) {
		return handoffResult{}, false
	}
	return h, true
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// HeldError is fsm.HeldError with the time left on the holder's lease, as the
// leader sees it: a hint of when to try again. errors.As with *fsm.HeldError
// and errors.Is with fsm.ErrHeld work on it.
type HeldError struct {
	*fsm.HeldError
	RetryAfter time.Duration
}

// Unwrap returns the FSM's refusal.
func (e *HeldError) Unwrap() error { return e.HeldError }

func (n *Node) heldError(key string) error {
	k, _ := n.fsm.Get(key)
	return n.withRetryAfter(&fsm.HeldError{Key: key, Holder: k.Holder, Token: k.Token})
}

func (n *Node) withRetryAfter(he *fsm.HeldError) error {
	e := &HeldError{HeldError: he, RetryAfter: time.Second}
	if dl, ok := n.leases.live(he.Key, he.Token); ok {
		e.RetryAfter = time.Until(dl).Round(time.Millisecond)
	} else if dl, ok := n.leases.live(permitLease(he.Key, he.Token), he.Token); ok {
		e.RetryAfter = time.Until(dl).Round(time.Millisecond)
	}
	return e
}

func (n *Node) await(ctx context.Context, w *waiter, deadline time.Time) error {
	gen := n.ready.Load()
	if gen == 0 {
		return ErrNotLeader
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-w.wake:
	case h := <-w.handoff:
		w.handoff <- h // for the caller's loop to take
	case <-t.C:
		return errWaitTimeout
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stop:
		return ErrShutdown
	}
	if n.ready.Load() != gen {
		return ErrNotLeader
	}
	return nil
}

func (n *Node) holds(key, holder string) bool {
	k, ok := n.fsm.Get(key)
	return ok && k.State == fsm.Held && k.Holder == holder
}

// tryAcquireUnlessHeld refuses without a log entry when the key is held by
// another holder: the FSM would refuse that entry anyway, and under contention
// those doomed commits would double the log writes per handoff. A waiting
// acquire just queues on the leader's applied state (the release that frees
// the key wakes it); one that does not wait answers from a linearizable read,
// as a committed refusal would.
func (n *Node) tryAcquireUnlessHeld(ctx context.Context, a AcquireArgs, waiting bool) (Grant, error) {
	if n.heldByOther(a.Key, a.Holder) {
		if limit, _ := n.fsm.Permits(a.Key); limit != 0 {
			// A semaphore: the state machine answers limit_mismatch.
			return n.tryAcquire(a)
		}
		if waiting {
			return Grant{}, n.heldError(a.Key)
		}
		if err := n.linearizable(ctx); err != nil {
			return Grant{}, err
		}
		if n.heldByOther(a.Key, a.Holder) {
			return Grant{}, n.heldError(a.Key)
		}
	}
	return n.tryAcquire(a)
}

// heldByOther reports whether the applied state has key held by another
// holder, in which case an acquire of holder is refused.
func (n *Node) heldByOther(key, holder string) bool {
	k, ok := n.fsm.Get(key)
	return ok && k.State == fsm.Held && k.Holder != holder
}

func (n *Node) tryAcquire(a AcquireArgs) (Grant, error) {
	if left, ok := n.leases.lockDelayLeft(a.Key); ok && !n.holds(a.Key, a.Holder) {
		return Grant{}, &LockDelayError{Key: a.Key, RetryAfter: left.Round(time.Millisecond)}
	}
	if err := n.slotDelayRefusal(a); err != nil {
		return Grant{}, err
	}
	if h := n.hook().proposing; h != nil {
		h(a)
	}
	cmd := fsm.Acquire{Key: a.Key, Holder: a.Holder, TTL: a.TTL, RequestID: a.RequestID, LockDelay: a.LockDelay, Value: a.Value, Limit: a.Limit, Shared: a.Shared}
	var pre *presigned
	var meanwhile func(term uint64)
	if n.acquiring.Add(1) == 1 {
		meanwhile = func(term uint64) { pre = n.presign(a, term) }
	}
	res, err := n.applyWhile(cmd, meanwhile)
	n.acquiring.Add(-1)
	if err != nil {
		return Grant{}, err
	}
	if res.Err != nil {
		return Grant{}, n.refusal(res.Err)
	}
	return Grant{KeyState: res.Key, Renewed: res.Renewed, presigned: pre}, nil
}

// forceNewTerm moves the cluster to a new term so a key whose seq space is
// exhausted can be granted again: by handing leadership to another voter, or,
// on a single node, by restarting raft, which elects itself in a new term.
func (n *Node) forceNewTerm() {
	if !n.newTerm.CompareAndSwap(false, true) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.newTerm.Store(false)
		n.log.Warn("seq space of the current term exhausted; starting a new term")
		if n.Voters() > 1 {
			if err := n.wait(n.r().LeadershipTransfer()); err != nil {
				n.log.Error("leadership transfer failed", "error", err)
			}
			return
		}
		if err := n.restartRaft(); err != nil {
			n.log.Error("raft restart failed", "error", err)
		}
	}()
}

// Voters returns the number of voting members in the configuration.
func (n *Node) Voters() int {
	f := n.r().GetConfiguration()
	if n.wait(f) != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// restartRaft stops raft and starts it again on the same stores, with the FSM
// emptied so that the snapshot and log replay into it exactly as on a process
// restart.
func (n *Node) restartRaft() error {
	n.revoke()
	if err := n.shutdownRaft(); err != nil {
		return err
	}
	n.raftMu.Lock()
	close(n.raftDone)
	n.raftMu.Unlock()
	n.fsm.Reset()
	select {
	case <-n.stop:
		return ErrShutdown
	default:
	}
	return n.startRaft()
}

// ReleaseArgs are a release's arguments.
type ReleaseArgs struct {
	Key, Holder string
	// Token names the grant to end. A forced release may leave it zero to
	// end the key's current grant.
	Token fence.Token
	// Force lets an operator end the grant without being its holder.
	Force bool
	// RequestID makes the release safe to repeat from any client: applied
	// once, its repeat is answered with the grant it ended.
	RequestID string
}

// Release ends a holder's grant; force lets an operator end any current grant.
// When others wait for the key, the first of them gets it in the same commit.
func (n *Node) Release(ctx context.Context, a ReleaseArgs) (fsm.KeyState, error) {
	if _, err := n.requireReady(); err != nil {
		return fsm.KeyState{}, err
	}
	if a.Force && a.Token == 0 {
		// "The current grant", resolved once per request: a repeat of a
		// release already applied is answered with the grant it ended,
		// never resolved to the grant made since.
		if err := n.linearizable(ctx); err != nil {
			return fsm.KeyState{}, err
		}
		if tok, done := n.fsm.RecallRelease(a.Key, a.RequestID); done {
			return fsm.KeyState{Key: a.Key, Token: tok, State: fsm.Released}, nil
		}
		k, ok := n.fsm.Get(a.Key)
		if !ok {
			return fsm.KeyState{}, fsm.ErrUnknownKey
		}
		if _, ps := n.fsm.Permits(a.Key); len(ps) != 0 {
			return fsm.KeyState{}, fmt.Errorf("%w: a semaphore or shared key has several grants: name the grant's token", ErrBadRequest)
		}
		a.Token = k.Token
	}
	key := a.Key
	cmd := fsm.Release{Key: key, Holder: a.Holder, Token: a.Token, Force: a.Force, RequestID: a.RequestID}
	var next *waiter
	if n.handoffFits(key, a.Token) {
		next = n.claimNext(key)
	}
	if next != nil {
		cmd.Next = next.acquire()
		if h := n.hook().claimed; h != nil {
			h(key)
		}
	}
	res, err := n.apply(cmd)
	n.settleHandoff(key, next, res, err)
	if err != nil {
		return fsm.KeyState{}, err
	}
	return res.Key, res.Err
}

// claimNext claims the first waiter of key for a handoff, unless the key has
// a lock-delay in force.
func (n *Node) claimNext(key string) *waiter {
	if _, inForce := n.leases.lockDelayLeft(key); inForce {
		return nil
	}
	return n.waiters.claim(key)
}

func (w *waiter) acquire() *fsm.Acquire {
	return &fsm.Acquire{Key: w.args.Key, Holder: w.args.Holder, TTL: w.args.TTL, RequestID: w.args.RequestID, LockDelay: w.args.LockDelay, Value: w.args.Value, Limit: w.args.Limit, Shared: w.args.Shared}
}

// settleHandoff gives a claimed waiter the outcome of the command that
// carried its acquire, or returns it to the line if the key was not freed.
func (n *Node) settleHandoff(key string, w *waiter, res *fsm.Result, err error) {
	switch {
	case w == nil:
	case err != nil:
		// The entry may or may not commit: so may the waiter's grant.
		w.handoff <- handoffResult{err: err}
	case res.Next == nil:
		if !n.waiters.unclaim(key, w) {
			w.handoff <- handoffResult{err: errNoHandoff} // it left and waits for this
		}
	case res.Next.Err != nil:
		w.handoff <- handoffResult{err: n.refusal(res.Next.Err)}
	default:
		metrics.Handoffs.Inc()
		w.handoff <- handoffResult{grant: Grant{KeyState: res.Next.Key, Renewed: res.Next.Renewed}}
	}
}

// refusal adds the leader's hints to an FSM refusal.
func (n *Node) refusal(err error) error {
	var he *fsm.HeldError
	if errors.As(err, &he) {
		return n.withRetryAfter(he)
	}
	var sd *fsm.SlotDelayedError
	if errors.As(err, &sd) {
		return n.slotDelayError(sd.Key, sd.Tokens, 1)
	}
	if errors.Is(err, fsm.ErrSeqExhausted) {
		n.forceNewTerm()
	}
	return err
}

// Renew extends the lease of a live grant by a full TTL without a log write,
// after this node confirmed it still leads (renewal.go).
func (n *Node) Renew(ctx context.Context, key, holder string, tok fence.Token) (fsm.KeyState, time.Time, error) {
	if err := n.confirmRenewal(ctx); err != nil {
		return fsm.KeyState{}, time.Time{}, err
	}
	k, deadline, r, name := n.renewGrantLease(key, holder, tok)
	if r == renewTouch {
		if err := n.touch([]fsm.TouchKey{{Key: key, Token: tok}}); err != nil {
			return fsm.KeyState{}, time.Time{}, err
		}
		k, deadline, r = n.leases.renewLease(name, holder, tok)
		k.Key = key
	}
	if r != renewDone {
		return fsm.KeyState{}, time.Time{}, n.whyNoLease(key, holder, tok)
	}
	metrics.Renewals.WithLabelValues("renew").Inc()
	return k, deadline, nil
}

// renewGrantLease renews the lease of grant tok of key: a lock's lease,
// or else the permit's (or shared grant's) own; it returns the lease's
// table name with the outcome, for a renewal that must touch first.
func (n *Node) renewGrantLease(key, holder string, tok fence.Token) (fsm.KeyState, time.Time, renewal, string) {
	k, deadline, r := n.leases.renewLease(key, holder, tok)
	if r == renewRefused {
		return n.renewPermitLease(key, holder, tok)
	}
	return k, deadline, r, key
}

// whyNoLease explains a failed renewal from the applied state.
func (n *Node) whyNoLease(key, holder string, tok fence.Token) error {
	k, ok, _, permits := n.fsm.Lookup(key)
	for _, p := range permits {
		if p.Token == tok && p.Holder != holder {
			return fsm.ErrNotHolder
		}
		if p.Token == tok {
			return fsm.ErrExpired
		}
	}
	switch {
	case !ok:
		return fsm.ErrUnknownKey
	case k.Token != tok:
		return fsm.ErrStaleToken
	case k.Holder != holder:
		return fsm.ErrNotHolder
	case k.State == fsm.Released:
		return fmt.Errorf("%w: released", ErrNoLease)
	}
	return fsm.ErrExpired
}

// Keepalive renews every live lease of holder whose key may (nil: every
// key) lets it renew, without a log write: a key ACL that no longer gives
// the identity the lock right on a key lets that lease run out.
func (n *Node) Keepalive(ctx context.Context, holder string, may func(key string) bool) ([]RenewedLease, error) {
	if err := n.confirmRenewal(ctx); err != nil {
		return nil, err
	}
	return n.renewHolder(holder, may)
}

// renewHolder renews a holder's live leases once this node proved it leads
// (confirmRenewal): the part of a keepalive that Keepalive and
// KeepaliveBatch share. The leases armed before this leadership's takeover
// are touched first, in as few entries as hold them.
func (n *Node) renewHolder(holder string, may func(key string) bool) ([]RenewedLease, error) {
	ls, touch := n.leases.renewHolder(holder, may)
	if len(touch) > 0 {
		if err := n.touch(touch); err != nil {
			return nil, err
		}
		ls, _ = n.leases.renewHolder(holder, may)
	}
	metrics.Renewals.WithLabelValues("keepalive").Add(float64(len(ls)))
	return ls, nil
}

// touch renews grants through Touch entries of at most fsm.MaxTouchBatch
// keys: the first renewal of a grant after an election (leases.renewLease).
// Applied, each renewed grant is re-armed in the lease table for a full TTL
// (Node.Touched).
func (n *Node) touch(keys []fsm.TouchKey) error {
	for len(keys) > 0 {
		batch := keys[:min(len(keys), fsm.MaxTouchBatch)]
		keys = keys[len(batch):]
		res, err := n.apply(fsm.Touch{Keys: batch})
		if err != nil {
			return err
		}
		metrics.LeaseTouches.Add(float64(res.Touched))
	}
	return nil
}

// confirmReady checks that this node is a ready leader and confirms with a
// quorum that it still leads (shared with other requests waiting now).
func (n *Node) confirmReady(ctx context.Context) error {
	gen, err := n.requireReady()
	if err != nil {
		return err
	}
	if err := n.confirm.confirm(ctx); err != nil {
		return err
	}
	if n.ready.Load() != gen {
		return ErrNotLeader
	}
	return nil
}

// linearizable makes the local state safe to read: it takes the commit index,
// confirms leadership, then waits until the FSM applied that index.
func (n *Node) linearizable(ctx context.Context) error {
	if _, err := n.requireReady(); err != nil {
		return err
	}
	idx := n.r().CommitIndex()
	if err := n.confirmReady(ctx); err != nil {
		return err
	}
	return n.fsm.WaitApplied(ctx, idx)
}

// Reason says why a verify refused, or "ok".
type Reason string

// Verify reasons. A verify allows only when it proved the token is the key's
// current grant with a live lease; every other answer is a refusal.
const (
	ReasonOK             Reason = "ok"
	ReasonSuperseded     Reason = "superseded"
	ReasonReleased       Reason = "released"
	ReasonExpired        Reason = "expired"
	ReasonUnknownKey     Reason = "unknown_key"
	ReasonNotGrantedYet  Reason = "not_granted_yet"
	ReasonHolderMismatch Reason = "holder_mismatch"
	ReasonMalformed      Reason = "malformed"
	ReasonUnavailable    Reason = "unavailable"
)

// Verdict is the answer of a verify.
type Verdict struct {
	Allow  bool
	Reason Reason
	// Current is the key's current grant when the key is known.
	Current *fsm.KeyState
	// Deadline is the lease deadline of an allowed grant.
	Deadline time.Time
}

// Verify answers, linearizably, whether tok is the current live grant of key
// (and of holder, when given). It fails closed: an error is always returned
// with a refusing verdict whose reason is unavailable.
func (n *Node) Verify(ctx context.Context, key string, tok fence.Token, holder string) (Verdict, error) {
	var v Verdict
	if err := n.verifyRead(ctx, func() { v = n.judge(key, tok, holder) }); err != nil {
		v = Verdict{Reason: ReasonUnavailable}
		countVerdict(v)
		return v, err
	}
	countVerdict(v)
	return v, nil
}

// judge is the verdict on tok for key (and holder, when given) from the
// applied state. It is sound only inside verifyRead, for a request that
// arrived before: Verify and VerifyBatch both judge through it, so a check
// gets the same verdict either way.
func (n *Node) judge(key string, tok fence.Token, holder string) Verdict {
	k, ok, limit, permits := n.fsm.Lookup(key)
	if !ok {
		return Verdict{Reason: ReasonUnknownKey}
	}
	if limit != 0 || len(permits) != 0 {
		return n.judgePermit(k, permits, tok, holder)
	}
	v := Verdict{Current: &k}
	switch {
	case tok > k.Token:
		v.Reason = ReasonNotGrantedYet
	case tok < k.Token:
		v.Reason = ReasonSuperseded
	case k.State == fsm.Released:
		v.Reason = ReasonReleased
	case k.State == fsm.Expired:
		v.Reason = ReasonExpired
	case holder != "" && holder != k.Holder:
		v.Reason = ReasonHolderMismatch
	default:
		deadline, live := n.leases.live(key, tok)
		if !live {
			v.Reason = ReasonExpired
			break
		}
		v.Allow, v.Reason, v.Deadline = true, ReasonOK, deadline
	}
	return v
}

// countVerdict counts a verdict in the verify metrics.
func countVerdict(v Verdict) { metrics.CountVerdict(v.Allow, string(v.Reason)) }

// KeyInfo is a key's state with its lease deadline when held.
type KeyInfo struct {
	fsm.KeyState
	Deadline time.Time
	// DelayLeft is what is left of a lock-delay in force after the key's
	// grant expired; 0 when none is.
	DelayLeft time.Duration
	// Limit and Permits are a semaphore key's limit and live permits (Key
	// only; KeyState is then the key's last grant); Shared says the live
	// grants are shared ones, Live how many are live (Key and Keys both: a
	// listing has no room for every permit of every key); Waiters the
	// holders waiting for the key on this leader, first come first.
	Limit   int
	Shared  bool
	Live    int
	Permits []PermitInfo
	Waiters []string
	// Delayed are the slots of the key's permits or shared grants that
	// expired with a lock-delay the state still records (Key only), each
	// with what is left of it on this leader's clock (0: over).
	Delayed []DelayedSlot
}

// DelayedSlot is a delayed slot of a key (fsm.FSM.SlotDelays) and what is
// left of its lock-delay.
type DelayedSlot struct {
	fsm.KeyState
	Left time.Duration
}

// Key reads one key linearizably.
func (n *Node) Key(ctx context.Context, key string) (KeyInfo, bool, error) {
	if err := n.linearizable(ctx); err != nil {
		return KeyInfo{}, false, err
	}
	k, ok := n.fsm.Get(key)
	if !ok {
		return KeyInfo{}, false, nil
	}
	ki := n.info(k)
	ki.Limit, ki.Permits = n.permitInfos(key)
	ki.Shared = len(ki.Permits) > 0 && ki.Permits[0].Shared
	ki.Live = len(ki.Permits)
	for _, s := range n.fsm.SlotDelays(key) {
		left, _ := n.leases.slotLeft(key, s.Token)
		ki.Delayed = append(ki.Delayed, DelayedSlot{KeyState: s, Left: left})
	}
	return ki, true, nil
}

// Keys reads a page of keys linearizably, in name order (fsm.Page), and
// says whether more follow it. A key with live permits or shared grants
// carries their shape (Limit, Shared, Live), not the grants themselves.
func (n *Node) Keys(ctx context.Context, q fsm.PageQuery) ([]KeyInfo, bool, error) {
	if err := n.linearizable(ctx); err != nil {
		return nil, false, err
	}
	ks, more := n.fsm.Page(q)
	out := make([]KeyInfo, len(ks))
	for i, k := range ks {
		out[i] = n.info(k)
		out[i].Limit, out[i].Shared, out[i].Live = n.fsm.Shape(k.Key)
	}
	return out, more, nil
}

func (n *Node) info(k fsm.KeyState) KeyInfo {
	ki := KeyInfo{KeyState: k, Waiters: n.waiters.holders(k.Key)}
	if k.State == fsm.Held {
		ki.Deadline, _ = n.leases.live(k.Key, k.Token)
	}
	if left, ok := n.leases.lockDelayLeft(k.Key); ok {
		ki.DelayLeft = left
	}
	return ki
}
