package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
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
// would. Done right, it resolves the current token once (a linearizable read
// of the key) and sends release {key, token, force}: every retry after an
// unknown outcome names the same grant, so a retry after the first attempt
// committed and handed the key to a waiter is refused (stale_token), never
// ending the waiter's grant.
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
	hc := &http.Client{
		Timeout: w.cfg.AttemptTimeout,
		Transport: trackingTransport{base: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     30 * time.Second,
		}},
	}
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
		out, err = o.api.Release(octx, client.ReleaseRequest{Key: key, Token: k.Token, Force: true})
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
	backoff := 20 * time.Millisecond
	for i := 0; ; i++ {
		if i > 0 {
			if k, err := o.api.Key(ctx, key); err == nil {
				tok = k.Token // "the current token", resolved anew: the bug
			}
			other = other || tok != first
		}
		var out client.ReleaseResponse
		err := o.postOnce(ctx, o.eps[i%len(o.eps)], "/v1/release", client.ReleaseRequest{Key: key, Token: tok, Force: true}, &out)
		if err == nil {
			return &out, other, nil
		}
		// Retry what was not done (503, no connection) or may have been
		// (504, an answer lost: the transport marked it ambiguous); a
		// definite answer of the node ends the call.
		var apiErr *client.Error
		retry := isDial(err) || att.ambiguous.Load()
		if errors.As(err, &apiErr) {
			retry = apiErr.Code == "outcome_unknown" || apiErr.Status == http.StatusServiceUnavailable
		}
		if !retry || ctx.Err() != nil {
			if att.ambiguous.Load() {
				return nil, other, fmt.Errorf("%w: %w", client.ErrUnknownOutcome, err)
			}
			return nil, other, err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// postOnce sends one request to one endpoint, with no retry: the positive
// control retries itself.
func (o *operator) postOnce(ctx context.Context, ep, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ep+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := o.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &client.Error{Status: resp.StatusCode}
		if json.Unmarshal(data, &e.ErrorResponse) != nil || e.Code == "" {
			e.Code, e.Message = fmt.Sprintf("http_%d", resp.StatusCode), string(data)
		}
		return e
	}
	return json.Unmarshal(data, out)
}

func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
