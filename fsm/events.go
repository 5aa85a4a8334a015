package fsm

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenced/fenced/fence"
)

// EventType names one kind of change of a key, as watchers see it.
type EventType string

// The changes a watcher hears of. Each committed entry changes at most one
// key, so a change is named by its entry's log index alone.
const (
	// EventGranted: a new grant (a new holder, a new token).
	EventGranted EventType = "granted"
	// EventRenewed: the holder acquired its own grant again; the token is
	// unchanged, the TTL and lock-delay may be new.
	EventRenewed EventType = "renewed"
	// EventReleased: the holder released its grant.
	EventReleased EventType = "released"
	// EventForceReleased: an operator ended the grant.
	EventForceReleased EventType = "force_released"
	// EventExpired: the lease ran out on the leader's clock. When LockDelay
	// is set, the key's lock-delay starts with this event.
	EventExpired EventType = "expired"
	// EventLockDelayEnded: the lock-delay that an expiry started ran out on
	// the leader's clock, and the key may be granted again. Holder and
	// Token name the grant that expired (no new grant), State is expired,
	// LockDelay is 0. The leader commits it when the delay ends, so it
	// follows the delay's end by up to a commit (see docs/WATCH.md). When a
	// waiter's acquire commits first, its grant says the delay is over and
	// this event does not come.
	EventLockDelayEnded EventType = "lock_delay_ended"
	// EventHandedOff: the grant ended (Ended says how) and the first waiter
	// got the key in the same entry; Prev* name the ended grant.
	EventHandedOff EventType = "handed_off"
	// EventDeleted: a reclamation forgot the key, whose last grant had
	// ended: Holder and Token name that grant, State is 0 (no state). One
	// entry forgets many keys: its events share its index, in the
	// entry's order.
	EventDeleted EventType = "deleted"
)

// Event is one committed change of a key, with the key's grant after it.
// Its content depends only on the log, so every node derives the same event
// for the same entry.
type Event struct {
	// Index is the log index of the entry that made the change.
	Index  uint64
	Type   EventType
	Key    string
	Holder string
	Token  fence.Token
	TTL    time.Duration
	// LockDelay of the grant; with EventExpired, the lock-delay that starts.
	LockDelay time.Duration
	// State is the key's state after the change.
	State State
	// Limit is the key's limit when the grant is a semaphore permit; 0 for
	// a lock. Shared marks a shared grant's event. (Both sit in State's
	// padding.)
	Limit  uint16
	Shared bool
	// Value is what the holder published with the grant.
	Value string
	// PrevHolder and PrevToken name the grant that ended, for a handoff.
	PrevHolder string
	PrevToken  fence.Token
	// Ended is how the previous grant of a handoff ended (released,
	// force_released or expired).
	Ended EventType
}

// change returns the change one applied command made to a key, if any.
func change(cmd Command, res *Result, index uint64) (Event, bool) {
	if res == nil || res.Err != nil && res.Next == nil {
		return Event{}, false
	}
	var ended EventType
	switch c := cmd.(type) {
	case Acquire:
		if !res.Changed {
			return Event{}, false
		}
		if res.Renewed {
			return eventOf(EventRenewed, res.Key, index), true
		}
		return eventOf(EventGranted, res.Key, index), true
	case Release:
		ended = EventReleased
		if c.Force {
			ended = EventForceReleased
		}
	case Expire:
		ended = EventExpired
	case DelayEnd:
		if !res.Changed {
			return Event{}, false
		}
		return eventOf(EventLockDelayEnded, res.Key, index), true
	default:
		return Event{}, false
	}
	if !res.Changed {
		return Event{}, false
	}
	if n := res.Next; n != nil && n.Err == nil && n.Changed {
		ev := eventOf(EventHandedOff, n.Key, index)
		ev.PrevHolder, ev.PrevToken, ev.Ended = res.Key.Holder, res.Key.Token, ended
		return ev, true
	}
	return eventOf(ended, res.Key, index), true
}

func eventOf(t EventType, k KeyState, index uint64) Event {
	return Event{Index: index, Type: t, Key: k.Key, Holder: k.Holder, Token: k.Token, TTL: k.TTL, LockDelay: k.LockDelay, State: k.State, Value: k.Value, Limit: k.Limit, Shared: k.Shared}
}

// Errors a subscription ends with.
var (
	// ErrCompacted: the history a subscription needs (from its index on) is
	// no longer held; read the current state and watch from its index.
	ErrCompacted = errors.New("fsm: the watch history from that index is no longer held")
	// ErrFuture: a subscription asked for the changes after an index this
	// node has not applied (an id kept from another cluster, or from
	// before a restore): what it would skip cannot be told. It is a kind
	// of ErrCompacted (errors.Is): resync from a fresh read.
	ErrFuture error = futureError{}
	// ErrLagged: the watcher fell too far behind and its buffer was dropped;
	// it skipped nothing, but must resync from a fresh read.
	ErrLagged = errors.New("fsm: the watcher fell too far behind")
	// ErrReset: the state was replaced by a snapshot, so the history has a
	// gap; resync from a fresh read.
	ErrReset = errors.New("fsm: the state was replaced from a snapshot")
	// ErrClosed: the subscription was closed.
	ErrClosed = errors.New("fsm: subscription closed")
)

type futureError struct{}

func (futureError) Error() string {
	return "fsm: the watch index is after the last entry this node applied"
}

// Is makes a future index a kind of compacted history.
func (futureError) Is(target error) bool { return target == ErrCompacted }

// Defaults of a Feed.
const (
	// DefaultHistory is the number of recent events a node keeps for
	// watchers that resume.
	DefaultHistory = 65536
	// DefaultPending is how many undelivered events a watcher may have
	// beyond its initial backlog before it is told it lagged.
	DefaultPending = 4096
	// catchupChunk is how many events of the history a subscription that
	// resumes from the past reads per poll, under the feed's lock: the
	// apply path, which publishes under that lock, waits for at most this
	// many, however long the backlog.
	catchupChunk = 1024
)

// Feed is the FSM's event feed: a bounded ring of recent events and the
// subscriptions that hear of new ones. The events are deterministic; the
// ring is per node (each node keeps what it applied since it started or
// restored its last snapshot).
type Feed struct {
	mu    sync.Mutex
	ring  []Event
	start int // position of the oldest event in ring
	n     int // events held
	since uint64
	last  atomic.Uint64
	// gen counts resets: a subscription still taking its backlog from the
	// history notices a reset by it.
	gen uint64
	// unanchored is set from a reset until the first entry after it is
	// applied (anchor); read without the lock on the apply path.
	unanchored atomic.Bool
	// chunk bounds the events a catching-up subscription reads per poll.
	chunk int
	// noted is the index of the last command entry applied to the state,
	// written under the FSM's lock (see KeysAt).
	noted   atomic.Uint64
	pending int
	// The subscriptions, by what they follow: an event is offered to the
	// watchers of its key and to the prefix watchers alone, not to every
	// subscription.
	byKey    map[string]map[*Sub]struct{}
	prefixed map[*Sub]struct{}
}

func newFeed() *Feed {
	return &Feed{ring: make([]Event, DefaultHistory), pending: DefaultPending, chunk: catchupChunk,
		byKey: make(map[string]map[*Sub]struct{}), prefixed: make(map[*Sub]struct{})}
}

func (fd *Feed) add(s *Sub) {
	if !s.exact {
		fd.prefixed[s] = struct{}{}
		return
	}
	set := fd.byKey[s.prefix]
	if set == nil {
		set = make(map[*Sub]struct{})
		fd.byKey[s.prefix] = set
	}
	set[s] = struct{}{}
}

func (fd *Feed) remove(s *Sub) {
	if !s.exact {
		delete(fd.prefixed, s)
		return
	}
	if set := fd.byKey[s.prefix]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(fd.byKey, s.prefix)
		}
	}
}

// Feed returns the FSM's event feed.
func (f *FSM) Feed() *Feed { return f.feed }

// SetLimits is a test hook: it sets the number of events kept for resumes
// and the pending bound per watcher (values <= 0 keep the current ones), so
// that tests reach a lagging watcher or a resume past the history with a
// few events. No node calls it; a node keeps DefaultHistory and
// DefaultPending. It empties the history, so call it before the FSM
// applies anything.
func (fd *Feed) SetLimits(history, pending int) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if history > 0 {
		fd.ring, fd.start, fd.n = make([]Event, history), 0, 0
		fd.since = fd.last.Load()
	}
	if pending > 0 {
		fd.pending = pending
	}
}

// Last returns the index of the last entry whose events were published:
// every change up to it is in the state.
func (fd *Feed) Last() uint64 { return fd.last.Load() }

// Since returns the index after which every event is still held.
func (fd *Feed) Since() uint64 {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return fd.since
}

// anchor is told of each entry applied (its index, whatever its type)
// while the FSM's lock is held. The first one after a reset moves the start
// of the history up to the index before it: the state was replaced by a
// snapshot whose own label may be lower than indexes some node served
// before it (a backup restored into a running cluster labels its state
// with an index of this log, while raft puts the snapshot after every entry
// it had), and every entry between the snapshot and this one changed no
// key. A watcher that resumes from any index served before the snapshot is
// then refused, and one from the restored state's own indexes is not.
func (fd *Feed) anchor(index uint64) {
	if !fd.unanchored.Load() {
		return
	}
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if !fd.unanchored.Swap(false) {
		return
	}
	if index == 0 || index-1 <= fd.since {
		return
	}
	fd.since = index - 1
	if fd.last.Load() < fd.since {
		fd.last.Store(fd.since)
	}
	if fd.noted.Load() < fd.since {
		fd.noted.Store(fd.since)
	}
}

// note appends the changes a command made, if any, to changes: one for
// most, one per forgotten key for a reclamation.
func (fd *Feed) note(changes []Event, cmd Command, res *Result, index uint64) []Event {
	fd.noted.Store(index)
	if _, ok := cmd.(Reclaim); ok && res != nil && res.Reclaim != nil {
		for _, k := range res.Reclaim.Forgotten {
			changes = append(changes, Event{Index: index, Type: EventDeleted, Key: k.Key, Holder: k.Holder, Token: k.Token})
		}
		return changes
	}
	if _, ok := cmd.(AcquireMulti); ok && res != nil && res.Err == nil {
		// One entry, a grant (or renewal) of each key, in the request's
		// order: the events share the entry's index.
		for _, k := range *res.Multi {
			t := EventGranted
			if k.Index != index {
				t = EventRenewed
			}
			changes = append(changes, eventOf(t, k, index))
		}
		return changes
	}
	if ev, ok := change(cmd, res, index); ok {
		changes = append(changes, ev)
	}
	return changes
}

// publish records the changes of entries up to last and hands them to the
// subscriptions that match.
func (fd *Feed) publish(changes []Event, last uint64) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	for len(changes) > 0 {
		// The changes of one entry (a reclamation's are many) reach a
		// watcher together: a poll never takes part of an entry.
		n := 1
		for n < len(changes) && changes[n].Index == changes[0].Index {
			n++
		}
		entry := changes[:n]
		changes = changes[n:]
		for _, ev := range entry {
			fd.push(ev)
			// A key is changed once per entry: its watchers get one event.
			for s := range fd.byKey[ev.Key] {
				fd.offer(s, ev)
			}
		}
		for s := range fd.prefixed {
			if len(entry) == 1 {
				fd.offer(s, entry[0])
			} else if !s.offerAll(entry) {
				fd.remove(s)
			}
		}
	}
	if last > fd.last.Load() {
		fd.last.Store(last)
	}
}

// offer hands ev to s if it follows it, and drops s when it lagged.
func (fd *Feed) offer(s *Sub, ev Event) {
	if s.matches(ev) && !s.offer(ev) {
		fd.remove(s)
	}
}

// at returns the i-th oldest event of the history. The caller holds fd.mu.
func (fd *Feed) at(i int) Event { return fd.ring[(fd.start+i)%len(fd.ring)] }

// after returns the position in the history of the first event after index
// (fd.n when none). The history is in log order. The caller holds fd.mu.
func (fd *Feed) after(index uint64) int {
	return sort.Search(fd.n, func(i int) bool { return fd.ring[(fd.start+i)%len(fd.ring)].Index > index })
}

func (fd *Feed) push(ev Event) {
	if len(fd.ring) == 0 {
		fd.since = ev.Index
		return
	}
	if fd.n == len(fd.ring) {
		// The oldest event goes: a resume needs an index at or after it.
		fd.since = fd.ring[fd.start].Index
		fd.start = (fd.start + 1) % len(fd.ring)
		fd.n--
	}
	fd.ring[(fd.start+fd.n)%len(fd.ring)] = ev
	fd.n++
}

// reset empties the history after the state was replaced (a snapshot was
// restored, or the FSM was emptied) at index applied; every subscription
// ends with ErrReset. The history then starts at applied until the first
// entry after the replaced state is applied (see anchor).
func (fd *Feed) reset(applied uint64) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	fd.start, fd.n, fd.since = 0, 0, applied
	fd.unanchored.Store(true)
	fd.gen++
	fd.last.Store(applied)
	fd.noted.Store(applied)
	for _, set := range fd.byKey {
		for s := range set {
			s.fail(ErrReset)
		}
	}
	for s := range fd.prefixed {
		s.fail(ErrReset)
	}
	clear(fd.byKey)
	clear(fd.prefixed)
}

// Subscribe starts a subscription to the changes of keys with prefix (or of
// the key itself when exact) made by entries after index from. The events
// after from that the history holds are its first events. It fails with
// ErrCompacted when the history no longer reaches back to from, and with
// ErrFuture when from is after the last entry applied (wait until the
// node applied an index before subscribing from it).
//
// It copies nothing under the feed's lock: a subscription with a backlog
// holds a cursor into the history and takes the backlog a chunk per poll,
// then joins the live feed once it reached the newest event.
func (fd *Feed) Subscribe(prefix string, exact bool, from uint64) (*Sub, error) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if from < fd.since {
		return nil, ErrCompacted
	}
	if from > fd.last.Load() {
		// Also while a replaced state awaits its first entry (anchor):
		// no index after its own was served from it yet.
		return nil, ErrFuture
	}
	s := &Sub{feed: fd, prefix: prefix, exact: exact, from: from, pending: fd.pending, wake: make(chan struct{}, 1),
		cursor: from, gen: fd.gen}
	if fd.n == 0 || fd.at(fd.n-1).Index <= from {
		s.goLive()
	} else {
		s.signal() // a backlog to take: the first poll starts on it
	}
	return s, nil
}

// goLive makes s hear of new events from publish. The caller holds fd.mu.
func (s *Sub) goLive() {
	s.live.Store(true)
	s.mu.Lock()
	s.max = s.pending
	s.mu.Unlock()
	s.feed.add(s)
}

// catchUp takes the next chunk of s's backlog from the history into buf,
// and joins the live feed when it reached the newest event. The chunk never
// ends inside the events of one entry, so every batch ends at an entry's
// end.
func (s *Sub) catchUp(buf []Event) (Batch, error) {
	fd := s.feed
	fd.mu.Lock()
	defer fd.mu.Unlock()
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	switch {
	case err != nil:
		return Batch{}, err
	case s.gen != fd.gen:
		s.fail(ErrReset)
		return Batch{}, ErrReset
	case s.cursor < fd.since:
		// The history moved past what it had yet to take.
		s.fail(ErrLagged)
		return Batch{}, ErrLagged
	}
	i := fd.after(s.cursor)
	end := min(fd.n, i+max(fd.chunk, 1))
	for end < fd.n && fd.at(end).Index == fd.at(end-1).Index {
		end++
	}
	out := buf[:0]
	for j := i; j < end; j++ {
		if ev := fd.at(j); s.matches(ev) {
			out = append(out, ev)
		}
	}
	if end > i {
		s.cursor = fd.at(end - 1).Index
	}
	through := s.cursor
	if end == fd.n {
		// Publish takes the same lock: no event falls between the
		// history read and the live feed.
		s.goLive()
		through = max(through, fd.last.Load())
	} else {
		s.signal()
	}
	return Batch{Events: out, Through: through}, nil
}

// Changed reports whether the history holds a change of key after index
// from; known is false when it no longer reaches back to from.
func (fd *Feed) Changed(key string, from uint64) (changed, known bool) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if from < fd.since {
		return false, false
	}
	for i := fd.n - 1; i >= 0; i-- {
		ev := fd.ring[(fd.start+i)%len(fd.ring)]
		if ev.Index <= from {
			break
		}
		if ev.Key == key {
			return true, true
		}
	}
	return false, true
}

// Sub is one subscription to a Feed. It buffers up to a bound of events the
// watcher has not taken; past it the subscription ends with ErrLagged
// rather than drop an event.
type Sub struct {
	feed   *Feed
	prefix string
	exact  bool
	from   uint64
	wake   chan struct{}
	// pending bounds the buffer once the initial backlog was taken.
	pending int
	// live is set once the subscription took its backlog from the history
	// and hears of new events from publish. Before, cursor is the index
	// through which it took the history, and gen the feed's generation it
	// started in. Only the poller moves them, under the feed's lock.
	live   atomic.Bool
	cursor uint64
	gen    uint64

	mu  sync.Mutex
	max int
	buf []Event
	err error
}

func (s *Sub) matches(ev Event) bool {
	if ev.Index <= s.from {
		return false
	}
	if s.exact {
		return ev.Key == s.prefix
	}
	return strings.HasPrefix(ev.Key, s.prefix)
}

// offer buffers an event; false when the watcher lagged and the
// subscription ended.
func (s *Sub) offer(ev Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	if len(s.buf) >= s.max {
		s.buf, s.err = nil, ErrLagged
		return false
	}
	s.buf = append(s.buf, ev)
	s.signal()
	return true
}

// offerAll buffers the events of one entry that s follows, all or none;
// false when the watcher lagged and the subscription ended.
func (s *Sub) offerAll(entry []Event) bool {
	n := 0
	for _, ev := range entry {
		if s.matches(ev) {
			n++
		}
	}
	if n == 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	if len(s.buf)+n > s.max {
		s.buf, s.err = nil, ErrLagged
		s.signal()
		return false
	}
	for _, ev := range entry {
		if s.matches(ev) {
			s.buf = append(s.buf, ev)
		}
	}
	s.signal()
	return true
}

func (s *Sub) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.buf, s.err = nil, err
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Sub) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Batch is what Next and Poll return: events in log order, and the index
// through which the subscription has seen every change (Through is at least
// the index of the last event, and at least the index it started from).
type Batch struct {
	Events  []Event
	Through uint64
}

// Next waits until events are buffered and returns them. It returns
// ErrLagged, ErrReset or ErrClosed when the subscription ended, and ctx's
// error when ctx ends first.
func (s *Sub) Next(ctx context.Context) (Batch, error) {
	for {
		b, err := s.Poll()
		if err != nil || len(b.Events) > 0 {
			return b, err
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		}
	}
}

// Poll returns the buffered events, maybe none, without waiting, and the
// index through which the subscription has seen every change: a progress
// mark a watcher may resume from.
func (s *Sub) Poll() (Batch, error) { return s.PollInto(nil) }

// PollInto is Poll that hands buf (its length ignored) to the subscription
// to buffer the next events in: a watcher that polls per event passes the
// events of its previous batch, once done with them, so that buffering an
// event for each of a thousand watchers allocates nothing.
func (s *Sub) PollInto(buf []Event) (Batch, error) {
	if !s.live.Load() {
		return s.catchUp(buf)
	}
	// Last is read before the buffer: every event up to it is buffered by
	// now.
	through := max(s.feed.Last(), s.from)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return Batch{}, s.err
	}
	evs := s.buf
	s.buf, s.max = buf[:0], s.pending
	if len(evs) > 0 {
		through = max(through, evs[len(evs)-1].Index)
	}
	return Batch{Events: evs, Through: through}, nil
}

// Ready returns a channel that has a value when events were buffered (or
// the subscription ended) since Poll last ran: wait on it, then Poll.
func (s *Sub) Ready() <-chan struct{} { return s.wake }

// Close ends the subscription.
func (s *Sub) Close() {
	s.feed.mu.Lock()
	s.feed.remove(s)
	s.feed.mu.Unlock()
	s.fail(ErrClosed)
}

// KeysAt returns the keys with prefix (or the key itself when exact), in
// no particular order, and the index of the last entry whose changes they
// hold: a watch from that index continues the state exactly, without a
// change missed or told twice.
func (f *FSM) KeysAt(prefix string, exact bool) ([]KeyState, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	cut := f.feed.noted.Load()
	if exact {
		if k, ok := f.get(prefix); ok {
			return []KeyState{k}, cut
		}
		return nil, cut
	}
	var out []KeyState
	for name, e := range f.keys.all() {
		if strings.HasPrefix(name, prefix) {
			out = append(out, f.keyState(name, e))
		}
	}
	return out, cut
}
