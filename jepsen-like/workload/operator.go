package workload

import (
	"context"
	"math/rand"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// BrokenForceReleaseLookup: the operator's forced release looks the key's
// current token up again before every attempt, so a retry after a lost
// answer can name, and end, the grant the first attempt handed to a waiter.
const BrokenForceReleaseLookup = "force-release-lookup"

// An operator force-releases the current grant of a random key now and then,
// while asked to (ForceReleases), as an administrator ending a stuck holder
// would, with a plain HTTP client and no retry logic of the Go client's: it
// resolves the current token once (a linearizable read of the key), then
// posts release {key, token, force, request_id} and, after an unknown
// outcome, posts the very same body again, as a curl loop would. The
// request id makes the repeat safe: a retry after the first attempt
// committed (and handed the key to a waiter) is answered with the grant the
// first ended, never ends the waiter's.
type operator struct {
	w      *Workload
	id     int
	api    *client.Client
	hc     *http.Client
	eps    []string
	rng    *rand.Rand
	active atomic.Bool
}

// ForceReleases turns the operator's forced releases on or off.
func (w *Workload) ForceReleases(on bool) {
	if w.op != nil {
		w.op.active.Store(on)
	}
}

// startOperator starts the operator (idle until ForceReleases(true)). Its
// client id follows the clients' and the recovery probe's.
func (w *Workload) startOperator(ctx context.Context) {
	hc := trackedClient(w.cfg.AttemptTimeout)
	w.op = &operator{w: w, id: w.cfg.Clients + 1, hc: hc, api: client.New(w.cfg.Endpoints, client.WithHTTPClient(hc)),
		eps: w.cfg.Endpoints, rng: rand.New(rand.NewSource(w.cfg.Seed*1000 + 999))}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.op.run(ctx)
	}()
}

func (o *operator) run(ctx context.Context) {
	for ctx.Err() == nil {
		// Pacing, not synchronisation: a forced release every 50-150 ms.
		select {
		case <-time.After(time.Duration(50+o.rng.Intn(100)) * time.Millisecond):
		case <-ctx.Done():
			return
		}
		if !o.active.Load() || len(o.eps) == 0 {
			continue
		}
		o.forceRelease(ctx, KeyName(o.rng.Intn(o.w.cfg.Keys)))
	}
}

func (o *operator) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), o.w.cfg.OpTimeout)
}

// forceRelease ends the current grant of key, if it is held.
func (o *operator) forceRelease(ctx context.Context, key string) {
	lctx, cancel := o.opCtx(ctx)
	k, err := o.api.Key(lctx, key)
	cancel()
	if err != nil || k.State != "held" {
		return // nothing to end, or nothing known: an operator would look again
	}
	op := o.w.rec.Invoke(history.Op{Client: o.id, Kind: history.Release, Key: key, Token: k.Token, Force: true})
	octx, cancel := o.opCtx(ctx)
	defer cancel()
	octx, att := withAttempts(octx)
	var out *client.ReleaseResponse
	lookedUp := false
	if o.w.cfg.Broken == BrokenForceReleaseLookup {
		out, lookedUp, err = o.releaseLookingUp(octx, key, k.Token, att)
	} else {
		req := client.ReleaseRequest{Key: key, Token: k.Token, Force: true, RequestID: client.NewRequestID()}
		out = &client.ReleaseResponse{}
		err = postRetrying(octx, o.hc, o.eps, nil, att, "/v1/release", func(int) any { return req }, out)
	}
	o.w.rec.Complete(op, func(r *history.Op) {
		r.HeldBy = k.Holder // whose grant the operator meant to end
		if err != nil {
			r.Outcome, r.Code = classify(err, true, att)
			r.Error = err.Error()
			return
		}
		r.Outcome, r.Ended = history.OK, out.Token
		if lookedUp && out.Token != k.Token {
			r.Broken = BrokenForceReleaseLookup
		}
	})
	if lookedUp && err == nil && out.Token != k.Token {
		o.w.mu.Lock()
		o.w.broken++
		o.w.mu.Unlock()
	}
}

// releaseLookingUp is the positive control: each attempt after an unknown
// outcome reads the key's current token again and force-releases that one.
// It reports whether any retry named another token than the first attempt.
func (o *operator) releaseLookingUp(ctx context.Context, key string, first fence.Token, att *attempts) (*client.ReleaseResponse, bool, error) {
	tok, other := first, false
	var out client.ReleaseResponse
	err := postRetrying(ctx, o.hc, o.eps, nil, att, "/v1/release", func(i int) any {
		if i > 0 {
			if k, err := o.api.Key(ctx, key); err == nil {
				tok = k.Token // "the current token", resolved anew: the bug
			}
			other = other || tok != first
		}
		return client.ReleaseRequest{Key: key, Token: tok, Force: true}
	}, &out)
	if err != nil {
		return nil, other, err
	}
	return &out, other, nil
}
