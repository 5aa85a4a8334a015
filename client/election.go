package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fenced/fenced/fence"
)

// ErrNoLeader: the election's key is not held by anyone.
var ErrNoLeader = errors.New("no leader")

// ErrNotLeading: the Election does not hold the leadership (never
// campaigned, resigned, or lost it).
var ErrNotLeading = errors.New("not leading")

// Leader is an election's leader as observed: the holder of the election's
// key, the token of its grant, which is its term of office (a higher token
// is a later leader), and the value it published (its address, say).
// Holder is empty when nobody leads; Token is then the token of the last
// leadership, which ended.
type Leader struct {
	Name   string
	Holder string
	Token  fence.Token
	Value  string
	// Index is the log index of the change that made this the leader.
	Index uint64
}

// ElectionOptions tune an Election.
type ElectionOptions struct {
	// TTL of the leader's grant; DefaultTTL when zero. A leader that stops
	// renewing is replaced about a TTL later.
	TTL time.Duration
	// Margin, as on LeaseOptions: Done closes this long before the grant
	// could expire on the server.
	Margin time.Duration
	// Value is published with the leadership (Proclaim changes it).
	Value string
}

// Election is one candidate of an election named by a key. The leader is
// the holder of the key's grant; Campaign waits for it, the grant's token is
// the leader's term of office, and every write the leader makes to a fenced
// resource carries it.
type Election struct {
	c      *Client
	name   string
	holder string
	o      ElectionOptions

	mu    sync.Mutex
	lease *Lease
}

// closed is the Done of an Election that does not lead.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// NewElection returns the candidate holder in the election name.
func (c *Client) NewElection(name, holder string, o ElectionOptions) *Election {
	return &Election{c: c, name: name, holder: holder, o: o}
}

// campaignWait is how long one acquire waits at the server: below the
// client's default request timeout, so a wait never looks like a failure.
const campaignWait = 15 * time.Second

// Campaign blocks until this candidate leads, or ctx ends. Once it returns
// nil, Token is the term of office and Done closes when the leadership is
// lost (or could be, on the client's clock) or resigned.
func (e *Election) Campaign(ctx context.Context) error {
	if e.leading() {
		return nil
	}
	backoff := 50 * time.Millisecond
	for {
		l, err := e.c.Lease(ctx, e.name, e.holder, LeaseOptions{TTL: e.o.TTL, Margin: e.o.Margin, Wait: campaignWait, Value: e.o.Value})
		if err == nil {
			e.mu.Lock()
			e.lease = l
			e.mu.Unlock()
			return nil
		}
		var apiErr *Error
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrHeld), errors.Is(err, ErrLockDelay):
			backoff = 50 * time.Millisecond // someone leads: wait again at once
		case errors.Is(err, ErrUnavailable), errors.Is(err, ErrUnknownOutcome), errors.Is(err, ErrLeaseLost),
			errors.As(err, &apiErr) && safeToRetry(apiErr.Code):
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (e *Election) current() *Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lease
}

func (e *Election) leading() bool {
	l := e.current()
	if l == nil {
		return false
	}
	select {
	case <-l.Done():
		return false
	default:
		return true
	}
}

// Token returns the term of office (the grant's token), or 0 when this
// candidate never led.
func (e *Election) Token() fence.Token {
	if l := e.current(); l != nil {
		return l.Token()
	}
	return 0
}

// Done is closed when the leadership is lost or resigned; it is closed
// already when this candidate does not lead.
func (e *Election) Done() <-chan struct{} {
	if l := e.current(); l != nil {
		return l.Done()
	}
	return closed
}

// Err says why Done was closed.
func (e *Election) Err() error {
	if l := e.current(); l != nil {
		return l.Err()
	}
	return ErrNotLeading
}

// Lease returns the leadership's lease, or nil.
func (e *Election) Lease() *Lease { return e.current() }

// Resign ends the leadership, so another candidate can be elected at once.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	l := e.lease
	e.lease = nil
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Release(ctx)
}

// Proclaim publishes a new value for the leadership, keeping its token. It
// updates only the leadership's own live grant: it sends again the request
// id of the acquire that made it, which the cluster answers with that grant
// while it lives and never with another. It fails with ErrNotLeading, and
// changes nothing, when the leadership ended (even if this Election has not
// noticed yet: an operator forced it out, its lease ran out).
func (e *Election) Proclaim(ctx context.Context, value string) error {
	l := e.current()
	if l == nil || !e.leading() {
		return ErrNotLeading
	}
	g, err := e.c.Acquire(ctx, AcquireRequest{Key: e.name, Holder: e.holder, TTL: l.Grant().TTL, Value: value, RequestID: l.requestID})
	switch {
	case errors.Is(err, ErrGrantEnded), errors.Is(err, ErrHeld):
		return fmt.Errorf("%w: the leadership of token %s ended", ErrNotLeading, l.Token())
	case err != nil:
		return err
	case g.Token != l.Token():
		// Cannot happen: the request id names the leadership's grant.
		return fmt.Errorf("%w: the cluster answered with grant %s, not the leadership's %s", ErrNotLeading, g.Token, l.Token())
	}
	e.mu.Lock()
	e.o.Value = value
	e.mu.Unlock()
	return nil
}

// Leader returns the current leader, read linearizably, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	k, err := e.c.Key(ctx, e.name)
	if errors.Is(err, ErrUnknownKey) {
		return Leader{}, ErrNoLeader
	}
	if err != nil {
		return Leader{}, err
	}
	if k.State != "held" {
		return Leader{}, ErrNoLeader
	}
	return Leader{Name: e.name, Holder: k.Holder, Token: k.Token, Value: k.Value, Index: k.Index}, nil
}

// Observe reports the leader, and every change of it (a new leader, a new
// value, no leader), until ctx ends. It never reports a leader whose token
// is lower than one it reported: after a reconnection to a node that lags,
// an older leadership is skipped, not reported again. After a resync (the
// stream could not be resumed) it reports the leader the current state
// shows, or that nobody leads when the key is gone (reclaimed).
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 16)
	go func() {
		defer close(out)
		var ob observer
		for ev := range e.c.Watch(ctx, WatchOptions{Key: e.name}) {
			l, ok := ob.next(e.name, ev)
			if !ok {
				continue
			}
			select {
			case out <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// observer turns watch events of an election's key into leader changes.
type observer struct {
	last Leader
	seen bool
	// resync is set by a reset until the sync that ends the resync;
	// stated says whether a state of the key came meanwhile.
	resync, stated bool
}

func (o *observer) next(name string, ev WatchEvent) (Leader, bool) {
	switch ev.Type {
	case WatchReset:
		// The stream starts over from the current state: whatever
		// happened meanwhile (the leader resigned, the key was reclaimed)
		// is in the state that comes before the next sync.
		o.resync, o.stated = true, false
		return Leader{}, false
	case WatchState:
		o.stated = true
	case WatchSync:
		if !o.resync {
			return Leader{}, false
		}
		o.resync = false
		if o.stated {
			return Leader{}, false
		}
		// A resync without a state of the key (a server that does not
		// send an absent state): the key does not exist.
		return o.none(name, ev.Index, 0)
	case WatchError:
		return Leader{}, false
	case WatchLockDelayEnded:
		// The key may be granted again: news for candidates, not for
		// observers. The grant it names ended with an earlier event (or
		// before the stream's state), which said there was no leader.
		return Leader{}, false
	}
	if ev.State == StateAbsent {
		// Deleted (reclaimed), or absent when the stream started.
		return o.none(name, ev.Index, ev.Token)
	}
	l := Leader{Name: name, Token: ev.Token, Index: ev.Index}
	if ev.State == "held" {
		l.Holder, l.Value = ev.Holder, ev.Value
	}
	return o.report(l)
}

// none reports that nobody leads any more, keeping the highest token seen.
// A key that is absent before any leader was reported says nothing new: an
// observer reports leaders, and that one ended.
func (o *observer) none(name string, index uint64, tok fence.Token) (Leader, bool) {
	if !o.seen {
		return Leader{}, false
	}
	return o.report(Leader{Name: name, Token: max(tok, o.last.Token), Index: index})
}

// report returns l unless it says nothing new, or goes back.
func (o *observer) report(l Leader) (Leader, bool) {
	if o.seen && (l.Token < o.last.Token || l.Token == o.last.Token && l.Holder == o.last.Holder && l.Value == o.last.Value) {
		return Leader{}, false
	}
	// A leader that ended stays ended: an event of the same token that
	// says held again is stale.
	if o.seen && l.Token == o.last.Token && o.last.Holder == "" && l.Holder != "" {
		return Leader{}, false
	}
	o.last, o.seen = l, true
	return l, true
}
