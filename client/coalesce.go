package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// A Client coalesces its concurrent verifies, and its concurrent keepalives,
// opportunistically: a call made while fewer than maxFlights calls or
// batches of its kind are in flight goes out at once, alone on the single
// route, so one caller waits for nothing. Calls made while maxFlights are in
// flight queue; when one of those returns, the queued ones go out together
// as one batch request (POST /v1/verify/batch or /v1/keepalive/batch), and
// calls made meanwhile form the next batch. Under load the leader then
// reads, parses and answers one HTTP request, and confirms its leadership
// once, for many operations.
//
// Linearizability is that of single calls: every item of a batch was asked
// for by its caller before the batch was sent; the server proves it leads
// after it received the batch, and judges every item after that proof; the
// answer reaches each caller before its call returns. So each verdict is
// taken at a point inside its own call's interval.
//
// Each caller gets its own result or error. A caller whose context ends
// stops waiting without ending the batch for the others (the batch runs
// until after the latest deadline of its callers, and is abandoned when all
// of them gave up). A batch that fails as a whole goes through the same
// attempts, leader following and retries as a single call, and each of its
// callers gets the error a single call would have given. A node that does
// not know the batch routes (404) makes the client use single calls for a
// while.

// maxFlights is how many calls or batches of one kind a client keeps in
// flight before it queues. One: with two, each batch was about half as
// large, and verifies and keepalives at 16 and 64 clients cost the servers
// more CPU per operation without a clear gain in throughput (scripts/cpuperop,
// three alternating runs each). A flight held by a frozen node does not hold
// the queue longer than single calls would each be held: they would go to
// the same node first.
const maxFlights = 1

// batchOffFor is how long a client uses single calls after a node answered
// that it does not know a batch route (an older version, during an upgrade).
const batchOffFor = time.Minute

// maxItemCost bounds the encoded size of one item a batch takes: a larger
// one (whose fields the server refuses anyway) goes alone, so it cannot
// make a batch too large and fail the other callers' items.
const maxItemCost = MaxBodyBytes / 16

// batchDeadlineMargin is how long after its callers' last deadline a batch
// is abandoned.
const batchDeadlineMargin = time.Second

// batchOverhead is the encoded size of a batch body without its items.
const batchOverhead = 32

// WithBatching turns the coalescing of concurrent verifies and keepalives
// into batch requests on or off (on by default). Off, every call is one
// HTTP request, as with a server without the batch routes.
func WithBatching(on bool) Option { return func(c *Client) { c.batching = on } }

// batcher coalesces the concurrent calls of one kind.
type batcher[In, Out any] struct {
	// single runs one call on the single route; batch runs many on the
	// batch route: per item its answer or error, or an error for all.
	single func(ctx context.Context, in In) (Out, error)
	batch  func(ctx context.Context, ins []In) ([]Out, []error, error)
	// cost is an item's encoded size in a batch body.
	cost func(In) int
	// write: an item that was sent and not answered may have been done.
	write bool

	mu      sync.Mutex
	flights int // calls or batches of this kind in flight
	queue   []*waiter[In, Out]
	// offUntil (Unix nanoseconds) is when batches may be tried again
	// after a node did not know the batch route.
	offUntil atomic.Int64
}

// waiter is one queued call.
type waiter[In, Out any] struct {
	ctx  context.Context
	in   In
	done chan struct{}
	out  Out
	err  error
	// fallback: the batch route is unknown, the caller calls singly.
	fallback bool
	// group is the batch the call went out in; nil while queued.
	group *group
	gone  bool // the caller stopped waiting before it was sent
}

// group is one batch in flight.
type group struct {
	live   int // callers still waiting
	cancel context.CancelFunc
}

// do runs one call, coalesced with those in flight.
func (b *batcher[In, Out]) do(ctx context.Context, in In) (Out, error) {
	if time.Now().UnixNano() < b.offUntil.Load() || b.cost(in) > maxItemCost {
		return b.single(ctx, in)
	}
	b.mu.Lock()
	if b.flights < maxFlights {
		b.flights++
		b.mu.Unlock()
		out, err := b.single(ctx, in)
		b.next()
		return out, err
	}
	w := &waiter[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		if err := b.leave(w); err != nil {
			var zero Out
			return zero, err
		}
	}
	if w.fallback {
		return b.single(ctx, in)
	}
	return w.out, w.err
}

// leave takes a caller whose context ended out of its batch: the error to
// return, or nil when its answer arrived meanwhile.
func (b *batcher[In, Out]) leave(w *waiter[In, Out]) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.done:
		return nil
	default:
	}
	if w.group == nil {
		w.gone = true
		return fmt.Errorf("%w: %v before the request was sent", ErrUnavailable, w.ctx.Err())
	}
	if w.group.live--; w.group.live == 0 {
		w.group.cancel()
	}
	if b.write {
		return fmt.Errorf("%w: %v before the batch it was sent in was answered", ErrUnknownOutcome, w.ctx.Err())
	}
	return fmt.Errorf("%w: %v before the batch it was sent in was answered", ErrUnavailable, w.ctx.Err())
}

// next hands the flight that ended over to the calls queued meanwhile, or
// counts it ended.
func (b *batcher[In, Out]) next() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.flights--
		return
	}
	go b.flush()
}

// flush sends the queued calls in batches until none is left.
func (b *batcher[In, Out]) flush() {
	for {
		ws, ctx, cancel := b.take()
		if ws == nil {
			return
		}
		if len(ws) == 1 {
			w := ws[0]
			w.out, w.err = b.single(w.ctx, w.in)
			b.deliver(w)
			cancel()
			continue
		}
		ins := make([]In, len(ws))
		for i, w := range ws {
			ins[i] = w.in
		}
		outs, errs, err := b.batch(ctx, ins)
		cancel()
		var apiErr *Error
		unknownRoute := errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound && apiErr.Code != "unknown_key"
		if unknownRoute {
			b.offUntil.Store(time.Now().Add(batchOffFor).UnixNano())
		}
		for i, w := range ws {
			switch {
			case unknownRoute:
				w.fallback = true
			case err != nil:
				w.err = err
			default:
				w.out, w.err = outs[i], errs[i]
			}
			b.deliver(w)
		}
	}
}

// take removes the next batch from the queue: at most MaxBatchItems calls
// whose items fit in MaxBodyBytes, with a context that ends after the latest
// of their deadlines. With nothing queued it counts its flight ended and
// returns nil.
func (b *batcher[In, Out]) take() ([]*waiter[In, Out], context.Context, context.CancelFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ws []*waiter[In, Out]
	size, n := batchOverhead, 0
	var deadline time.Time
	for ; n < len(b.queue) && len(ws) < MaxBatchItems; n++ {
		w := b.queue[n]
		if w.gone {
			continue
		}
		if size += b.cost(w.in); size > MaxBodyBytes && len(ws) > 0 {
			break
		}
		ws = append(ws, w)
		d, ok := w.ctx.Deadline()
		if !ok {
			d = time.Now().Add(30 * time.Second)
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	b.queue = b.queue[n:]
	if len(ws) == 0 {
		b.queue = nil
		b.flights--
		return nil, nil, nil
	}
	// Past the last deadline by a margin: each caller sees its own context
	// end, and leaves (leave cancels the batch when the last one did),
	// before the batch's context can end and fail it with a deadline that
	// is not yet the caller's own.
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(batchDeadlineMargin))
	g := &group{live: len(ws), cancel: cancel}
	for _, w := range ws {
		w.group = g
	}
	return ws, ctx, cancel
}

func (b *batcher[In, Out]) deliver(w *waiter[In, Out]) {
	b.mu.Lock()
	close(w.done)
	b.mu.Unlock()
}

// jsonLen bounds the length of s as a JSON string, quotes included, as
// encoding/json writes it (HTML characters and invalid bytes escaped).
func jsonLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"' || r == '\\':
			n += 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029' || r == utf8.RuneError:
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// newBatchers sets up the client's coalescing of verifies and keepalives.
func (c *Client) newBatchers() {
	c.verifies = &batcher[VerifyRequest, VerifyResponse]{
		single: func(ctx context.Context, req VerifyRequest) (VerifyResponse, error) {
			var out VerifyResponse
			err := c.do(ctx, http.MethodPost, "/v1/verify", req, &out, false)
			return out, err
		},
		batch: c.verifyBatch,
		cost: func(r VerifyRequest) int {
			return len(`{"key":,"token":,"holder":},`) + jsonLen(r.Key) + jsonLen(r.Token) + jsonLen(r.Holder)
		},
	}
	c.keepalives = &batcher[string, KeepaliveResponse]{
		single: func(ctx context.Context, holder string) (KeepaliveResponse, error) {
			var out KeepaliveResponse
			err := c.do(ctx, http.MethodPost, "/v1/keepalive", KeepaliveRequest{Holder: holder}, &out, true)
			return out, err
		},
		batch: c.keepaliveBatch,
		cost:  func(h string) int { return jsonLen(h) + 1 },
		write: true,
	}
}

// verifyBatch sends checks as one batch, with the attempts of a single
// verify.
func (c *Client) verifyBatch(ctx context.Context, checks []VerifyRequest) ([]VerifyResponse, []error, error) {
	var resp VerifyBatchResponse
	if err := c.call(ctx, call{method: http.MethodPost, path: "/v1/verify/batch", in: VerifyBatchRequest{Checks: checks}, out: &resp}); err != nil {
		return nil, nil, err
	}
	if len(resp.Results) != len(checks) {
		return nil, nil, fmt.Errorf("%w: a verify batch of %d checks was answered with %d results", ErrUnavailable, len(checks), len(resp.Results))
	}
	outs, errs := make([]VerifyResponse, len(checks)), make([]error, len(checks))
	for i, r := range resp.Results {
		if r.Status == http.StatusOK {
			outs[i] = VerifyResponse{Allow: r.Allow, Reason: r.Reason, CurrentToken: r.CurrentToken, Holder: r.Holder}
			continue
		}
		f := false
		errs[i] = &Error{Status: r.Status, ErrorResponse: ErrorResponse{Code: r.Code, Message: r.Message, Allow: &f, Reason: r.Reason}}
	}
	return outs, errs, nil
}

// keepaliveBatch sends holders' keepalives as one batch, with the attempts
// of a single keepalive.
func (c *Client) keepaliveBatch(ctx context.Context, holders []string) ([]KeepaliveResponse, []error, error) {
	var resp KeepaliveBatchResponse
	if err := c.call(ctx, call{method: http.MethodPost, path: "/v1/keepalive/batch", in: KeepaliveBatchRequest{Holders: holders}, out: &resp, write: true}); err != nil {
		return nil, nil, err
	}
	if len(resp.Results) != len(holders) {
		return nil, nil, fmt.Errorf("%w: a keepalive batch of %d holders was answered with %d results", ErrUnknownOutcome, len(holders), len(resp.Results))
	}
	outs, errs := make([]KeepaliveResponse, len(holders)), make([]error, len(holders))
	for i, r := range resp.Results {
		if r.Status == http.StatusOK {
			outs[i] = KeepaliveResponse{Holder: r.Holder, Renewed: append(make([]RenewResponse, 0, len(r.Renewed)), r.Renewed...)}
			continue
		}
		errs[i] = &Error{Status: r.Status, ErrorResponse: ErrorResponse{Code: r.Code, Message: r.Message}}
	}
	return outs, errs, nil
}
