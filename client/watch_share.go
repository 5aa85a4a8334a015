package client

import (
	"context"
	"sync"
	"time"
)

// Watches of one Client that follow the same key or prefix share a stream.
//
// A thousand watchers of one key in a process would otherwise hold a
// thousand streams, and the node would write each event a thousand times;
// shared, it writes it once and the process hands it on. What a watch
// delivers must not change:
//
//   - Each watch starts on a stream of its own, so its state events and
//     its first sync are as current as a linearizable read sent with it
//     (a shared stream that began earlier could not say so).
//   - It moves onto the shared stream only after that first sync (after
//     a reset, after the sync that follows it), at an index it delivered
//     through (an event with an id), and from then on delivers only what
//     the shared stream sends after that index: nothing twice, nothing
//     skipped. A watch behind the shared stream is handed the events it
//     missed from the stream's tail, or stays on its own stream until it
//     has caught up.
//   - The shared stream never waits for a watch: one whose receiver has no
//     room for an entry's events goes back to a stream of its own, resuming
//     after the last index it delivered.
//   - When the shared stream cannot go on (a reset, a refusal), every
//     watch on it goes back to a stream of its own, resuming after the
//     last index it delivered, and meets whatever made the shared stream
//     end (a 410, a reset, a refusal) itself, or does not.
//
// A lone watch of a key never moves: sharing starts with the second.
// Every stream of a Client carries the Client's credentials, so every
// watch on a shared stream may read what it sends.

// shareKey names the watches one stream can serve.
type shareKey struct {
	key, prefix string
	progress    time.Duration
}

func shareKeyOf(o WatchOptions) shareKey {
	if o.Key != "" {
		return shareKey{key: o.Key, progress: o.Progress}
	}
	return shareKey{prefix: o.Prefix, progress: o.Progress}
}

// watchShares are a Client's shared streams and its watches that could
// share them.
type watchShares struct {
	mu      sync.Mutex
	watches map[shareKey]int
	hubs    map[shareKey]*watchHub
	// stillborn holds, per key, the index after which a shared stream was
	// refused (it ended before it delivered anything): none is started
	// again there, so that watches that cannot be resumed where they are
	// do not start one again and again; they move on by themselves.
	stillborn map[shareKey]uint64
}

func (s *watchShares) enter(k shareKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watches == nil {
		s.watches, s.hubs, s.stillborn = map[shareKey]int{}, map[shareKey]*watchHub{}, map[shareKey]uint64{}
	}
	s.watches[k]++
}

func (s *watchShares) exit(k shareKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watches[k]--; s.watches[k] <= 0 {
		delete(s.watches, k)
		delete(s.stillborn, k)
	}
}

// adopt moves sub, which delivered everything through id, onto the shared
// stream of k, starting that stream (resuming after id) when there is none.
// It returns nil when sub stays on its own stream: it is k's only watch, or
// the shared stream is ahead of it by more than its tail or sub's room.
func (s *watchShares) adopt(c *Client, k shareKey, o WatchOptions, sub *watchSub, id uint64) *watchHub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watches[k] < 2 {
		return nil
	}
	if h := s.hubs[k]; h != nil {
		if h.join(sub, id) {
			return h
		}
		if !h.isEnded() {
			return nil
		}
	}
	if at, ok := s.stillborn[k]; ok && id <= at {
		return nil
	}
	h := c.startHub(k, o, sub, id)
	s.hubs[k] = h
	return h
}

// drop forgets h, which ended; stillborn when its stream was refused
// before it delivered anything.
func (s *watchShares) drop(h *watchHub, stillborn bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hubs[h.key] == h {
		delete(s.hubs, h.key)
	}
	if _, watched := s.watches[h.key]; stillborn && watched {
		s.stillborn[h.key] = h.from
	}
}

// watchSub is one watch, as a shared stream sees it. Its fields are the
// hub's while the watch is on it (under the hub's mu), the watch's own
// after gone is closed.
type watchSub struct {
	out chan WatchEvent
	// last is the index the watch has delivered through.
	last uint64
	// gone is closed when the shared stream lets go of the watch.
	gone chan struct{}
}

// watchHub is a shared stream and the watches on it.
type watchHub struct {
	key    shareKey
	shares *watchShares
	cancel context.CancelFunc

	mu    sync.Mutex
	subs  map[*watchSub]struct{}
	ended bool
	// delivered is set by the stream's first group: the node took the
	// resume.
	delivered bool
	// last is the id of the last entry (or sync) the stream delivered.
	last uint64
	// tail holds the latest groups the stream delivered, every one after
	// the index from, at most hubTail events, for watches that join
	// behind last.
	tail     []hubGroup
	tailSize int
	from     uint64
}

// hubGroup is what one emit of a shared stream delivered.
type hubGroup struct {
	id  uint64
	evs []WatchEvent
}

// hubTail bounds the events a shared stream keeps for watches that join
// behind it: what one watch's channel holds.
const hubTail = watchBuffer

// startHub starts a shared stream of k with sub on it, resuming after from,
// the index sub delivered through.
func (c *Client) startHub(k shareKey, o WatchOptions, sub *watchSub, from uint64) *watchHub {
	ctx, cancel := context.WithCancel(context.Background())
	h := &watchHub{key: k, shares: &c.shares, cancel: cancel, subs: map[*watchSub]struct{}{}, last: from, from: from}
	h.join(sub, from)
	o.From = from
	go func() {
		c.watchLoop(ctx, o, h.emit)
		h.end(true)
	}()
	return h
}

func (h *watchHub) isEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// join takes sub, which delivered everything through id, handing it the
// tail's events after id. It refuses when the tail does not reach back to
// id or they do not fit in sub's channel.
func (h *watchHub) join(sub *watchSub, id uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended || id < h.from {
		return false
	}
	first, n := len(h.tail), 0
	for i := len(h.tail) - 1; i >= 0 && h.tail[i].id > id; i-- {
		first, n = i, n+len(h.tail[i].evs)
	}
	if n > cap(sub.out)-len(sub.out) {
		return false
	}
	sub.last, sub.gone = id, make(chan struct{})
	for _, g := range h.tail[first:] {
		h.hand(sub, g.evs, g.id)
	}
	h.subs[sub] = struct{}{}
	return true
}

// leave lets go of sub, whose watch ended; the stream ends with its last
// watch.
func (h *watchHub) leave(sub *watchSub) {
	h.mu.Lock()
	delete(h.subs, sub)
	ended := h.endLockedIfEmpty()
	h.mu.Unlock()
	if ended {
		h.shares.drop(h, false)
	}
}

// emit is the shared stream's emitter: it hands each group to every watch
// that has room for it, and never waits.
func (h *watchHub) emit(group []WatchEvent, id uint64) error {
	if id == 0 {
		// A reset or a refusal: the shared stream cannot go on.
		h.end(true)
		return errHandedOver
	}
	h.mu.Lock()
	h.delivered = true
	if had(group, id, h.last) {
		// Nothing new (a sync from a node behind the last one): the
		// tail's ids must grow for join to find where a watch is.
		h.mu.Unlock()
		return nil
	}
	h.remember(group, id)
	for sub := range h.subs {
		if had(group, id, sub.last) {
			continue // it delivered this from its own stream
		}
		if cap(sub.out)-len(sub.out) < len(group) {
			h.release(sub)
			continue
		}
		h.hand(sub, group, id)
	}
	ended := h.endLockedIfEmpty()
	h.mu.Unlock()
	if ended {
		h.shares.drop(h, false)
		return errHandedOver
	}
	return nil
}

// had reports whether whoever delivered through index last already had
// group (whose id is id): a change at or before last, or a sync before it.
// A sync at last is news: it says again that nothing came since.
func had(group []WatchEvent, id, last uint64) bool {
	return id < last || id == last && group[0].Type != WatchSync
}

// hand gives sub a group it has room for.
func (h *watchHub) hand(sub *watchSub, group []WatchEvent, id uint64) {
	for _, ev := range group {
		sub.out <- ev
	}
	sub.last = id
}

// remember keeps a group in the tail, dropping the oldest beyond hubTail
// events.
func (h *watchHub) remember(group []WatchEvent, id uint64) {
	h.last = id
	h.tail = append(h.tail, hubGroup{id: id, evs: append([]WatchEvent(nil), group...)})
	h.tailSize += len(group)
	drop := 0
	for h.tailSize > hubTail && drop < len(h.tail) {
		h.tailSize -= len(h.tail[drop].evs)
		h.from = h.tail[drop].id
		drop++
	}
	if drop > 0 {
		h.tail = append(h.tail[:0], h.tail[drop:]...)
	}
}

// release lets go of sub, which goes back to a stream of its own.
func (h *watchHub) release(sub *watchSub) {
	delete(h.subs, sub)
	close(sub.gone)
}

// end ends the shared stream, which its stream did (a reset, a refusal, or
// the end of its loop), and lets go of every watch on it.
func (h *watchHub) end(byStream bool) {
	h.mu.Lock()
	stillborn := byStream && !h.ended && !h.delivered
	h.endLocked()
	h.mu.Unlock()
	h.shares.drop(h, stillborn)
}

// endLockedIfEmpty ends the shared stream when no watch is on it, and
// reports whether it did.
func (h *watchHub) endLockedIfEmpty() bool {
	if len(h.subs) > 0 {
		return false
	}
	h.endLocked()
	return true
}

// endLocked ends the shared stream: no watch joins it any more, and every
// watch on it is let go of.
func (h *watchHub) endLocked() {
	h.ended = true
	h.cancel()
	for sub := range h.subs {
		h.release(sub)
	}
	h.tail = nil
}

// watchShared runs a watch that may share a stream: on a stream of its own
// until it can move onto the shared one, and back whenever the shared one
// lets go of it.
func (c *Client) watchShared(ctx context.Context, o WatchOptions, out chan WatchEvent) {
	k := shareKeyOf(o)
	c.shares.enter(k)
	defer c.shares.exit(k)
	sub := &watchSub{out: out}
	send := sendTo(ctx, out)
	// synced: the watch delivered a sync since it started or was reset.
	// Until then it stays on its own stream, which sends its state, the
	// changes since, and a sync it owes: a shared stream would send its
	// next sync only once it is quiet for a while.
	synced := false
	for ctx.Err() == nil {
		var hub *watchHub
		c.watchLoop(ctx, o, func(group []WatchEvent, id uint64) error {
			if err := send(group, id); err != nil {
				return err
			}
			synced = syncedAfter(group, synced)
			if id > 0 && synced {
				if hub = c.shares.adopt(c, k, o, sub, id); hub != nil {
					return errHandedOver
				}
			}
			return nil
		})
		if hub == nil {
			return // ctx ended, or the watch was refused for good
		}
		select {
		case <-ctx.Done():
			hub.leave(sub)
			return
		case <-sub.gone:
		}
		o.From = sub.last
	}
}

// syncedAfter reports whether a watch has delivered a sync since it started
// or was last reset, once it delivered group; synced says whether it had
// before.
func syncedAfter(group []WatchEvent, synced bool) bool {
	for _, ev := range group {
		switch ev.Type {
		case WatchSync:
			synced = true
		case WatchReset:
			synced = false
		}
	}
	return synced
}
