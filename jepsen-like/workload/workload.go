// Package workload drives fenced like its users would, and records it: clients
// contend for a few keys (acquire with a short TTL, renew, verify their own
// token and others' stale ones, release or walk away), and, while they hold a
// key, read and write the harness's fenced resource with their token.
package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/jepsen-like/history"
	"github.com/fenced/fenced/jepsen-like/resource"
)

// Broken modes: positive controls that must make a checker fail.
const (
	// BrokenResourceNoCheck: the resource admits any token.
	BrokenResourceNoCheck = "resource-no-check"
	// BrokenTokenReset: after a node restart, the tokens the harness records
	// restart at 1, as a node that forgot its high-water mark would hand out.
	BrokenTokenReset = "token-reset"
	// BrokenStaleVerify: some verifies are answered from a cache of earlier
	// verdicts instead of the cluster, like a verify served from a stale
	// follower.
	BrokenStaleVerify = "stale-verify"
	// BrokenStaleRenew: renewals the cluster refused because the grant is
	// over are recorded as acknowledged, like renewals a deposed leader
	// answered without showing that it still leads.
	BrokenStaleRenew = "stale-renew"
)

// BrokenModes lists the positive controls.
var BrokenModes = []string{BrokenResourceNoCheck, BrokenResourceSkipProof, BrokenTokenReset, BrokenStaleVerify, BrokenStaleRenew, BrokenNoAttemptDeadline, BrokenForceReleaseLookup, BrokenReclaimNoEpoch, BrokenLeaseRearmFull,
	BrokenSemaphoreOvercommit, BrokenRWWriterShared, BrokenMultiSequential}

// BrokenLeaseRearmFull: the cluster runs with the chaos build's
// --unsafe-lease-rearm-full: every new leader re-arms every lease for a full
// TTL, so under the flap-leaders nemesis a holder that stopped renewing
// keeps its key for as long as the leader keeps changing, and lease-bound
// must fail.
const BrokenLeaseRearmFull = "lease-rearm-full"

// Config configures the workload.
type Config struct {
	// Endpoints are the nodes' HTTP addresses.
	Endpoints []string
	// Clients is the number of concurrent clients; client i works on key
	// i mod Keys, so several clients contend for each key.
	Clients int
	Keys    int
	// TTL is the lease of every grant.
	TTL time.Duration
	// OpTimeout bounds one operation, retries included; AttemptTimeout is
	// the API client's deadline of one attempt on one node (its default
	// when zero), so a paused node does not hold a client for the whole
	// operation.
	OpTimeout      time.Duration
	AttemptTimeout time.Duration
	// Broken is a positive-control mode, or "".
	Broken string
	Seed   int64
	Log    hclog.Logger
	// HolderPrefix is put before every holder name ("alice/" when the
	// clients act as the client identity alice, whose holders must be
	// named after it).
	HolderPrefix string
}

// KeyName returns the name of the i-th key.
func KeyName(i int) string { return fmt.Sprintf("jepsen/k%d", i+1) }

// Workload runs the clients.
type Workload struct {
	cfg Config
	rec *history.Recorder
	res *resource.Resource

	wg     sync.WaitGroup
	cancel context.CancelFunc

	mu sync.Mutex
	// seen holds every token granted per key, for verifies of others'
	// (mostly stale) tokens.
	seen map[string][]fence.Token
	// proofs holds the latest proof granted for each key, which the
	// hostile client replays with made-up tokens (hostile.go).
	proofs map[string]grantProof
	// pauses are client-pause requests waiting for a holder to take them.
	pauses chan *PauseRequest
	// restarted is set by the token-reset control once a node restarted.
	restarted bool
	resetSeq  map[string]uint64
	// cache is the stale-verify control's store of earlier allow verdicts.
	cache  map[cacheKey]client.VerifyResponse
	broken int
	// first is the endpoint every client lists first ("" for their own
	// orders); orderGen counts its changes (see ListFirst).
	first    string
	orderGen uint64
	// op is the operator who force-releases grants while asked to.
	op *operator
	// shared is the API client through which the odd-numbered clients
	// verify, all of them, so that verifies made at once are coalesced into
	// batch requests (POST /v1/verify/batch) as an application's are; the
	// even-numbered ones verify through their own, one request each.
	sharedMu sync.Mutex
	shared   *worker
}

// sharedAPI returns the API client of the shared verifies, rebuilt when the
// endpoint order changes (see worker.cl).
func (w *Workload) sharedAPI() *client.Client {
	w.sharedMu.Lock()
	defer w.sharedMu.Unlock()
	if w.shared == nil {
		w.shared = &worker{w: w, eps: append([]string(nil), w.cfg.Endpoints...)}
	}
	return w.shared.cl()
}

type cacheKey struct {
	key string
	tok fence.Token
}

// New returns a workload that records into rec and uses res as the fenced
// resource.
func New(cfg Config, rec *history.Recorder, res *resource.Resource) *Workload {
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	return &Workload{cfg: cfg, rec: rec, res: res, seen: map[string][]fence.Token{}, proofs: map[string]grantProof{}, pauses: make(chan *PauseRequest, 1),
		resetSeq: map[string]uint64{}, cache: map[cacheKey]client.VerifyResponse{}}
}

// Start launches the clients; they run until Stop.
func (w *Workload) Start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(ctx)
	w.startOperator(ctx)
	w.startHostile(ctx)
	for i := 0; i < w.cfg.Clients; i++ {
		c := w.newClient(i)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			c.run(ctx)
		}()
	}
}

// Stop ends the clients and waits for them: each finishes its operation in
// flight (bounded by the operation timeout) and releases what it holds.
func (w *Workload) Stop() {
	if w.cancel != nil {
		w.cancel()
	}
	w.wg.Wait()
}

// NodeRestarted tells the token-reset control that a node restarted.
func (w *Workload) NodeRestarted() {
	w.mu.Lock()
	w.restarted = true
	w.mu.Unlock()
}

// BrokenAnswers returns how many answers the positive control forged.
func (w *Workload) BrokenAnswers() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.broken
}

// PauseRequest asks one holder to sleep past its lease and then write to the
// resource with its stale token: Kleppmann's scenario.
type PauseRequest struct {
	// Sleep is how long the holder sleeps after its grant.
	Sleep time.Duration
	// done is closed when the scenario is over; Report says what happened.
	done   chan struct{}
	Report PauseReport
}

// PauseReport is what a client pause did.
type PauseReport struct {
	Client         int
	Key            string
	Token          fence.Token
	Start, End     int64
	HigherAdmitted fence.Token
	Accepted       bool
}

// RequestPause asks the next client that acquires a key to play the paused
// holder, and waits until it has written (or ctx ends).
func (w *Workload) RequestPause(ctx context.Context, sleep time.Duration) (PauseReport, error) {
	req := &PauseRequest{Sleep: sleep, done: make(chan struct{})}
	select {
	case w.pauses <- req:
	case <-ctx.Done():
		return PauseReport{}, ctx.Err()
	}
	select {
	case <-req.done:
		return req.Report, nil
	case <-ctx.Done():
		return PauseReport{}, ctx.Err()
	}
}

type worker struct {
	w      *Workload
	id     int
	key    string
	holder string
	rng    *rand.Rand
	api    *client.Client
	value  int
	// eps is the client's own endpoint order; gen the order generation
	// its api was built for.
	eps []string
	gen uint64
	// waits: this client's acquires wait for the key. A key's clients all
	// wait or none do: fenced refuses an acquire that does not wait, while
	// others queue for a key that is free for a moment, as "held" by the
	// key's previous holder, which no linearization explains.
	waits bool
	// raw is the plain HTTP client of the raw renewals (rawHTTP), and
	// rawFrom the index in eps of the node that answered its last one.
	raw     *http.Client
	rawFrom int
	// proof is the proof of the client's current grant, which its
	// accesses to a resource that requires proofs carry.
	proof string
}

func (w *Workload) newClient(i int) *worker {
	rng := rand.New(rand.NewSource(w.cfg.Seed*1000 + int64(i)))
	eps := shuffled(rng, w.cfg.Endpoints)
	c := &worker{w: w, id: i, key: KeyName(i % w.cfg.Keys), holder: fmt.Sprintf("%sc%d", w.cfg.HolderPrefix, i), rng: rng, eps: eps,
		waits: (i%w.cfg.Keys)%2 == 0}
	c.cl()
	return c
}

func (c *worker) think() {
	time.Sleep(time.Duration(10+c.rng.Intn(40)) * time.Millisecond) // pacing, not synchronisation
}

func (c *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		tok, ok := c.acquire(ctx)
		if !ok {
			if c.rng.Intn(2) == 0 {
				c.verifyOther(ctx)
			}
			time.Sleep(time.Duration(50+c.rng.Intn(100)) * time.Millisecond) // backoff while the key is held
			continue
		}
		c.hold(ctx, tok)
	}
}

// hold uses a grant: a few verifies, renewals and resource accesses, then a
// release, or (sometimes) walking away so the lease expires.
func (c *worker) hold(ctx context.Context, tok fence.Token) {
	select {
	case req := <-c.w.pauses:
		c.pause(ctx, tok, req)
		return
	default:
	}
	steps := 1 + c.rng.Intn(5)
	for i := 0; i < steps && ctx.Err() == nil; i++ {
		c.think()
		var lost bool
		switch r := c.rng.Intn(10); {
		case r < 3:
			c.verify(ctx, tok, c.holder, true)
		case r < 4:
			c.verifyOther(ctx)
		case r < 5:
			lost = !c.renew(ctx, tok)
		case r < 6:
			c.keepalive(ctx)
		case r < 9:
			lost = !c.write(tok)
		default:
			lost = !c.read(tok)
		}
		if lost {
			return
		}
	}
	if c.rng.Intn(8) == 0 && ctx.Err() == nil {
		return // walk away: the lease expires on the leader's clock
	}
	c.release(context.WithoutCancel(ctx), tok)
}

// pause is Kleppmann's scenario: the holder freezes past its lease, a newer
// holder writes, then the frozen one wakes up and writes with its token.
func (c *worker) pause(ctx context.Context, tok fence.Token, req *PauseRequest) {
	defer close(req.done)
	req.Report = PauseReport{Client: c.id, Key: c.key, Token: tok, Start: c.w.rec.Now()}
	c.w.cfg.Log.Info("client pause: holder freezes past its lease", "client", c.id, "key", c.key, "token", tok, "sleep", req.Sleep)
	select {
	case <-time.After(req.Sleep): // the pause is the fault
	case <-ctx.Done():
	}
	// Give the newer holder a chance to write first, so the stale write has
	// something to be refused by; bounded, and observed, not assumed.
	_ = testutil.Poll(10*time.Second, func() error {
		if c.w.res.High(c.key) > tok || ctx.Err() != nil {
			return nil
		}
		return errors.New("no newer holder wrote yet")
	})
	req.Report.HigherAdmitted = c.w.res.High(c.key)
	req.Report.Accepted = c.write(tok)
	c.verify(ctx, tok, c.holder, true)
	c.renew(ctx, tok) // refused: the lease ended while the holder slept
	req.Report.End = c.w.rec.Now()
}

func (c *worker) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	// Operations in flight when the run stops still finish (bounded), so
	// their outcome is known rather than cut short.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.w.cfg.OpTimeout)
	return withOp(octx), cancel
}

// classify turns a client error into an outcome and a wire code. A definite
// answer of the server is a failure, unless an earlier attempt of the same
// write was ambiguous (the answer may be to a retry after the write took
// effect); anything else after a write was sent is unknown.
func classify(err error, write bool, a *attempts) (history.Outcome, string) {
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr):
		if apiErr.Code == "outcome_unknown" || apiErr.Code == "grant_ended" || (write && a != nil && a.ambiguous.Load()) {
			return history.Info, apiErr.Code
		}
		return history.Fail, apiErr.Code
	case errors.Is(err, client.ErrUnknownOutcome):
		return history.Info, "outcome_unknown"
	case errors.Is(err, client.ErrUnavailable):
		// The client saw no server take the request: nothing was done.
		return history.Fail, "unavailable"
	}
	if write {
		return history.Info, "error"
	}
	return history.Fail, "error"
}

func (c *worker) acquire(ctx context.Context) (fence.Token, bool) {
	// The clients of every other key wait for it (well within one attempt),
	// so releases and expiries hand it over to a waiter in their own commit.
	var wait time.Duration
	if c.waits {
		wait = min(time.Duration(200+c.rng.Intn(600))*time.Millisecond, c.w.cfg.AttemptTimeout/2)
	}
	req := client.AcquireRequest{Key: c.key, Holder: c.holder, TTL: c.w.cfg.TTL.String()}
	if wait > 0 {
		req.Wait = wait.String()
	}
	op := c.w.rec.Invoke(history.Op{Client: c.id, Kind: history.Acquire, Key: c.key, Holder: c.holder, Wait: wait})
	octx, cancel := c.opCtx(ctx)
	octx, att := withAttempts(octx)
	g, err := c.cl().Acquire(octx, req)
	cancel()
	var recorded fence.Token
	if err == nil {
		recorded = c.w.tokenForHistory(c.key, g.Token)
	}
	c.w.rec.Complete(op, func(o *history.Op) {
		if err != nil {
			o.Outcome, o.Code = classify(err, true, att)
			o.Error = err.Error()
			var apiErr *client.Error
			if errors.As(err, &apiErr) {
				o.HeldBy = apiErr.HeldBy
			}
			return
		}
		o.Outcome, o.Granted, o.Renewed = history.OK, recorded, g.Renewed
		if recorded != g.Token {
			o.Broken = BrokenTokenReset
		}
	})
	if err != nil {
		return 0, false
	}
	c.proof = g.Proof
	c.w.mu.Lock()
	c.w.seen[c.key] = append(c.w.seen[c.key], g.Token)
	if g.Proof != "" {
		c.w.proofs[c.key] = grantProof{proof: g.Proof, token: g.Token}
	}
	c.w.mu.Unlock()
	return g.Token, true
}

// grantGone reports whether a refusal code says the grant itself ended.
func grantGone(code string) bool {
	switch code {
	case "stale_token", "expired", "not_holder", "no_lease", "unknown_key", "grant_ended":
		return true
	}
	return false
}

// tokenForHistory is the identity, except in the token-reset control, where
// after a node restart the recorded tokens count again from 1.
func (w *Workload) tokenForHistory(key string, tok fence.Token) fence.Token {
	if w.cfg.Broken != BrokenTokenReset {
		return tok
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.restarted {
		return tok
	}
	w.resetSeq[key]++
	w.broken++
	t, _ := fence.Compose(0, w.resetSeq[key])
	return t
}

func (c *worker) renew(ctx context.Context, tok fence.Token) bool {
	op := c.w.rec.Invoke(history.Op{Client: c.id, Kind: history.Renew, Key: c.key, Holder: c.holder, Token: tok})
	octx, cancel := c.opCtx(ctx)
	var err error
	if c.id%3 == 2 {
		// Every third client renews as a plain HTTP client would: one
		// body, with its request id, posted again after an unknown
		// outcome, with none of the Go client's retry rules.
		actx, att := withAttempts(octx)
		req := client.RenewRequest{Key: c.key, Holder: c.holder, Token: tok, RequestID: client.NewRequestID()}
		err = postRetrying(actx, c.rawHTTP(), c.eps, &c.rawFrom, att, "/v1/renew", func(int) any { return req }, &client.RenewResponse{})
	} else {
		_, err = c.cl().Renew(octx, c.key, c.holder, tok)
	}
	cancel()
	var out history.Outcome
	var code string
	forge := false
	c.w.rec.Complete(op, func(o *history.Op) {
		if err != nil {
			// A renewal writes no log entry: an ambiguous attempt does not
			// make its refusal unknown.
			o.Outcome, o.Code = classify(err, true, nil)
			o.Error = err.Error()
		} else {
			o.Outcome = history.OK
		}
		out, code = o.Outcome, o.Code
		if forge = c.w.cfg.Broken == BrokenStaleRenew && out == history.Fail && grantGone(code); forge {
			o.Outcome, o.Code, o.Error, o.Broken = history.OK, "", "", BrokenStaleRenew
		}
	})
	if forge {
		c.w.mu.Lock()
		c.w.broken++
		c.w.mu.Unlock()
	}
	// A refusal about the grant means it is gone; unavailability, maybe not.
	// (The stale-renew control forges only the record: the client moves on.)
	return out != history.Fail || !grantGone(code)
}

func (c *worker) release(ctx context.Context, tok fence.Token) {
	op := c.w.rec.Invoke(history.Op{Client: c.id, Kind: history.Release, Key: c.key, Holder: c.holder, Token: tok})
	octx, cancel := c.opCtx(ctx)
	octx, att := withAttempts(octx)
	out, err := c.cl().Release(octx, client.ReleaseRequest{Key: c.key, Holder: c.holder, Token: tok})
	cancel()
	c.w.rec.Complete(op, func(o *history.Op) {
		if err != nil {
			o.Outcome, o.Code = classify(err, true, att)
			o.Error = err.Error()
			return
		}
		o.Outcome, o.Ended = history.OK, out.Token
	})
}

// verifyOther verifies a token of the key that some client was granted,
// most often a stale one, naming no holder.
func (c *worker) verifyOther(ctx context.Context) {
	c.w.mu.Lock()
	seen := c.w.seen[c.key]
	var tok fence.Token
	if len(seen) > 0 {
		tok = seen[c.rng.Intn(len(seen))]
		if c.rng.Intn(10) == 0 {
			tok = seen[len(seen)-1] + 1 // not granted yet, or just now
		}
	}
	c.w.mu.Unlock()
	if tok == 0 {
		return
	}
	// Sometimes name this client as the holder: a token of someone else's
	// current grant must then be refused (holder_mismatch).
	holder := ""
	if c.rng.Intn(3) == 0 {
		holder = c.holder
	}
	c.verify(ctx, tok, holder, false)
}

// keepalive renews every lease of the client's holder (its key's, if any).
func (c *worker) keepalive(ctx context.Context) {
	op := c.w.rec.Invoke(history.Op{Client: c.id, Kind: history.Keepalive, Key: c.key, Holder: c.holder})
	octx, cancel := c.opCtx(ctx)
	out, err := c.cl().Keepalive(octx, c.holder)
	cancel()
	c.w.rec.Complete(op, func(o *history.Op) {
		if err != nil {
			o.Outcome, o.Code = classify(err, true, nil)
			o.Error = err.Error()
			return
		}
		o.Outcome = history.OK
		for _, r := range out.Renewed {
			if r.Key == c.key {
				o.Granted = r.Token
			}
		}
	})
}

func (c *worker) verify(ctx context.Context, tok fence.Token, holder string, own bool) {
	op := c.w.rec.Invoke(history.Op{Client: c.id, Kind: history.Verify, Key: c.key, Holder: holder, Token: tok, Own: own})
	if v, ok := c.w.staleAnswer(c.key, tok, c.rng); ok {
		c.w.rec.Complete(op, func(o *history.Op) {
			o.Outcome, o.Allow, o.Code, o.Current, o.CurrentHolder = history.OK, v.Allow, v.Reason, v.CurrentToken, v.Holder
			o.Broken = BrokenStaleVerify
		})
		return
	}
	cl := c.cl()
	if c.id%2 == 1 {
		cl = c.w.sharedAPI()
	}
	octx, cancel := c.opCtx(ctx)
	v, err := cl.Verify(octx, c.key, tok.String(), holder)
	cancel()
	c.w.remember(c.key, tok, v)
	c.w.rec.Complete(op, func(o *history.Op) {
		switch {
		case err != nil || v.Reason == "unavailable":
			// A read that could not be served: it tells nothing.
			o.Outcome, o.Code = history.Info, "unavailable"
			if err != nil {
				o.Error = err.Error()
			}
		default:
			o.Outcome, o.Allow, o.Code, o.Current, o.CurrentHolder = history.OK, v.Allow, v.Reason, v.CurrentToken, v.Holder
		}
	})
}

// remember keeps allow verdicts for the stale-verify control.
func (w *Workload) remember(key string, tok fence.Token, v client.VerifyResponse) {
	if w.cfg.Broken != BrokenStaleVerify || !v.Allow {
		return
	}
	w.mu.Lock()
	w.cache[cacheKey{key, tok}] = v
	w.mu.Unlock()
}

// staleAnswer is the stale-verify control: half of the verifies of a token
// that was once allowed get that old verdict back.
func (w *Workload) staleAnswer(key string, tok fence.Token, rng *rand.Rand) (client.VerifyResponse, bool) {
	if w.cfg.Broken != BrokenStaleVerify {
		return client.VerifyResponse{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.cache[cacheKey{key, tok}]
	if !ok || rng.Intn(2) == 0 {
		return client.VerifyResponse{}, false
	}
	w.broken++
	return v, true
}

func (c *worker) write(tok fence.Token) bool {
	c.value++
	v := c.id*1_000_000 + c.value
	op := c.w.rec.Invoke(history.Op{Client: c.id, Kind: history.Write, Key: c.key, Holder: c.holder, Token: tok, Value: v})
	r := c.w.res.Write(c.key, tok, v, c.proof)
	c.w.rec.Complete(op, func(o *history.Op) {
		o.Seq = r.Seq
		o.Current = r.High
		switch {
		case r.Accepted:
			o.Outcome = history.OK
		case r.ProofRefused != "":
			o.Outcome, o.Code = history.Fail, r.ProofRefused
		default:
			o.Outcome, o.Code = history.Fail, "stale_token"
		}
		if !c.w.res.Checks() {
			o.Broken = BrokenResourceNoCheck
		}
	})
	return r.Accepted
}

func (c *worker) read(tok fence.Token) bool {
	op := c.w.rec.Invoke(history.Op{Client: c.id, Kind: history.Read, Key: c.key, Holder: c.holder, Token: tok})
	r := c.w.res.Read(c.key, tok, c.proof)
	c.w.rec.Complete(op, func(o *history.Op) {
		o.Seq = r.Seq
		o.Current = r.High
		switch {
		case r.Accepted:
			o.Outcome, o.Count, o.Digest, o.Values = history.OK, len(r.Values), history.Digest(r.Values), history.Tail(r.Values)
		case r.ProofRefused != "":
			o.Outcome, o.Code = history.Fail, r.ProofRefused
		default:
			o.Outcome, o.Code = history.Fail, "stale_token"
		}
	})
	return r.Accepted
}
