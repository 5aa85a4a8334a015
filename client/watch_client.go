package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// KeyWait is a blocking read: it returns when the key changed after index
// (or at once for index 0), or when wait ends, with the key's state and the
// index to pass next time. An unknown key gives ErrUnknownKey.
func (c *Client) KeyWait(ctx context.Context, key string, index uint64, wait time.Duration) (*IndexedKey, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+30*time.Second)
	defer cancel()
	var out IndexedKey
	path := "/v1/keys/" + url.PathEscape(key) + "?index=" + strconv.FormatUint(index, 10) + "&wait=" + wait.String()
	if err := c.do(ctx, http.MethodGet, path, nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// WatchOptions say what a watch follows and from where.
type WatchOptions struct {
	// Prefix follows every key with this prefix ("" is every key); Key, if
	// set, follows that key alone.
	Prefix string
	Key    string
	// From resumes after this index. Zero starts with the current state
	// (state events) and follows from there.
	From uint64
	// Progress is how often a quiet stream confirms it is current (a sync
	// event); zero is the server's default. A stream that sends nothing for
	// three of these (a node that froze or was cut off) is abandoned and
	// resumed elsewhere.
	Progress time.Duration
	// Private keeps the watch on a stream of its own. By default, watches
	// of one Client that follow the same key or prefix with the same
	// Progress share one stream once each has caught up with it
	// (watch_share.go); what each delivers is the same either way.
	Private bool
}

// Watch follows changes of keys until ctx ends, then closes the channel. A
// watch the cluster refuses for good (bad parameters, credentials) ends with
// one "error" event whose Reason says why.
// It reconnects by itself, to any endpoint, resuming after the last index it
// delivered; a node that cannot serve a stream yet (an "unavailable" event,
// or a 503) is not reported, only asked again later or passed over. When the
// server cannot resume (the history was compacted or replaced by a restore,
// the index is after the cluster's, the watcher lagged, the state was
// restored) it delivers a "reset" event, then the current state again as
// "state" events and a "sync": whoever builds a view from the events starts
// over at a reset. Events of a key arrive in log order; the tokens of its
// grants strictly increase. The deleted events of one reclamation share an
// index; they are delivered once the last of them (the one with the entry's
// id) came, so a stream cut among them delivers each once all the same.
//
// Each watch starts on a stream of its own, so its state events and first
// sync are as current as a linearizable read sent with it. Unless
// o.Private, watches of this Client that follow the same key or prefix with
// the same Progress then move onto one stream they share, each at an event
// it had delivered, and skip what that stream sends up to there; a watch
// whose receiver falls behind the shared stream goes back to a stream of
// its own, resuming after the last event it delivered.
func (c *Client) Watch(ctx context.Context, o WatchOptions) <-chan WatchEvent {
	out := make(chan WatchEvent, watchBuffer)
	go func() {
		defer close(out)
		if o.Private {
			c.watchLoop(ctx, o, sendTo(ctx, out))
			return
		}
		c.watchShared(ctx, o, out)
	}()
	return out
}

// watchBuffer is the room of a watch's channel: a shared stream hands an
// entry's events to a watch only when they fit in it.
const watchBuffer = 64

// An emitter takes what a stream delivers: the events of one entry (all
// but the last held until the one with the entry's id came), or one event
// that is not a change, with id the index the stream may be resumed after
// once they are delivered (0 for events without an id: state, reset,
// error). A non-nil error ends the stream.
type emitter func(group []WatchEvent, id uint64) error

// sendTo is the emitter of a watch on a stream of its own: it hands every
// event to out, waiting for the receiver.
func sendTo(ctx context.Context, out chan<- WatchEvent) emitter {
	return func(group []WatchEvent, _ uint64) error {
		for _, ev := range group {
			select {
			case out <- ev:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
}

// errResync: the stream ended and cannot be resumed; start over from the
// current state.
var errResync = errors.New("resync")

// errHandedOver: the watch's events come from elsewhere now (a shared
// stream took it over, or ended); the stream that returns it is not
// resumed.
var errHandedOver = errors.New("watch handed over")

func (c *Client) watchLoop(ctx context.Context, o WatchOptions, emit emitter) {
	if len(c.endpoints) == 0 {
		return
	}
	from, fresh := o.From, o.From == 0
	backoff := 50 * time.Millisecond
	for attempt := c.start(); ctx.Err() == nil; attempt++ {
		endpoint := c.endpoints[attempt%len(c.endpoints)]
		last, err := c.watchOnce(ctx, endpoint, o, from, fresh, emit)
		if errors.Is(err, errHandedOver) {
			return
		}
		if last > from || fresh && last > 0 {
			from, fresh, backoff = last, false, 50*time.Millisecond
			attempt-- // the endpoint served: try it again first
		}
		if errors.Is(err, errResync) {
			from, fresh = 0, true
			attempt--
			continue
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && refusedForGood(apiErr.Status) {
			// Bad parameters or credentials: asking again cannot help.
			_ = emit([]WatchEvent{{Type: WatchError, Reason: apiErr.Error()}}, 0)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// refusedForGood reports whether a watch refused with status would be
// refused again however often it is asked.
func refusedForGood(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return true
	}
	return false
}

// watchOnce runs one stream and returns the last index it delivered.
func (c *Client) watchOnce(ctx context.Context, endpoint string, o WatchOptions, from uint64, fresh bool, emit emitter) (uint64, error) {
	q := url.Values{}
	if o.Key != "" {
		q.Set("key", o.Key)
	} else if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if !fresh {
		q.Set("from", strconv.FormatUint(from, 10))
	}
	if o.Progress > 0 {
		q.Set("progress", o.Progress.String())
	}
	// A node that froze or was cut off sends nothing, not even the sync
	// events it owes every Progress: the stream is then abandoned.
	progress := o.Progress
	if progress <= 0 {
		progress = DefaultProgress
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := newIdleTimer(3*progress+time.Second, cancel)
	defer idle.stop()
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, endpoint+"/v1/watch?"+q.Encode(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.roundTrip(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		e := errorOf(resp.StatusCode, data)
		if errors.Is(e, ErrCompacted) {
			return 0, emitReset(emit, "compacted")
		}
		return 0, e
	}
	var (
		last uint64
		dec  eventDecoder
		ev   WatchEvent // one for the stream: decoding into it allocates nothing
		// held keeps the events of an entry until the one with its id:
		// a stream cut among them is resumed from before the entry,
		// which sends them all again.
		held []WatchEvent
		// served is set by the first event of a stream the node serves.
		served bool
	)
	sr := newSSEReader(resp.Body)
	for {
		id, name, data, err := sr.next()
		if err != nil {
			return last, err
		}
		idle.touch()
		if err := dec.decode(data, &ev); err != nil {
			return last, fmt.Errorf("watch: bad event %q: %w", name, err)
		}
		ev.Type = eventName(name)
		switch ev.Type {
		case WatchReset:
			return last, emitReset(emit, ev.Reason)
		case WatchUnavailable:
			// The node cannot serve a stream now; another may.
			return last, &Error{Status: StatusOfCode(ev.Reason),
				ErrorResponse: ErrorResponse{Code: ev.Reason, Message: "the node cannot serve a watch now"}}
		}
		if !served {
			served = true
			c.learnLeader("", "", "", endpoint)
		}
		held = append(held, ev)
		if len(id) == 0 && isChange(ev.Type) {
			continue
		}
		var n uint64
		if len(id) > 0 {
			var ok bool
			if n, ok = parseID(id); !ok {
				return last, fmt.Errorf("watch: bad event id %q", id)
			}
		}
		if err := emit(held, n); err != nil {
			return last, err
		}
		held = held[:0]
		if n > 0 {
			last = n
		}
	}
}

// isChange reports whether an event of type t is a change of a key (each
// carries its entry's index as its id, or, among the many events of one
// entry, the last does).
func isChange(t string) bool {
	switch t {
	case WatchState, WatchSync, WatchReset, WatchError, WatchUnavailable:
		return false
	}
	return true
}

// idleTimer calls a function when it was not touched for a while. A touch
// is a clock read, not a timer reset: a watcher touches it per event.
type idleTimer struct {
	limit time.Duration
	seen  atomic.Int64 // UnixNano of the last touch
	mu    sync.Mutex   // guards t against its own callback
	t     *time.Timer
}

func newIdleTimer(limit time.Duration, fire func()) *idleTimer {
	it := &idleTimer{limit: limit}
	it.touch()
	it.mu.Lock()
	defer it.mu.Unlock()
	it.t = time.AfterFunc(limit, func() {
		if quiet := time.Since(time.Unix(0, it.seen.Load())); quiet < it.limit {
			it.mu.Lock()
			it.t.Reset(it.limit - quiet)
			it.mu.Unlock()
			return
		}
		fire()
	})
	return it
}

func (it *idleTimer) touch() { it.seen.Store(time.Now().UnixNano()) }

func (it *idleTimer) stop() {
	it.mu.Lock()
	it.t.Stop()
	it.mu.Unlock()
}

// emitReset delivers a reset: the stream is to start over from the current
// state.
func emitReset(emit emitter, reason string) error {
	if err := emit([]WatchEvent{{Type: WatchReset, Reason: reason}}, 0); err != nil {
		return err
	}
	return errResync
}
