package fsm

import (
	heapq "container/heap"
	"sort"
	"strings"
	"time"

	"github.com/fenced/fenced/fence"
)

// RequestIDWindow is how long a request id is still recognised after it
// stopped naming its key's last grant: after its grant was replaced by a
// newer grant of the key, after the request was answered by renewing its
// holder's grant, or, for a release, after it was applied. A retry inside
// the window is answered with the request's own grant (or ErrGrantEnded, or
// the grant its release ended), never with a second grant and never with an
// effect on a later grant. It is far longer than any client's retry budget
// (an acquire waits at most five minutes).
const RequestIDWindow = 15 * time.Minute

// DefaultMaxRetired caps the request ids remembered beyond the key's last
// grant, over every client, so that a burst of grants cannot grow the state
// without bound.
const DefaultMaxRetired = 1 << 19

// DefaultMaxRetiredPerOwner is each client's share of the history (see
// Retired.Owner): past it, a client's own oldest ids are forgotten first, so
// one client's volume never shortens another's window. At more than
// DefaultMaxRetiredPerOwner / RequestIDWindow (about 72) retirements per
// second, a client's own oldest are forgotten before the window ends; only
// when more than DefaultMaxRetired / DefaultMaxRetiredPerOwner (8) clients
// fill their shares at once does the oldest of all go first.
const DefaultMaxRetiredPerOwner = 1 << 16

// RequestKind says which kind of request an id named: request ids of
// acquires and of releases are kept apart, so a client reusing an id for
// both never gets one's answer for the other.
type RequestKind uint8

// The kinds of remembered requests.
const (
	KindAcquire RequestKind = 0
	KindRelease RequestKind = 1
)

// Retired is a request id remembered after it stopped naming its key's last
// grant (or, for a release, once applied), with the token of the grant it
// was answered with (or, for a release, ended).
type Retired struct {
	Key       string
	RequestID string
	Token     fence.Token
	// At is the log time (milliseconds of the log clock, see history) when
	// it was retired.
	At uint64
	// Kind is the kind of request the id named.
	Kind RequestKind
	// Owner is the share of the history the id counts against: the client
	// identity its holder belongs to, the holder's name up to its first "/"
	// (with authentication on, holders are bound to identities that way);
	// "" for a forced release, which names no holder.
	Owner string

	// seq orders every retirement; it is not replicated (a restore numbers
	// the records in their order again).
	seq uint64
}

// maxOwnerLen bounds an owner's name: a holder's.
const maxOwnerLen = 128

// OwnerOf returns the share of the history a holder's request ids count
// against.
func OwnerOf(holder string) string {
	owner, _, _ := strings.Cut(holder, "/")
	return owner
}

// retiredID identifies a request: a request id names one request of one
// kind on one key.
type retiredID struct {
	key, requestID string
	kind           RequestKind
}

// history remembers retired request ids, per owner in retirement order, so
// that the oldest of an owner is forgotten first when it is over its share,
// and the oldest of all by log time or by the global cap. Every replica holds
// the same history: it changes only in Apply and Restore, driven by the log.
type history struct {
	owners map[string]*ownerQueue
	// fronts orders the owners with ids by their oldest id's seq: its top
	// holds the oldest id of all.
	fronts ownerHeap
	byID   map[retiredID]fence.Token
	live   int
	seq    uint64
	// early counts the ids forgotten before the window ended (by a cap).
	early uint64
	clock logClock
}

// ownerQueue is one owner's remembered ids, oldest first from head.
type ownerQueue struct {
	name  string
	items []Retired
	head  int
	at    int // index in the heap
}

func (q *ownerQueue) len() int        { return len(q.items) - q.head }
func (q *ownerQueue) front() *Retired { return &q.items[q.head] }

func newHistory() history {
	return history{owners: map[string]*ownerQueue{}, byID: map[retiredID]fence.Token{}}
}

// retirePolicy is what a retirement obeys: the global cap and, for entries
// written by current nodes, the owner's share (0: none, as the older entry
// versions were applied).
type retirePolicy struct {
	max, perOwner int
}

// lookup returns the grant a retired request id was answered with.
func (h *history) lookup(key, requestID string, kind RequestKind) (fence.Token, bool) {
	t, ok := h.byID[retiredID{key, requestID, kind}]
	return t, ok
}

// retire remembers a request id, unless it is remembered already (then the
// first retirement stands: an id is named once), and forgets the owner's
// oldest beyond its share and the oldest of all beyond the global cap.
func (h *history) retire(r Retired, p retirePolicy) {
	id := retiredID{r.Key, r.RequestID, r.Kind}
	if r.RequestID == "" {
		return
	}
	if _, known := h.byID[id]; known {
		return
	}
	r.At, r.seq = h.clock.ms, h.seq
	h.seq++
	q := h.owners[r.Owner]
	if q == nil {
		q = &ownerQueue{name: r.Owner}
		h.owners[r.Owner] = q
	}
	q.items = append(q.items, r)
	h.byID[id] = r.Token
	h.live++
	if q.len() == 1 {
		heapq.Push(&h.fronts, q)
	}
	for p.perOwner > 0 && q.len() > p.perOwner {
		h.pop(q)
		h.early++
	}
	for h.live > p.max {
		h.pop(h.fronts[0])
		h.early++
	}
}

// expire forgets the ids older than window by the log clock.
func (h *history) expire(window time.Duration) {
	w := uint64(window / time.Millisecond)
	for len(h.fronts) > 0 {
		q := h.fronts[0]
		if h.clock.ms-q.front().At <= w {
			return
		}
		h.pop(q)
	}
}

// pop forgets q's oldest id.
func (h *history) pop(q *ownerQueue) {
	r := q.front()
	delete(h.byID, retiredID{r.Key, r.RequestID, r.Kind})
	q.items[q.head] = Retired{}
	q.head++
	h.live--
	switch {
	case q.len() == 0:
		heapq.Remove(&h.fronts, q.at)
		delete(h.owners, q.name)
	default:
		heapq.Fix(&h.fronts, q.at)
		// Reclaim the consumed front once it is half of the slice.
		if q.head > 1024 && q.head*2 > len(q.items) {
			q.items = append([]Retired(nil), q.items[q.head:]...)
			q.head = 0
		}
	}
}

func (h *history) len() int { return h.live }

// list copies the remembered ids in retirement order, oldest first.
func (h *history) list() []Retired {
	out := make([]Retired, 0, h.live)
	for _, q := range h.owners {
		out = append(out, q.items[q.head:]...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	for i := range out {
		out[i].seq = 0
	}
	return out
}

// loadHistory replaces the history with a snapshot's (already validated:
// in retirement order, each id once).
func loadHistory(clock logClock, rs []Retired) history {
	h := newHistory()
	h.clock = clock
	for _, r := range rs {
		at := r.At
		h.retire(r, retirePolicy{max: len(rs)})
		// retire stamps the clock's time; the record keeps its own.
		q := h.owners[r.Owner]
		q.items[len(q.items)-1].At = at
	}
	return h
}

// ownerHeap orders owner queues by the seq of their oldest id.
type ownerHeap []*ownerQueue

func (o ownerHeap) Len() int           { return len(o) }
func (o ownerHeap) Less(i, j int) bool { return o[i].front().seq < o[j].front().seq }
func (o ownerHeap) Swap(i, j int) {
	o[i], o[j] = o[j], o[i]
	o[i].at, o[j].at = i, j
}
func (o *ownerHeap) Push(x any) {
	q := x.(*ownerQueue)
	q.at = len(*o)
	*o = append(*o, q)
}
func (o *ownerHeap) Pop() any {
	old := *o
	q := old[len(old)-1]
	*o = old[:len(old)-1]
	return q
}

// logClock is the time the FSM reads, from the leaders' append times carried
// in the entries: every replica sees the same. It never goes backwards.
//
// Entries of the older versions advance it to their append time (ms), the
// rule they were first applied with. Current entries advance it only by the
// time that passed on one leader's clock: by the difference of two append
// times of the same term. A leader whose clock runs ahead therefore cannot
// age the history (the first entry of a term sets its baseline and adds
// nothing), and neither can a clock step within a term backwards; the price
// is that the time between two leaders' entries does not count, so ids are
// remembered somewhat longer than the window, never shorter.
type logClock struct {
	ms uint64
	// term and last are the term and append time (ms) of the latest entry
	// that advanced the clock; elapsed is set by the first current entry,
	// and from then on every entry advances it by elapsed time only.
	term, last uint64
	elapsed    bool
}

// tick advances the clock to an entry's append time, by the rule of the
// entry's version (elapsed: a current entry).
func (c *logClock) tick(term uint64, appendedAt time.Time, elapsed bool) {
	if appendedAt.IsZero() || appendedAt.UnixMilli() <= 0 {
		return
	}
	ms := uint64(appendedAt.UnixMilli())
	c.elapsed = c.elapsed || elapsed
	switch {
	case !c.elapsed:
		c.ms = max(c.ms, ms)
	case term == c.term && c.last != 0:
		if ms > c.last {
			c.ms += ms - c.last
		}
	}
	if term != c.term || ms > c.last {
		c.term, c.last = term, ms
	}
}

// RetiredRequests returns how many request ids are remembered beyond their
// key's last grant.
func (f *FSM) RetiredRequests() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.hist.len()
}

// ForgottenEarly returns how many request ids were forgotten before their
// window ended, because their owner or all clients together were over
// their share: a retry of one of them within the window would find no
// answer (an acquire's could mint another grant).
func (f *FSM) ForgottenEarly() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.hist.early
}

// RecallRelease returns the grant a release with this request id ended,
// when it was applied within the window.
func (f *FSM) RecallRelease(key, requestID string) (fence.Token, bool) {
	if requestID == "" {
		return 0, false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.hist.lookup(key, requestID, KindRelease)
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
		if tok, known = f.hist.lookup(c.Key, c.RequestID, KindAcquire); !known {
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
