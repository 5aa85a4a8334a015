package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fenced/fenced/client"
)

// minSlack is the least time by which the kill margin must exceed the grace
// period: the child is SIGKILLed at deadline+grace, and the server cannot
// expire the grant before deadline+margin, so margin-grace is what is left for
// clock-rate differences and the time a signal takes to land.
const minSlack = 250 * time.Millisecond

// lockTiming is how a lock keeps and gives up its lease. The child may run
// until window after the send time of the last successful renewal, on the
// client's own clock; it is then sent SIGTERM, and SIGKILL grace later. The
// leader restarts a lease's TTL when it grants or renews it, which is after
// the request was sent, so the grant cannot expire on the server before
// sent+ttl = sent+window+margin, and margin > grace: the child is dead before
// the key can be granted to anyone else.
type lockTiming struct {
	ttl    time.Duration
	grace  time.Duration
	margin time.Duration
	// fixedMargin is --margin as given (0: the default, which follows the
	// TTL).
	fixedMargin time.Duration
	window      time.Duration // ttl - margin
	interval    time.Duration // time between renewals: window/3, three tries per window
}

// newLockTiming checks the durations of a lock. margin 0 picks the default,
// the larger of ttl/3 and grace+1s. A TTL shorter than 1.5 times the margin is
// refused: the lease would leave the command less than a third of the TTL
// between renewals and the kill.
func newLockTiming(ttl, grace, margin time.Duration) (lockTiming, error) {
	fixed := margin
	if err := checkTTLWait(ttl, 0); err != nil {
		return lockTiming{}, err
	}
	if grace < 0 {
		return lockTiming{}, fmt.Errorf("--grace must not be negative, not %v", grace)
	}
	switch {
	case margin == 0:
		margin = max(ttl/3, grace+time.Second)
	case margin < grace+minSlack:
		return lockTiming{}, fmt.Errorf("--margin %v must exceed --grace %v by at least %v, so the command is dead before the lease can expire on the server", margin, grace, minSlack)
	}
	if 3*margin > 2*ttl {
		return lockTiming{}, fmt.Errorf("--ttl %v is too short for a kill margin of %v (the larger of ttl/3 and grace+1s, or --margin): the TTL must be at least 1.5 times the margin, %v; raise --ttl or lower --grace",
			ttl, margin, (3*margin+1)/2)
	}
	window := ttl - margin
	return lockTiming{ttl: ttl, grace: grace, margin: margin, fixedMargin: fixed, window: window, interval: window / 3}, nil
}

// keeper renews one grant and knows, on the client's clocks, until when the
// grant is certainly held. It counts from the TTL the server answered, not
// the one --ttl asked for: an acquire by the same holder elsewhere may have
// shortened it, and the server hands the key on once its own TTL ran out.
type keeper struct {
	c     *client.Client
	grant client.Grant
	t     lockTiming

	// lost receives the error of a renewal fenced refused for good (the
	// grant was superseded, released or expired); buffered, sent once.
	lost chan error

	mu      sync.Mutex
	sent    time.Time     // send time of the last successful acquire or renewal
	ttl     time.Duration // the TTL the server answered to it
	lastErr error         // the last failed renewal, for the report
}

func newKeeper(c *client.Client, g client.Grant, t lockTiming, sent time.Time) *keeper {
	return &keeper{c: c, grant: g, t: t, sent: sent, ttl: serverTTL(g.TTL), lost: make(chan error, 1)}
}

// serverTTL reads a TTL the server answered; one that cannot be read counts
// as none, which ends the lock at once (fail closed).
func serverTTL(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// window is how long after the send time the child may run: the server's
// TTL less the kill margin, so the child is dead before the server could
// grant the key to anyone else. Zero or less means at once. Called with mu
// held.
func (k *keeper) window() time.Duration { return k.ttl - k.t.margin }

// interval is the time between renewals: a third of the window, three tries
// per window. Called with mu held.
func (k *keeper) interval() time.Duration { return max(k.window()/3, 10*time.Millisecond) }

// deadline is when the child must be sent SIGTERM, on the monotonic clock.
func (k *keeper) deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sent.Add(k.window())
}

// expired reports whether the deadline has passed on the monotonic clock or
// on the wall clock, whichever says so first. The monotonic clock stops while
// the machine is suspended, the server's does not; the wall clock keeps going
// but may be stepped. Checking both errs only toward stopping early.
func (k *keeper) expired(now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	mono := !now.Before(k.sent.Add(k.window()))
	wall := !now.Round(0).Before(k.sent.Round(0).Add(k.window()))
	return mono || wall
}

func (k *keeper) failure() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastErr
}

// renew renews the grant once, giving up at until. Only a success moves the
// deadline, and only by the time the request was sent: a renewal answered
// late, or after fencectl was stopped, cannot stretch the lease.
func (k *keeper) renew(ctx context.Context, until time.Time) error {
	sent := time.Now()
	rctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	r, err := k.c.Renew(rctx, k.grant.Key, k.grant.Holder, k.grant.Token)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.lastErr = err
		return err
	}
	if sent.After(k.sent) {
		k.sent, k.ttl = sent, serverTTL(r.TTL)
	}
	return nil
}

// run renews every interval until ctx ends, the grant is refused for good, or
// the deadline passes. Each renewal may retry until the deadline; a failure
// that is not final is tried again shortly.
func (k *keeper) run(ctx context.Context) {
	var next time.Time
	k.mu.Lock()
	next = k.sent.Add(k.interval())
	k.mu.Unlock()
	for {
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := k.renew(ctx, k.deadline())
		switch {
		case err == nil:
			k.mu.Lock()
			next = k.sent.Add(k.interval())
			k.mu.Unlock()
		case ctx.Err() != nil:
			return
		case refusedForGood(err):
			k.lost <- err
			return
		case k.expired(time.Now()):
			return // the supervisor stops the child; it reports lastErr
		default:
			k.mu.Lock()
			next = time.Now().Add(min(k.interval(), 250*time.Millisecond))
			k.mu.Unlock()
		}
	}
}

// refusedForGood reports whether fenced answered that the grant cannot be
// renewed any more, as opposed to not answering.
func refusedForGood(err error) bool {
	for _, e := range []error{client.ErrStaleToken, client.ErrExpired, client.ErrNotHolder, client.ErrUnknownKey,
		client.ErrNoLease, client.ErrGrantEnded, client.ErrBadRequest, client.ErrMalformedToken} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
