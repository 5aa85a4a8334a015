package fsm

import (
	"time"

	"github.com/fenced/fenced/fence"
)

// RequestIDWindow is how long a request id is still recognised after it
// stopped naming the key's last grant: after its grant was replaced by a
// newer grant of the key, or after the request was answered by renewing its
// holder's grant. A retry inside the window is answered with the request's
// own grant or ErrGrantEnded, never with a second grant. It is far longer
// than any client's retry budget (an acquire waits at most five minutes).
const RequestIDWindow = 15 * time.Minute

// DefaultMaxRetired caps the request ids remembered beyond the key's last
// grant, so that a burst of grants cannot grow the state without bound. At
// more than DefaultMaxRetired / RequestIDWindow (about 580) retirements per
// second, the oldest are forgotten before the window ends.
const DefaultMaxRetired = 1 << 19

// Retired is a request id remembered after it stopped naming its key's last
// grant, with the token of the grant it was answered with.
type Retired struct {
	Key       string
	RequestID string
	Token     fence.Token
	// At is the log time (milliseconds since the Unix epoch, from the
	// leader's append time of the entries) when it was retired.
	At uint64
}

// retiredID identifies a request: a request id names one acquire of one key.
type retiredID struct{ key, requestID string }

// history remembers retired request ids in retirement order, so the oldest
// is forgotten first, by log time or by count. Every replica holds the same
// history: it changes only in Apply and Restore, driven by the log.
type history struct {
	queue []Retired // oldest first, from head on
	head  int
	byID  map[retiredID]fence.Token
	// clock is the highest append time (ms) of any applied entry: the
	// leader's clock as carried in the log, never going backwards.
	clock uint64
}

func newHistory() history { return history{byID: make(map[retiredID]fence.Token)} }

// tick advances the log clock to an entry's append time. A zero time (an
// entry that carries none) and a time earlier than one already seen leave it
// as it is, so a leader whose clock is behind its predecessor's never makes
// the window longer or shorter than it was.
func (h *history) tick(appendedAt time.Time, window time.Duration) {
	if appendedAt.IsZero() || appendedAt.UnixMilli() <= 0 {
		return
	}
	if ms := uint64(appendedAt.UnixMilli()); ms > h.clock {
		h.clock = ms
	}
	w := uint64(window / time.Millisecond)
	for h.len() > 0 && h.clock-h.queue[h.head].At > w {
		h.popFront()
	}
}

// lookup returns the grant a retired request id was answered with.
func (h *history) lookup(key, requestID string) (fence.Token, bool) {
	t, ok := h.byID[retiredID{key, requestID}]
	return t, ok
}

// retire remembers a request id, dropping the oldest beyond max. Callers
// look the id up first: an id is never retired twice while remembered.
func (h *history) retire(key, requestID string, tok fence.Token, max int) {
	if requestID == "" {
		return
	}
	h.queue = append(h.queue, Retired{Key: key, RequestID: requestID, Token: tok, At: h.clock})
	h.byID[retiredID{key, requestID}] = tok
	for h.len() > max {
		h.popFront()
	}
}

func (h *history) len() int { return len(h.queue) - h.head }

func (h *history) popFront() {
	r := h.queue[h.head]
	delete(h.byID, retiredID{r.Key, r.RequestID})
	h.queue[h.head] = Retired{}
	h.head++
	// Reclaim the consumed front once it is half of the slice.
	if h.head > 1024 && h.head*2 > len(h.queue) {
		h.queue = append([]Retired(nil), h.queue[h.head:]...)
		h.head = 0
	}
}

// list copies the remembered ids, oldest first.
func (h *history) list() []Retired {
	return append(make([]Retired, 0, h.len()), h.queue[h.head:]...)
}

// load replaces the history with a snapshot's (already validated).
func loadHistory(clock uint64, rs []Retired) history {
	h := history{queue: append([]Retired(nil), rs...), byID: make(map[retiredID]fence.Token, len(rs)), clock: clock}
	for _, r := range rs {
		h.byID[retiredID{r.Key, r.RequestID}] = r.Token
	}
	return h
}

// RetiredRequests returns how many request ids are remembered beyond their
// key's last grant.
func (f *FSM) RetiredRequests() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.hist.len()
}

// recall answers an acquire whose request id was already answered: with the
// request's own grant when it is still the key's live grant, refused when
// the key is another holder's, ErrGrantEnded when that grant has ended. It
// reports false when the request id is new.
func (f *FSM) recall(c Acquire, k KeyState, exists bool) (*Result, bool) {
	if c.RequestID == "" {
		return nil, false
	}
	tok, known := k.Token, exists && k.RequestID == c.RequestID
	if !known {
		// Also when the key itself is gone: a remembered id never mints.
		if tok, known = f.hist.lookup(c.Key, c.RequestID); !known {
			return nil, false
		}
	}
	switch {
	case !exists || k.Token != tok || k.State != Held:
		return &Result{Key: k, Err: ErrGrantEnded}, true
	case k.Holder != c.Holder:
		return &Result{Key: k, Err: &HeldError{Key: k.Key, Holder: k.Holder, Token: k.Token}}, true
	}
	return nil, false // the request's own live grant: renewed as usual
}
