package workload

import (
	"context"
	"net/http"
	"net/http/httptrace"

	"github.com/fenced/fenced/client"
)

// BrokenNoAttemptDeadline is the availability checker's positive control:
// each HTTP attempt of the clients waits for the whole operation's deadline,
// whatever deadline the API client set for the attempt, as a client without
// per-attempt deadlines would; a frozen node listed first then holds every
// operation until it times out.
const BrokenNoAttemptDeadline = "no-attempt-deadline"

// ListFirst makes every client list endpoint first from its next operation
// on (a client started with that list: it has learned no leader yet); ""
// gives every client back its own order. The gray nemeses call it once the
// node is frozen.
func (w *Workload) ListFirst(endpoint string) {
	w.mu.Lock()
	w.first = endpoint
	w.orderGen++
	w.mu.Unlock()
}

// order returns the endpoint to list first and its generation.
func (w *Workload) order() (string, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first, w.orderGen
}

// cl returns the client's API client, built anew when the endpoint order
// changed since the last operation.
func (c *worker) cl() *client.Client {
	first, gen := c.w.order()
	if c.api != nil && gen == c.gen {
		return c.api
	}
	c.gen = gen
	eps := c.eps
	if first != "" {
		eps = []string{first}
		for _, e := range c.eps {
			if e != first {
				eps = append(eps, e)
			}
		}
	}
	if c.api != nil {
		c.api.CloseIdleConnections()
	}
	opts := []client.Option{client.WithHTTPClient(c.w.httpClient())}
	if c.w.cfg.AttemptTimeout > 0 {
		opts = append(opts, client.WithAttemptTimeout(c.w.cfg.AttemptTimeout))
	}
	c.api = client.New(eps, opts...)
	return c.api
}

// httpClient is the HTTP client of one API client. It sets no overall
// timeout: how long one attempt may take is the API client's business (the
// suite measures it); the transport only watches the attempts for ambiguity,
// and, in the no-attempt-deadline control, makes each wait for the whole
// operation.
func (w *Workload) httpClient() *http.Client {
	var rt http.RoundTripper = clusterTransport()
	if w.cfg.Broken == BrokenNoAttemptDeadline {
		rt = wholeDeadline{base: rt, w: w}
	}
	return &http.Client{Transport: trackingTransport{base: rt}}
}

type opKey struct{}

// withOp marks ctx as one operation's context, for the no-attempt-deadline
// control to find under the attempts' own contexts.
func withOp(ctx context.Context) context.Context {
	return &opCtx{Context: ctx}
}

// opCtx is an operation's context; Value(opKey{}) returns it, so that the
// contexts of its attempts lead back to it.
type opCtx struct{ context.Context }

func (o *opCtx) Value(k any) any {
	if k == (opKey{}) {
		return o.Context
	}
	return o.Context.Value(k)
}

// wholeDeadline sends each attempt under its operation's context instead of
// the attempt's (keeping the attempt's trace hooks, by which the API client
// tells a sent request from one that was not): the attempt ends only with
// the operation.
type wholeDeadline struct {
	base http.RoundTripper
	w    *Workload
}

func (t wholeDeadline) RoundTrip(req *http.Request) (*http.Response, error) {
	op, ok := req.Context().Value(opKey{}).(context.Context)
	if !ok {
		return t.base.RoundTrip(req)
	}
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil {
		op = httptrace.WithClientTrace(op, trace)
	}
	t.w.mu.Lock()
	t.w.broken++
	t.w.mu.Unlock()
	return t.base.RoundTrip(req.WithContext(op))
}
