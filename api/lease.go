package api

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/fenced/fenced/fence"
)

// Lease is a grant kept alive by the client. Done is closed when the grant is
// lost or cannot be renewed before its deadline, measured on the client's own
// clock from the moment the last successful renewal was sent, less a safety
// margin: from then on the holder must stop acting on the key.
type Lease struct {
	c      *Client
	grant  Grant
	ttl    time.Duration
	margin time.Duration
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	deadline time.Time
	err      error
}

// LeaseOptions tune a Lease.
type LeaseOptions struct {
	// TTL of the grant; DefaultTTL when zero.
	TTL time.Duration
	// Wait blocks up to this long for a key that someone else holds.
	Wait time.Duration
	// Margin is subtracted from the deadline, to allow for clock drift and
	// the time a protected write takes; TTL/10 when zero.
	Margin time.Duration
}

// Lease acquires key for holder and keeps the grant alive until Release or
// until it is lost.
func (c *Client) Lease(ctx context.Context, key, holder string, o LeaseOptions) (*Lease, error) {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.Margin == 0 {
		o.Margin = o.TTL / 10
	}
	req := AcquireRequest{Key: key, Holder: holder, TTL: o.TTL.String(), RequestID: NewRequestID()}
	if o.Wait > 0 {
		req.Wait = o.Wait.String()
	}
	sent := time.Now()
	g, err := c.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	// A waited acquire may return long after it was sent; the lease is only
	// known to run from the send time, so renew once to count from now.
	if time.Since(sent) > o.TTL/3 {
		rsent := time.Now()
		if _, err := c.Renew(ctx, key, holder, g.Token); err != nil {
			_, _ = c.Release(context.WithoutCancel(ctx), ReleaseRequest{Key: key, Holder: holder, Token: g.Token})
			return nil, errors.Join(ErrLeaseLost, err)
		}
		sent = rsent
	}
	kctx, cancel := context.WithCancel(context.Background())
	l := &Lease{c: c, grant: *g, ttl: o.TTL, margin: o.Margin, cancel: cancel, done: make(chan struct{}), deadline: sent.Add(o.TTL - o.Margin)}
	go l.keepalive(kctx)
	return l, nil
}

// Token returns the fencing token of the grant.
func (l *Lease) Token() fence.Token { return l.grant.Token }

// Grant returns the grant.
func (l *Lease) Grant() Grant { return l.grant }

// Done is closed when the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err says why Done was closed.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Deadline returns the time, on the client's clock, until which the lease is
// known to be held.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// SetHeader puts the token on an outgoing request for a fenced resource.
func (l *Lease) SetHeader(h http.Header) { h.Set("Fencing-Token", l.grant.Token.String()) }

// Release ends the grant and stops the keepalive.
func (l *Lease) Release(ctx context.Context) error {
	l.stop(errors.New("released"))
	_, err := l.c.Release(ctx, ReleaseRequest{Key: l.grant.Key, Holder: l.grant.Holder, Token: l.grant.Token})
	if errors.Is(err, ErrExpired) || errors.Is(err, ErrStaleToken) {
		return nil // the grant had ended already: nothing left to release
	}
	return err
}

func (l *Lease) stop(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	l.cancel()
	close(l.done)
}

// keepalive renews every TTL/3 and gives up at the deadline. A definite
// refusal (superseded, expired, released) ends the lease at once.
func (l *Lease) keepalive(ctx context.Context) {
	every := l.ttl / 3
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		dl := l.Deadline()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(dl)):
			l.stop(errors.Join(ErrLeaseLost, errors.New("could not renew before the deadline")))
			return
		case <-timer.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(ctx, dl)
		_, err := l.c.Renew(rctx, l.grant.Key, l.grant.Holder, l.grant.Token)
		cancel()
		var apiErr *Error
		switch {
		case err == nil:
			l.mu.Lock()
			l.deadline = sent.Add(l.ttl - l.margin)
			l.mu.Unlock()
			timer.Reset(every)
		case errors.As(err, &apiErr) && !safeToRetry(apiErr.Code) && apiErr.Code != "outcome_unknown":
			l.stop(errors.Join(ErrLeaseLost, err))
			return
		default:
			timer.Reset(min(every, 100*time.Millisecond))
		}
	}
}
