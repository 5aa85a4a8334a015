package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/metrics"
)

// sseHeader sets the headers of a server-sent event stream.
func sseHeader(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
}

// sseWriter writes server-sent events and remembers the first error.
type sseWriter struct {
	cache *frameCache
	w     http.ResponseWriter
	rc    *http.ResponseController
	err   error
	// timeout bounds each write: a watcher that does not read for that
	// long ends its stream (its connection closes) instead of holding a
	// goroutine, a connection and a subscription for ever. armed is when
	// the deadline was last moved.
	timeout time.Duration
	armed   time.Time
	// readable, when set, is the key ACL's test of the keys the stream's
	// identity may read: the events of other keys are not sent.
	readable func(key string) bool
}

// arm moves the write deadline to a timeout from now before a write. It
// moves it only when a tenth of the timeout passed since the last move (a
// clock read per event, not a deadline change), so a write may be cut
// after 90% of the timeout.
func (sw *sseWriter) arm() {
	if sw.timeout <= 0 || sw.err != nil {
		return
	}
	now := time.Now()
	if now.Sub(sw.armed) < sw.timeout/10 {
		return
	}
	sw.armed = now
	if err := sw.rc.SetWriteDeadline(now.Add(sw.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		sw.err = err
	}
}

// end clears the write deadline (the connection may serve other requests
// after a stream that ended cleanly) and says why a stream that failed to
// write ended.
func (sw *sseWriter) end(log hclog.Logger) {
	if !sw.armed.IsZero() && sw.err == nil {
		_ = sw.rc.SetWriteDeadline(time.Time{})
	}
	switch {
	case sw.err == nil:
	case errors.Is(sw.err, os.ErrDeadlineExceeded):
		metrics.WatchEnded.WithLabelValues("slow").Inc()
		log.Debug("watch ends: the watcher did not read", "reason", "slow", "write_timeout", sw.timeout)
	default:
		metrics.WatchEnded.WithLabelValues("gone").Inc()
	}
}

func (sw *sseWriter) event(id, name string, v client.WatchEvent) {
	if sw.err != nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		sw.err = err
		return
	}
	var b []byte
	if id != "" {
		b = append(b, "id: "+id+"\n"...)
	}
	b = append(b, "event: "+name+"\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	sw.arm()
	if sw.err == nil {
		_, sw.err = sw.w.Write(b)
	}
}

func (sw *sseWriter) events(b fsm.Batch) bool {
	for i, ev := range b.Events {
		if sw.arm(); sw.err != nil {
			break
		}
		if !sw.sends(ev) {
			continue
		}
		if ev.Type != fsm.EventDeleted {
			_, sw.err = sw.w.Write(sw.cache.frame(ev))
			continue
		}
		// The events of a reclamation share its index, and each stream
		// has those of its own keys: none is cached, and only the last
		// of the entry's that the stream sends carries the id, so a
		// watcher cut off among them resumes before the entry and gets
		// them all again. (A batch never ends inside an entry.)
		last := true
		for _, next := range b.Events[i+1:] {
			if next.Index != ev.Index {
				break
			}
			if sw.sends(next) {
				last = false
				break
			}
		}
		_, sw.err = sw.w.Write(encodeFrame(ev, last))
	}
	return sw.err == nil
}

// sends reports whether the stream's identity may read ev's key.
func (sw *sseWriter) sends(ev fsm.Event) bool { return sw.readable == nil || sw.readable(ev.Key) }

// encodeFrame encodes an event as a server-sent event, with its index as
// the id when withID.
func encodeFrame(ev fsm.Event, withID bool) []byte {
	data, _ := json.Marshal(watchEventOf(ev)) // a WatchEvent always encodes
	b := make([]byte, 0, len(data)+64)
	if withID {
		b = append(b, "id: "+strconv.FormatUint(ev.Index, 10)+"\n"...)
	}
	b = append(b, "event: "+string(ev.Type)+"\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// frameCache keeps the encoded frames of recent events, by index (so not
// those of a reclamation, whose many events share one): a thousand watchers
// of one key get the same bytes, encoded once. The newest frame is read
// without the lock, as every watcher of a busy key asks for it at once.
type frameCache struct {
	newest atomic.Pointer[cachedFrame]
	mu     sync.Mutex
	frames map[uint64][]byte
	order  []uint64 // indexes in insertion order, for eviction
}

type cachedFrame struct {
	index uint64
	b     []byte
}

const frameCacheSize = 1024

func (c *frameCache) frame(ev fsm.Event) []byte {
	if f := c.newest.Load(); f != nil && f.index == ev.Index {
		return f.b
	}
	c.mu.Lock()
	b, ok := c.frames[ev.Index]
	c.mu.Unlock()
	if ok {
		return b
	}
	b = encodeFrame(ev, true)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frames == nil {
		c.frames = make(map[uint64][]byte, frameCacheSize)
	}
	if cached, ok := c.frames[ev.Index]; ok {
		return cached
	}
	if len(c.order) >= frameCacheSize {
		delete(c.frames, c.order[0])
		c.order = c.order[1:]
	}
	c.frames[ev.Index] = b
	c.order = append(c.order, ev.Index)
	if f := c.newest.Load(); f == nil || f.index < ev.Index {
		c.newest.Store(&cachedFrame{index: ev.Index, b: b})
	}
	return b
}

func (sw *sseWriter) flush() bool {
	if sw.arm(); sw.err == nil {
		sw.err = sw.rc.Flush()
	}
	return sw.err == nil
}

// retry tells an EventSource how long to wait before it reconnects: a
// random 1 to 2 s, so that the watchers of a node that restarts do not all
// come back at once, or longer when a limit asks for more.
func (sw *sseWriter) retry(least time.Duration) {
	ms := max(least.Milliseconds(), 1000+rand.Int64N(1000))
	sw.arm()
	if sw.err == nil {
		_, sw.err = fmt.Fprintf(sw.w, "retry: %d\n\n", ms)
	}
}

// unavailable tells the watcher the node cannot serve its stream now (the
// reason is the error's code) and that the stream ends: reconnect, here
// after the retry delay or elsewhere.
func (sw *sseWriter) unavailable(err error) {
	code, _ := codeOf(err)
	sw.event("", client.WatchUnavailable, client.WatchEvent{Type: client.WatchUnavailable, Reason: code})
	sw.flush()
}

// reset tells the watcher the stream ends and it must resync.
func (sw *sseWriter) reset(err error) {
	reason := "closed"
	switch {
	case errors.Is(err, fsm.ErrLagged):
		reason = "lagged"
	case errors.Is(err, fsm.ErrReset):
		reason = "restored"
	}
	metrics.WatchEnded.WithLabelValues(reason).Inc()
	sw.event("", client.WatchReset, client.WatchEvent{Type: client.WatchReset, Reason: reason})
	sw.flush()
}
