package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fenced/fenced/fence"
)

// Lease is a grant kept alive by the client. Done is closed when the grant is
// lost or cannot be renewed before its deadline: the moment the last
// successful renewal (or the acquire) was sent, on the client's own clock,
// plus the TTL the server answered with, less a safety margin. From then on
// the holder must stop acting on the key.
//
// The TTL is the server's, not the one asked for: an acquire of the key by
// the same holder elsewhere replaces the TTL on the server, and the server
// ends the grant by its own TTL. Measuring from the send, not the answer,
// keeps the deadline at or before the server's.
type Lease struct {
	c     *Client
	grant Grant
	// requestID is the id of the acquire that made the grant: sent again,
	// it renews that grant while it lives and never makes another.
	requestID string
	margin    time.Duration // fixed; zero: a tenth of the server's TTL
	cancel    context.CancelFunc
	done      chan struct{}

	mu       sync.Mutex
	ttl      time.Duration // the server's last answer
	deadline time.Time
	err      error
}

// LeaseOptions tune a Lease.
type LeaseOptions struct {
	// TTL of the grant; DefaultTTL when zero. A lease survives a leader
	// failover only when TTL - margin > 1.5 × the cluster's failover bound
	// (Status.FailoverMS: 3.3s with the default timeouts, so a TTL of at
	// least 5.5s with the default margin); a shorter one may be lost
	// although its holder is alive.
	TTL time.Duration
	// Wait blocks up to this long for a key that someone else holds.
	Wait time.Duration
	// Margin is subtracted from the deadline, to allow for clock drift and
	// the time a protected write takes; a tenth of the server's TTL when
	// zero. It must be less than TTL, and not negative.
	Margin time.Duration
	// Value is published with the grant (AcquireRequest.Value).
	Value string
	// Limit, when set, makes the lease one of the key's permits, the key
	// being a semaphore of Limit permits (AcquireRequest.Limit); see
	// Semaphore.
	Limit int
	// Mode is AcquireRequest.Mode: ModeShared makes the lease a shared
	// grant (see RWLock).
	Mode string
}

// Lease acquires key for holder and keeps the grant alive until Release or
// until it is lost.
func (c *Client) Lease(ctx context.Context, key, holder string, o LeaseOptions) (*Lease, error) {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	switch {
	case o.TTL < 0:
		return nil, fmt.Errorf("%w: lease TTL %v is negative", ErrBadRequest, o.TTL)
	case o.Margin < 0:
		return nil, fmt.Errorf("%w: lease margin %v is negative", ErrBadRequest, o.Margin)
	case o.Margin >= o.TTL:
		return nil, fmt.Errorf("%w: lease margin %v leaves nothing of the TTL %v", ErrBadRequest, o.Margin, o.TTL)
	}
	req := AcquireRequest{Key: key, Holder: holder, TTL: o.TTL.String(), RequestID: NewRequestID(), Value: o.Value, Limit: o.Limit, Mode: o.Mode}
	if o.Wait > 0 {
		req.Wait = o.Wait.String()
	}
	sent := time.Now()
	g, err := c.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	ttl, err := serverTTL(g.TTL)
	if err == nil && time.Since(sent) > ttl/3 {
		// A waited acquire may return long after it was sent; the lease is
		// only known to run from the send time, so renew once to count
		// from now.
		rsent := time.Now()
		var r *RenewResponse
		if r, err = c.Renew(ctx, key, holder, g.Token); err == nil {
			ttl, err = serverTTL(r.TTL)
			sent = rsent
		}
	}
	if err != nil {
		_, _ = c.Release(context.WithoutCancel(ctx), ReleaseRequest{Key: key, Holder: holder, Token: g.Token})
		return nil, errors.Join(ErrLeaseLost, err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	l := &Lease{c: c, grant: *g, requestID: req.RequestID, margin: o.Margin, cancel: cancel, done: make(chan struct{})}
	l.renewed(sent, ttl)
	go l.keepalive(kctx)
	return l, nil
}

// Semaphore acquires one of key's permits for holder, the key being a
// semaphore of limit permits (1 to MaxLimit), and keeps it alive as Lease
// keeps a lock's grant: at most limit holders hold a permit at once, each
// with its own fencing token, strictly increasing over every grant of the
// key. A key whose live grants are of another shape (another limit, or a
// lock) is refused with ErrLimitMismatch; with every permit taken, with
// ErrHeld, or, with o.Wait, the acquire waits its turn, first come first
// served. Verify allows a permit's token while that permit is live.
func (c *Client) Semaphore(ctx context.Context, key, holder string, limit int, o LeaseOptions) (*Lease, error) {
	if limit < 1 || limit > MaxLimit {
		return nil, fmt.Errorf("%w: semaphore limit %d is outside 1..%d", ErrBadRequest, limit, MaxLimit)
	}
	o.Limit = limit
	return c.Lease(ctx, key, holder, o)
}

// RWLock is a key used as a readers-writer lock: shared grants for
// readers, an exclusive grant (a lock) for a writer. Every grant has its own
// fencing token from the key's one increasing sequence, so a write under an
// exclusive grant carries a token above every earlier reader's, and a
// reader's token is below every later writer's (fence/guard's RW guard
// admits by that rule). Once an acquire waits for the key, a new reader
// waits behind it, so readers never starve a writer.
type RWLock struct {
	c   *Client
	key string
}

// RWLock returns key as a readers-writer lock.
func (c *Client) RWLock(key string) *RWLock { return &RWLock{c: c, key: key} }

// RLock acquires a shared grant for holder and keeps it alive as Lease
// does. It is refused with ErrHeld while a writer holds the key or waits
// for it (with o.Wait, it waits its turn).
func (l *RWLock) RLock(ctx context.Context, holder string, o LeaseOptions) (*Lease, error) {
	o.Mode, o.Limit = ModeShared, 0
	return l.c.Lease(ctx, l.key, holder, o)
}

// Lock acquires the exclusive grant for holder: a Lease of the key, which
// waits for (or, without o.Wait, is refused by) every live reader.
func (l *RWLock) Lock(ctx context.Context, holder string, o LeaseOptions) (*Lease, error) {
	o.Mode, o.Limit = "", 0
	return l.c.Lease(ctx, l.key, holder, o)
}

// serverTTL reads the TTL of an answer; a lease cannot be timed without it.
func serverTTL(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("the server's answer has no usable TTL (%q)", s)
	}
	return d, nil
}

// renewed moves the deadline to ttl after sent, the server's latest word.
func (l *Lease) renewed(sent time.Time, ttl time.Duration) {
	margin := l.margin
	if margin == 0 {
		margin = ttl / 10
	}
	l.mu.Lock()
	l.ttl, l.deadline = ttl, sent.Add(ttl-margin)
	l.mu.Unlock()
}

// every is the renewal interval: a third of the server's TTL.
func (l *Lease) every() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl / 3
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

// keepalive renews every third of the server's TTL and gives up at the
// deadline. A definite refusal (superseded, expired, released) ends the lease
// at once.
func (l *Lease) keepalive(ctx context.Context) {
	timer := time.NewTimer(l.every())
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
		out, err := l.c.Renew(rctx, l.grant.Key, l.grant.Holder, l.grant.Token)
		cancel()
		var ttl time.Duration
		if err == nil {
			if ttl, err = serverTTL(out.TTL); err != nil {
				l.stop(errors.Join(ErrLeaseLost, err))
				return
			}
		}
		var apiErr *Error
		switch {
		case err == nil:
			l.renewed(sent, ttl)
			timer.Reset(l.every())
		case errors.As(err, &apiErr) && !safeToRetry(apiErr.Code) && apiErr.Code != "outcome_unknown":
			l.stop(errors.Join(ErrLeaseLost, err))
			return
		default:
			timer.Reset(min(l.every(), 100*time.Millisecond))
		}
	}
}
