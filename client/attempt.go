package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"
)

// call is one request of the client, to be served by any node.
type call struct {
	method, path string
	in, out      any
	// write marks a request that changes state: once it may have been
	// sent, a failure is an unknown outcome, never a plain failure.
	write bool
	// hold is how long a node may legitimately keep the request before
	// answering (the wait of a queued acquire); added to each attempt's
	// deadline.
	hold time.Duration
}

// attemptResult is the end of one attempt on one endpoint.
type attemptResult struct {
	endpoint string
	sent     bool
	data     []byte
	err      error
	timeout  time.Duration
}

// do sends a request to the endpoints until one serves it or ctx ends.
func (c *Client) do(ctx context.Context, method, path string, in, out any, write bool) error {
	return c.call(ctx, call{method: method, path: path, in: in, out: out, write: write, hold: slowOps[path]})
}

// slowOps are requests a healthy leader may take seconds to answer: a
// leadership transfer waits for the new leader, a membership change for a
// configuration entry. Their attempts get this much more time, so a slow
// answer is not taken for a frozen node and the request repeated.
var slowOps = map[string]time.Duration{
	"/v1/cluster/transfer": 10 * time.Second,
	"/v1/cluster/join":     10 * time.Second,
	"/v1/cluster/remove":   10 * time.Second,
}

// maxRoundShift caps the doubling of the attempt timeout: 8 times the
// attempt timeout at most.
const maxRoundShift = 3

// call runs the attempts of one request. Writes go to one node at a time, in
// the order of c.order, each attempt with its own deadline; reads also start a
// hedged attempt on the next node when the first has not answered within the
// hedge delay. Answers that say nothing was done (not_leader, not_ready, busy,
// unavailable, shutting_down, not_member) and failures to connect move on to
// the next node at once; after a full round with no success the client backs
// off briefly. The first attempt runs in the caller's goroutine; when a read's
// hedge comes due before it ends, the rest of the call moves to the hedge
// timer's goroutine.
//
// A round ends early in two cases, both after a frozen leader: when a node
// answered that a new leader is taking over (inTakeover), and when the nodes
// left in it are suspect (they timed out lately) and a node in it answered
// that it could not serve yet. The cluster is reachable through the node
// that answered, which is asked again after the pause, while another
// attempt on a frozen node would cost a whole attempt deadline in which the
// new leader became ready. For the same reason, once a node answered in a
// round that no leader serves yet (inElection), the round's next attempts
// get half the attempt deadline, as a suspect node does.
//
// A write retried on another node is the same request (same holder and
// request id), so a node that wakes up and applies an abandoned attempt
// repeats the same grant; and once any attempt of a write may have been
// sent, a failure is reported as ErrUnknownOutcome.
func (c *Client) call(ctx context.Context, cl call) error {
	if len(c.endpoints) == 0 {
		return fmt.Errorf("%w: no endpoints", ErrUnavailable)
	}
	var body []byte
	if cl.in != nil {
		var err error
		if body, err = json.Marshal(cl.in); err != nil {
			return err
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	// Each attempt's context is the caller's with the attempt's deadline;
	// cancels ends those still running once the call is decided.
	var cancels []context.CancelFunc
	cancelAll := func() {
		for _, cancel := range cancels {
			cancel()
		}
	}
	defer cancelAll()
	ctx, connect := c.watchConnect(ctx)
	defer connect.stop()
	connectBy, connected := connect.by, &connect.connected

	order := c.order()
	n := len(order)
	// One result fits without a receiver: the first attempt runs in this
	// goroutine and leaves its result there.
	results := make(chan attemptResult, 1)
	done := make(chan struct{})
	defer close(done) // attempts still running after the answer give up sending
	fails := newFailures()
	hedges := !cl.write && c.hedgeDelay > 0 && n > 1
	inflight := 0
	launched := 0
	// shift doubles the attempt deadline after a round in which every
	// attempt timed out: the cluster is slow rather than electing (an
	// election answers quickly, not_leader or unavailable) or missing a
	// node (the others answer).
	shift, roundTimeouts := 0, 0
	unknown := false
	// answered: a node answered in this round for the cluster, that it
	// could not serve yet (speaksForCluster).
	answered := false
	// takeover: a node answered in this round that a new leader is taking
	// over (inTakeover); the round ends there, at most maxTakeoverRounds
	// times in a call (takeoverRounds).
	takeover := false
	takeoverRounds := 0
	// electing: a node answered in this round that no leader serves yet
	// (inElection); such rounds pause at most electionPoll, at most
	// maxElectionRounds times in a call (electionRounds).
	electing := false
	electionRounds := 0
	backoff := 20 * time.Millisecond
	var hedge, pause <-chan time.Time

	// prepare picks the next attempt's node and deadline, and returns the
	// attempt to run; an inline one is ended by the connect timeout too,
	// since nothing else would end it before its own deadline.
	prepare := func(inline bool) func() attemptResult {
		if launched > 0 && launched%n == 0 {
			// A new round: the nodes that timed out or could not be
			// reached in the last one go last, behind those that answered.
			order = c.order()
			if roundTimeouts >= n {
				shift = min(shift+1, maxRoundShift)
			}
			roundTimeouts, answered, takeover, electing = 0, false, false, false
		}
		pos := launched % n
		c.leaderNext(order, pos)
		ep := order[pos]
		timeout := c.attemptTimeout << shift
		if electing || (c.isSuspect(ep) && c.anyAnswering()) {
			// It did not answer lately, or a node answered in this round
			// that no leader serves: the old leader may be frozen and
			// next in the list, unknown to the client by its address.
			// Give it less time, so a frozen node costs little; a live
			// one answers at once.
			timeout /= 2
		}
		timeout += cl.hold
		actx, cancel := context.WithTimeout(ctx, timeout)
		cancels = append(cancels, cancel)
		if launched == 0 {
			cut := context.CancelFunc(nil)
			if inline {
				cut = cancel
			}
			connect.arm(cut)
		}
		launched++
		inflight++
		return func() attemptResult {
			return c.attempt(actx, cancel, ep, timeout, cl.method, cl.path, body)
		}
	}
	// launch starts the next attempt in a goroutine of its own, with a
	// hedge for a read.
	launch := func() {
		run := prepare(false)
		go func() {
			r := run()
			select {
			case results <- r:
			case <-done:
			}
		}()
		if hedges {
			hedge = time.After(c.hedgeDelay)
		}
	}
	// endRoundEarly skips the rest of the round when a node in it answered
	// that a new leader is taking over, or when only suspect nodes are left
	// in it and another node answered in it (order puts the suspect ones
	// last).
	endRoundEarly := func() {
		if launched%n == 0 {
			return
		}
		if takeover && takeoverRounds < maxTakeoverRounds {
			takeoverRounds++
			launched += n - launched%n
			return
		}
		if answered && c.isSuspect(order[launched%n]) {
			launched += n - launched%n
		}
	}
	// next launches the next attempt, or pauses first at the end of a round.
	next := func() {
		endRoundEarly()
		if launched%n == 0 {
			end := plainRound
			switch {
			case takeover:
				end = takeoverRound
			case electing && electionRounds < maxElectionRounds:
				electionRounds++
				end = electionRound
			}
			var d time.Duration
			d, backoff = nextPause(backoff, end)
			pause = time.After(d)
			return
		}
		launch()
	}
	// noConnection ends the call when no endpoint accepted a connection
	// within the connect timeout: nothing was sent. The attempts still
	// dialling are cut; one that connected at the last moment is accounted
	// for as at the caller's deadline.
	noConnection := func() error {
		cancelAll()
		for ; inflight > 0; inflight-- {
			r := <-results
			if r.err == nil {
				return c.decode(r, cl.out)
			}
			if _, ok := fails.last[r.endpoint]; !ok {
				fails.record(r.endpoint, failure{reason: "no connection within " + c.connectTimeout.String()})
			}
			unknown = unknown || (cl.write && r.sent)
		}
		if unknown {
			return fails.err(ErrUnknownOutcome, "the request may have been applied; no node confirmed it", nil)
		}
		return fails.err(ErrUnavailable, "no endpoint accepted a connection within "+c.connectTimeout.String(), ErrNoConnection)
	}
	// hedgeNow asks the next node as well, when the read's attempt in
	// flight has not answered within the hedge delay.
	hedgeNow := func() {
		hedge = nil
		endRoundEarly()
		if inflight == 1 && pause == nil && launched%n != 0 {
			launch()
		}
	}
	// loop takes the attempts' results and starts the next ones until the
	// call is decided.
	loop := func() error {
		for {
			select {
			case r := <-results:
				inflight--
				if r.err == nil {
					return c.decode(r, cl.out)
				}
				if r.sent {
					connected.Store(true)
				}
				fl := classify(r.err, r.timeout, ctx.Err() != nil)
				fails.record(r.endpoint, fl)
				if fl.timedOut {
					roundTimeouts++
				}
				var apiErr *Error
				switch {
				case errors.As(r.err, &apiErr) && apiErr.Code == "outcome_unknown":
					unknown = true
				case errors.As(r.err, &apiErr) && !safeToRetry(apiErr.Code):
					if unknown && cl.write {
						// An earlier attempt may have been committed, and its
						// effect may be why this one was refused (a grant that
						// then expired and went to someone else): the refusal
						// is not a definite no. errors.Is works for both.
						return fmt.Errorf("%w (an earlier attempt may have been committed): %w", ErrUnknownOutcome, r.err)
					}
					return r.err
				case apiErr == nil && r.sent && cl.write:
					unknown = true
				}
				if apiErr == nil {
					c.markSuspect(r.endpoint)
				} else {
					answered = answered || speaksForCluster(apiErr.Code)
					takeover = takeover || inTakeover(apiErr.Code)
					electing = electing || inElection(apiErr.Code)
				}
				if inflight == 0 && fails.allPermanent(n) {
					return fails.err(ErrUnavailable, "no endpoint can be used", nil)
				}
				if pause == nil && (inflight == 0 || (!cl.write && launched%n != 0)) {
					next()
				}
			case <-hedge:
				hedgeNow()
			case <-pause:
				pause = nil
				launch()
			case <-connectBy:
				connectBy = nil
				if connected.Load() {
					continue
				}
				return noConnection()
			case <-ctx.Done():
				// The attempts still in flight end at once with the context;
				// a write one of them sent may have been applied.
				for ; inflight > 0; inflight-- {
					r := <-results
					fails.record(r.endpoint, failure{reason: "no answer before the caller's deadline", late: true})
					if cl.write && r.sent {
						unknown = true
					}
				}
				if unknown {
					return fails.err(ErrUnknownOutcome, "the request may have been applied; no node confirmed it before the deadline", ctx.Err())
				}
				return fails.err(ErrUnavailable, "no node served the request before the deadline", ctx.Err())
			}
		}
	}
	// afterInline goes on from the first attempt's result, taken inline.
	afterInline := func(r attemptResult) error {
		results <- r
		if connectBy != nil {
			// The inline attempt may have ended because the connect
			// timeout passed with no connection: that decides the call,
			// before its failure could be taken for one to retry.
			select {
			case <-connectBy:
				if !connected.Load() {
					return noConnection()
				}
				connectBy = nil
			default:
			}
		}
		return loop()
	}

	// The first attempt runs inline, in the caller's goroutine: it then
	// costs no goroutine, no stack growth in net/http for a fresh one, and
	// no hand-off of its result. Until it ends, nothing can happen but the
	// caller's deadline and the connect timeout, which end its context,
	// and a read's hedge.
	first := prepare(true)
	if !hedges {
		return afterInline(first())
	}
	// A read is hedged: when the hedge delay passes before the first
	// attempt ends, the rest of the call (the hedge, the answers, the
	// decision) runs in the timer's goroutine, which ends the first
	// attempt once the call is decided; this goroutine then only hands it
	// the first attempt's result and waits for the decision.
	decided := make(chan error, 1)
	timer := time.AfterFunc(c.hedgeDelay, func() {
		hedgeNow()
		err := loop()
		cancelAll()
		decided <- err
	})
	r := first()
	if timer.Stop() {
		return afterInline(r)
	}
	select {
	case results <- r:
		return <-decided
	case err := <-decided:
		return err
	}
}

// decode takes the answer of the attempt that served a request.
func (c *Client) decode(r attemptResult, out any) error {
	c.markAnswered(r.endpoint)
	if out == nil || len(r.data) == 0 || decodeAnswer(r.data, out) {
		return nil
	}
	if err := json.Unmarshal(r.data, out); err != nil {
		return fmt.Errorf("decode answer of %s: %w", r.endpoint, err)
	}
	return nil
}

// connectWatch is the connect timeout of one request (WithConnectTimeout):
// by is closed when it passes, and connected says by then whether any
// attempt got a connection (TCP, and TLS with its handshake) or wrote its
// request (a transport of WithHTTPClient may report only that). Without a
// connect timeout by is nil and never closes.
type connectWatch struct {
	by        chan struct{}
	connected atomic.Bool
	timeout   time.Duration
	timer     *time.Timer
}

// watchConnect returns ctx traced for the connect timeout, if there is one.
func (c *Client) watchConnect(ctx context.Context) (context.Context, *connectWatch) {
	w := new(connectWatch)
	if c.connectTimeout <= 0 {
		return ctx, w
	}
	w.by, w.timeout = make(chan struct{}), c.connectTimeout
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { w.connected.Store(true) },
		WroteHeaders: func() { w.connected.Store(true) },
	})
	return ctx, w
}

// arm starts the connect timeout, when there is one. cut, if set, ends the
// attempt running inline when the timeout passes with no connection, since
// nothing else would end it before its own deadline.
func (w *connectWatch) arm(cut context.CancelFunc) {
	if w.by == nil {
		return
	}
	w.timer = time.AfterFunc(w.timeout, func() {
		close(w.by)
		if cut != nil && !w.connected.Load() {
			cut()
		}
	})
}

// stop releases the timer.
func (w *connectWatch) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// Pauses between rounds of attempts.
const (
	maxBackoff = 500 * time.Millisecond
	// takeoverPoll is the pause after a round in which a node answered that
	// a new leader is taking over (inTakeover): the leader waits out its
	// takeover (300 ms and a barrier), so it will serve soon, and a longer
	// pause would leave it ready and unasked.
	takeoverPoll = 50 * time.Millisecond
	// maxTakeoverRounds bounds the rounds of a call that end at a node
	// saying a new leader is taking over: about a second of its answers,
	// longer than a takeover, and then the other nodes are tried too, so a
	// node stuck saying so cannot hold the client.
	maxTakeoverRounds = 16
	// electionPoll is the longest pause after a round in which a node
	// answered that no leader serves yet (inElection): an election ends
	// within an election timeout or two, and a client backed off to
	// maxBackoff would leave the new leader unasked for up to half a
	// second after it became ready.
	electionPoll = 100 * time.Millisecond
	// maxElectionRounds bounds the rounds of a call paced by electionPoll:
	// two seconds of pauses, longer than an election with a split vote;
	// then the backoff grows again, so a node cut off in a minority, which
	// says so for as long as it is cut off, is not asked ten times a
	// second by every client.
	maxElectionRounds = 20
)

// roundEnd says how a round in which no node served ended, for its pause.
type roundEnd int

const (
	plainRound    roundEnd = iota
	takeoverRound          // a node said a new leader is taking over
	electionRound          // a node said no leader serves yet
)

// nextPause returns the pause after a round in which no node served, and the
// backoff after that: the backoff, doubling up to maxBackoff; after a
// takeover round at most takeoverPoll, the backoff not growing; after an
// election round at most electionPoll, the backoff growing, so that the
// rounds after the last of those a call takes pause as long as before.
func nextPause(backoff time.Duration, end roundEnd) (pause, next time.Duration) {
	switch end {
	case takeoverRound:
		return min(backoff, takeoverPoll), backoff
	case electionRound:
		return min(backoff, electionPoll), min(2*backoff, maxBackoff)
	}
	return backoff, min(2*backoff, maxBackoff)
}

// inElection reports whether a refusal with this code says that no leader
// serves yet: the node knows none, or knows one that did not answer it.
// Unlike busy, which asks for less traffic, it ends by itself within an
// election.
func inElection(code string) bool {
	return code == "not_leader" || code == "unavailable"
}

// inTakeover reports whether a refusal with this code says that a new leader
// is taking over: it is not ready yet, or an election cut off what the node
// forwarded or committed. The node that answered is in touch with the new
// leader; it is asked again after takeoverPoll, and the rest of the round is
// skipped, since only the leader serves and the next node in the list may
// be the old leader, frozen. The next round starts from the leader the
// answer named, or, when the client cannot map that address to one of its
// endpoints (behind proxies or NAT), from the node that answered.
func inTakeover(code string) bool {
	return code == "not_ready" || code == "outcome_unknown"
}

// speaksForCluster reports whether a refusal with this code comes from a
// node that is in touch with the cluster's election: the leader not ready
// yet, no leader known, a leader too busy. A node shutting down or no
// longer a member says nothing of the cluster.
func speaksForCluster(code string) bool {
	switch code {
	case "not_ready", "not_leader", "unavailable", "busy":
		return true
	}
	return false
}

// attempt sends the request to one endpoint; ctx carries the attempt's
// deadline, timeout, and cancel releases it.
func (c *Client) attempt(ctx context.Context, cancel context.CancelFunc, endpoint string, timeout time.Duration, method, path string, body []byte) attemptResult {
	defer cancel()
	sent, data, err := c.send(ctx, endpoint, method, path, body)
	return attemptResult{endpoint: endpoint, sent: sent, data: data, err: err, timeout: timeout}
}

// order returns the endpoints in the order to try them: from the preferred
// one (the last leader that answered) round the list, with the endpoints
// that recently failed to answer moved to the end.
func (c *Client) order() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var fresh, stale []string
	for i := range c.endpoints {
		ep := c.endpoints[(c.preferred+i)%len(c.endpoints)]
		if until, ok := c.suspect[ep]; ok && now.Before(until) {
			stale = append(stale, ep)
			continue
		}
		fresh = append(fresh, ep)
	}
	return append(fresh, stale...)
}

// anyAnswering reports whether some endpoint is not suspect: only then is a
// suspect one given less time (when none answers, the cluster may be slow
// rather than frozen, and every node needs the full time).
func (c *Client) anyAnswering() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for _, ep := range c.endpoints {
		if until, ok := c.suspect[ep]; !ok || !now.Before(until) {
			return true
		}
	}
	return false
}

func (c *Client) isSuspect(ep string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.suspect[ep]
	return ok && time.Now().Before(until)
}

func (c *Client) markSuspect(ep string) {
	c.mu.Lock()
	c.suspect[ep] = time.Now().Add(suspectFor)
	c.mu.Unlock()
}

func (c *Client) markAnswered(ep string) {
	c.mu.Lock()
	delete(c.suspect, ep)
	c.mu.Unlock()
}

// learnLeader makes the leader's endpoint the preferred one, so requests stop
// taking a forwarding hop: the endpoint whose address is the leader's, or
// else the one whose node named itself with the leader's id (behind proxies
// or NAT the client's addresses are not the nodes' own); failing both, the
// endpoint that answered. self is the id the answering node gave itself.
func (c *Client) learnLeader(addr, id, self, answered string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if self != "" {
		c.ids[answered] = self
	}
	for i, ep := range c.endpoints {
		if addr != "" && strings.HasSuffix(ep, "://"+addr) {
			c.preferred = i
			return
		}
	}
	for i, ep := range c.endpoints {
		if id != "" && c.ids[ep] == id {
			c.preferred = i
			return
		}
	}
	for i, ep := range c.endpoints {
		if ep == answered {
			c.preferred = i
			return
		}
	}
}

// leaderNext moves the leader, as last learned, to order[pos] when it is
// among the endpoints the round has yet to try and did not fail lately: a
// node that answered, for example that a leader change cut off what it
// forwarded, names the new leader, which is worth asking before the rest of
// the list (the old leader, perhaps frozen, among them).
func (c *Client) leaderNext(order []string, pos int) {
	c.mu.Lock()
	p := c.endpoints[c.preferred]
	until, suspect := c.suspect[p]
	c.mu.Unlock()
	if order[pos] == p || (suspect && time.Now().Before(until)) {
		return
	}
	for j := pos + 1; j < len(order); j++ {
		if order[j] == p {
			order[pos], order[j] = order[j], order[pos]
			return
		}
	}
}

func (c *Client) start() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.preferred
}

func (c *Client) prefer(i int) {
	c.mu.Lock()
	c.preferred = i
	c.mu.Unlock()
}

// once sends one request to one endpoint, with no retry, and decodes a 2xx
// answer into out. sent reports whether the request may have reached the
// server.
func (c *Client) once(ctx context.Context, endpoint, method, path string, body []byte, out any) (sent bool, err error) {
	sent, data, err := c.send(ctx, endpoint, method, path, body)
	if err != nil || out == nil {
		return sent, err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return true, fmt.Errorf("decode answer of %s: %w", endpoint, err)
	}
	return true, nil
}

// send makes one HTTP request and returns the body of a 2xx answer. sent is
// false only when the request cannot have been served: the endpoint is bad,
// the connection could not be made, or its headers were never written.
func (c *Client) send(ctx context.Context, endpoint, method, path string, body []byte) (sent bool, data []byte, err error) {
	if err := c.invalid[endpoint]; err != nil {
		return false, nil, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	req, err := http.NewRequestWithContext(ctx, method, endpoint+path, rd)
	if err != nil {
		return false, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.roundTrip(req)
	if err != nil {
		var op *net.OpError
		notSent := (errors.As(err, &op) && op.Op == "dial") || handshakeFailed(err) || !wrote.Load()
		return !notSent, nil, err
	}
	defer resp.Body.Close()
	c.learnLeader(resp.Header.Get(LeaderHeader), resp.Header.Get(LeaderIDHeader), resp.Header.Get(NodeHeader), endpoint)
	data, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return true, nil, err
	}
	if resp.StatusCode/100 != 2 {
		return true, nil, errorOf(resp.StatusCode, data)
	}
	return true, data, nil
}
