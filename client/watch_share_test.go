package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// logServer is a node stand-in that serves watch streams of a log it is
// given entry by entry: a fresh stream gets the state (one state event per
// key that has one) and a sync, a resume gets what came after its index
// (410 compacted before the ring's start), and both then every entry as it
// is published, the events of an entry sharing its index with the id on the
// last. A quiet stream gets a sync every progress. It counts open streams.
type logServer struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced at each publish
	entries []logEntry
	first   uint64            // index of entries[0]
	floor   uint64            // resumes from before it are refused (410)
	state   map[string]string // key -> holder
	cut     chan struct{}     // closed to end every open stream with a reset
	open    atomic.Int64
	opened  atomic.Int64
	peak    atomic.Int64
}

type logEntry struct {
	index uint64
	evs   []WatchEvent
}

func newLogServer() *logServer {
	return &logServer{changed: make(chan struct{}), first: 1, state: map[string]string{}, cut: make(chan struct{})}
}

// serveLog starts a log server and a client of it, both gone when the test
// ends, and the context for the client's watches with its cancel.
func serveLog(t *testing.T) (*logServer, *Client, context.Context, context.CancelFunc) {
	t.Helper()
	s := newLogServer()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return s, New([]string{srv.URL}), ctx, cancel
}

// last is the index of the last entry (0 for none).
func (s *logServer) last() uint64 { return s.first + uint64(len(s.entries)) - 1 }

// publish appends an entry of granted events, one per key, and returns
// its index.
func (s *logServer) publish(keys ...string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	index := s.last() + 1
	e := logEntry{index: index}
	for _, k := range keys {
		holder := "h" + strconv.FormatUint(index, 10)
		e.evs = append(e.evs, WatchEvent{Type: WatchGranted, Index: index, Key: k, Holder: holder, State: "held"})
		s.state[k] = holder
	}
	s.entries = append(s.entries, e)
	close(s.changed)
	s.changed = make(chan struct{})
	return index
}

// compact makes the server refuse resumes from before index, as a node
// does whose history no longer reaches back.
func (s *logServer) compact(index uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor = index
}

// resetAll ends every open stream with a reset event.
func (s *logServer) resetAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.cut)
	s.cut = make(chan struct{})
}

func (s *logServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	match := func(k string) bool {
		if key := q.Get("key"); key != "" {
			return k == key
		}
		return strings.HasPrefix(k, q.Get("prefix"))
	}
	progress, err := time.ParseDuration(q.Get("progress"))
	if err != nil {
		progress = time.Hour
	}
	s.mu.Lock()
	var next uint64
	var head []byte
	if f := q.Get("from"); f != "" {
		from, _ := strconv.ParseUint(f, 10, 64)
		if from < s.floor {
			s.mu.Unlock()
			writeError(w, http.StatusGone, "compacted", "history compacted")
			return
		}
		next = from + 1
	} else {
		for k, h := range s.state {
			if match(k) {
				head = frame(head, "", WatchEvent{Type: WatchState, Index: s.last(), Key: k, Holder: h, State: "held"})
			}
		}
		next = s.last() + 1
	}
	head = frame(head, strconv.FormatUint(next-1, 10), WatchEvent{Type: WatchSync, Index: next - 1})
	cut := s.cut
	s.mu.Unlock()

	n := s.open.Add(1)
	defer s.open.Add(-1)
	s.opened.Add(1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(head); err != nil {
		return
	}
	w.(http.Flusher).Flush()
	for {
		s.mu.Lock()
		var b []byte
		for ; next <= s.last(); next++ {
			e := s.entries[next-s.first]
			var mine []WatchEvent
			for _, ev := range e.evs {
				if match(ev.Key) {
					mine = append(mine, ev)
				}
			}
			for i, ev := range mine {
				id := ""
				if i == len(mine)-1 {
					id = strconv.FormatUint(e.index, 10)
				}
				b = frame(b, id, ev)
			}
		}
		changed := s.changed
		s.mu.Unlock()
		if len(b) > 0 {
			if _, err := w.Write(b); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-cut:
			_, _ = w.Write(frame(nil, "", WatchEvent{Type: WatchReset, Reason: "lagged"}))
			return
		case <-changed:
		case <-time.After(progress):
			if _, err := w.Write(frame(nil, strconv.FormatUint(next-1, 10), WatchEvent{Type: WatchSync, Index: next - 1})); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}
}

// frame appends ev as a server-sent event, with id when not empty.
func frame(b []byte, id string, ev WatchEvent) []byte {
	data, _ := json.Marshal(ev)
	if id != "" {
		b = append(b, "id: "+id+"\n"...)
	}
	b = append(b, "event: "+ev.Type+"\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// watchLog is what one watch delivered, checked as it arrives against the
// server's log: after the state events and a sync at S (or a sync at a
// resume index S), exactly the changes after S that it follows, in order,
// each once; a reset starts it over.
type watchLog struct {
	mu      sync.Mutex
	s       *logServer
	match   func(string) bool
	synced  bool
	through uint64 // the changes are checked through this index
	pending []WatchEvent
	err     error
	resets  int
}

func (l *watchLog) add(ev WatchEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	switch ev.Type {
	case WatchState:
		if l.synced {
			l.err = fmt.Errorf("a state event (%s) after the sync", ev.Key)
		}
	case WatchReset:
		l.synced, l.pending = false, nil
		l.resets++
	case WatchSync:
		if !l.synced {
			l.synced, l.through = true, ev.Index
			return
		}
		l.checkSync(ev.Index)
	default:
		if !l.synced {
			l.err = fmt.Errorf("change %s %d before the first sync", ev.Type, ev.Index)
			return
		}
		l.pending = append(l.pending, ev)
		l.check(l.pending[0].Index)
	}
}

// check compares the changes delivered with the log's entries after
// through and up to index, once a whole entry came.
func (l *watchLog) check(index uint64) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	for next := l.through + 1; next <= index; next++ {
		e := l.s.entries[next-l.s.first]
		var want []WatchEvent
		for _, ev := range e.evs {
			if l.match(ev.Key) {
				want = append(want, ev)
			}
		}
		if next < index && len(want) > 0 {
			l.err = fmt.Errorf("entry %d (%d events) was skipped: next came %d", next, len(want), index)
			return
		}
		if next < index {
			continue
		}
		if len(l.pending) < len(want) {
			return // the rest of the entry is on its way
		}
		for i, ev := range want {
			got := l.pending[i]
			if got.Type != ev.Type || got.Index != ev.Index || got.Key != ev.Key || got.Holder != ev.Holder {
				l.err = fmt.Errorf("entry %d: got %+v, want %+v", next, got, ev)
				return
			}
		}
		l.pending = l.pending[len(want):]
		if len(l.pending) > 0 && l.pending[0].Index == index {
			l.err = fmt.Errorf("entry %d delivered %d extra events: %s", index, len(l.pending), describeEvents(l.pending))
			return
		}
		l.through = index
		if len(l.pending) > 0 {
			l.check(l.pending[0].Index)
		}
		return
	}
	if len(l.pending) > 0 && l.pending[0].Index <= l.through {
		l.err = fmt.Errorf("entry %d delivered again (through %d)", l.pending[0].Index, l.through)
	}
}

// checkSync checks a sync at index: every change through it came.
func (l *watchLog) checkSync(index uint64) {
	if index < l.through || len(l.pending) > 0 {
		l.err = fmt.Errorf("sync %d after the changes through %d (%d held)", index, l.through, len(l.pending))
		return
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	for next := l.through + 1; next <= index; next++ {
		for _, ev := range l.s.entries[next-l.s.first].evs {
			if l.match(ev.Key) {
				l.err = fmt.Errorf("sync %d, but entry %d was not delivered", index, next)
				return
			}
		}
	}
	l.through = index
}

func (l *watchLog) status() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.through, l.err
}

// keyLog is a watchLog of one key's watch.
func keyLog(s *logServer, key string) *watchLog {
	return &watchLog{s: s, match: func(k string) bool { return k == key }}
}

// follow reads ch into l until it closes; pause, when not nil, is called
// before each event (a slow receiver).
func (l *watchLog) follow(ch <-chan WatchEvent, pause func()) {
	for ev := range ch {
		if pause != nil {
			pause()
		}
		l.add(ev)
	}
}

// TestSharedWatchesDeliverEveryChangeOnce: watches of one key or prefix
// start at random moments while the log grows fast (entries of one key and
// of several keys at once), some with receivers that stall; each must
// deliver exactly what a stream of its own would: after its first sync,
// every change it follows, once, in order. Once the log is quiet, the
// watches of each key or prefix are down to one stream.
func TestSharedWatchesDeliverEveryChangeOnce(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runSharedWatches(t, seed) })
	}
}

func runSharedWatches(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	s, c, ctx, cancel := serveLog(t)

	keys := []string{"p/a", "p/b", "p/c", "q/a"}
	options := []WatchOptions{
		{Key: "p/a", Progress: 50 * time.Millisecond},
		{Prefix: "p/", Progress: 50 * time.Millisecond},
	}
	var (
		logs []*watchLog
		wg   sync.WaitGroup
	)
	start := func() {
		o := options[rng.IntN(len(options))]
		match := func(k string) bool { return k == o.Key }
		if o.Key == "" {
			match = func(k string) bool { return strings.HasPrefix(k, o.Prefix) }
		}
		l := &watchLog{s: s, match: match}
		logs = append(logs, l)
		var pause func()
		if rng.IntN(4) == 0 {
			// Stalls now and then, long enough for the shared stream
			// to fill its channel.
			var n atomic.Int64
			pause = func() {
				if n.Add(1)%40 == 0 {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
		ch := c.Watch(ctx, o)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.follow(ch, pause)
		}()
	}
	for i := 0; i < 600; i++ {
		if i%20 == 0 {
			start()
		}
		// An entry of one key, or a reclamation-like entry of several.
		if rng.IntN(5) == 0 {
			s.publish(keys[rng.IntN(2)], keys[2], keys[3])
		} else {
			s.publish(keys[rng.IntN(len(keys))])
		}
		if i%7 == 0 {
			time.Sleep(time.Millisecond) // let streams interleave with the writes
		}
	}
	last := s.last()
	eventually(t, 30*time.Second, func() error { return allThrough(t, logs, last) })
	eventually(t, 30*time.Second, func() error {
		if n := s.open.Load(); n != int64(len(options)) {
			return fmt.Errorf("%d streams open, want one per key or prefix (%d)", n, len(options))
		}
		return nil
	})
	t.Logf("%d watches, %d streams opened in all, at most %d at once", len(logs), s.opened.Load(), s.peak.Load())
	cancel()
	wg.Wait()
	eventually(t, 10*time.Second, func() error {
		if n := s.open.Load(); n != 0 {
			return fmt.Errorf("%d streams still open after every watch ended", n)
		}
		return nil
	})
}

// TestSharedStreamDoesNotWaitForASlowReceiver: of two watches of a key, one
// is not read. The other still gets every change at once; the unread one,
// let go of by the shared stream, delivers every change once when it is
// read at last (from a stream of its own, resumed after what it had).
func TestSharedStreamDoesNotWaitForASlowReceiver(t *testing.T) {
	s, c, ctx, _ := serveLog(t)
	o := WatchOptions{Key: "k", Progress: 50 * time.Millisecond}
	fast, slow := keyLog(s, "k"), keyLog(s, "k")
	go fast.follow(c.Watch(ctx, o), nil)
	slowCh := c.Watch(ctx, o)
	// Both on the shared stream before the unread one stops reading.
	s.publish("k")
	for i := 0; i < 3; i++ {
		slow.add(<-slowCh)
	}
	eventually(t, 10*time.Second, func() error {
		if n := s.open.Load(); n != 1 {
			return fmt.Errorf("%d streams open, want 1", n)
		}
		return nil
	})
	for i := 0; i < 5*watchBuffer; i++ {
		s.publish("k")
	}
	last := s.last()
	eventually(t, 10*time.Second, func() error {
		if through, err := fast.status(); err != nil || through < last {
			return fmt.Errorf("the read watch is through %d of %d (%v)", through, last, err)
		}
		return nil
	})
	go slow.follow(slowCh, nil)
	eventually(t, 10*time.Second, func() error {
		through, err := slow.status()
		if err != nil {
			t.Fatal(err)
		}
		if through < last {
			return fmt.Errorf("the unread watch is through %d of %d", through, last)
		}
		return nil
	})
	if _, err := fast.status(); err != nil {
		t.Fatal(err)
	}
}

// TestSharedWatchesOutliveAReset: the shared stream is reset (the node
// says the stream lagged). Each watch on it resumes on a stream of its own
// after what it delivered, which the node can serve, so none is reset; with
// the history compacted past them, each is reset and starts over from the
// current state. Either way each delivers every change once, and with the
// next change they share a stream again.
func TestSharedWatchesOutliveAReset(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		t.Run(fmt.Sprintf("compacted=%v", compacted), func(t *testing.T) {
			s, c, ctx, _ := serveLog(t)
			o := WatchOptions{Key: "k", Progress: 50 * time.Millisecond}
			var logs []*watchLog
			for i := 0; i < 4; i++ {
				l := keyLog(s, "k")
				logs = append(logs, l)
				go l.follow(c.Watch(ctx, o), nil)
			}
			s.publish("k")
			waitShared(t, s, logs, 1)
			if compacted {
				s.compact(s.last() + 1)
			}
			s.resetAll()
			s.publish("k")
			waitShared(t, s, logs, 1)
			for i, l := range logs {
				l.mu.Lock()
				resets := l.resets
				l.mu.Unlock()
				if compacted != (resets > 0) {
					t.Fatalf("watch %d was reset %d times (history compacted: %v)", i, resets, compacted)
				}
			}
		})
	}
}

// waitShared waits until every watch checked the whole log and the server
// has streams open of them.
func waitShared(t *testing.T, s *logServer, logs []*watchLog, streams int64) {
	t.Helper()
	s.mu.Lock()
	last := s.last()
	s.mu.Unlock()
	eventually(t, 10*time.Second, func() error {
		if err := allThrough(t, logs, last); err != nil {
			return err
		}
		if n := s.open.Load(); n != streams {
			return fmt.Errorf("%d streams open, want %d", n, streams)
		}
		return nil
	})
}

// allThrough is nil once every watch checked the log through last; a
// watch that found a fault fails t.
func allThrough(t *testing.T, logs []*watchLog, last uint64) error {
	for i, l := range logs {
		through, err := l.status()
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		if through < last {
			return fmt.Errorf("watch %d checked through %d of %d", i, through, last)
		}
	}
	return nil
}

// TestPrivateWatchesKeepStreamsOfTheirOwn: with Private, each watch holds
// its own stream; without, the same watches share one.
func TestPrivateWatchesKeepStreamsOfTheirOwn(t *testing.T) {
	for _, private := range []bool{true, false} {
		t.Run(fmt.Sprintf("private=%v", private), func(t *testing.T) {
			s, c, ctx, _ := serveLog(t)
			var logs []*watchLog
			for i := 0; i < 5; i++ {
				l := keyLog(s, "k")
				logs = append(logs, l)
				go l.follow(c.Watch(ctx, WatchOptions{Key: "k", Progress: 50 * time.Millisecond, Private: private}), nil)
			}
			s.publish("k")
			want := int64(1)
			if private {
				want = 5
			}
			waitShared(t, s, logs, want)
		})
	}
}

// newTestHub is a shared stream of k without a stream behind it, at index
// from, for tests that drive its emitter.
func newTestHub(s *watchShares, k shareKey, from uint64) *watchHub {
	return &watchHub{key: k, shares: s, cancel: func() {}, subs: map[*watchSub]struct{}{}, last: from, from: from}
}

func granted(index uint64) []WatchEvent {
	return []WatchEvent{{Type: WatchGranted, Index: index, Key: "k"}}
}

// TestSharedStreamTailSkipsAnOlderSync: a sync older than what the shared
// stream delivered (a node behind the last one) says nothing new. A watch
// that joins behind the stream must still be handed every change it
// missed: the tail must not end in that older sync.
func TestSharedStreamTailSkipsAnOlderSync(t *testing.T) {
	s := &watchShares{}
	k := shareKey{key: "k"}
	s.enter(k)
	h := newTestHub(s, k, 10)
	h.join(&watchSub{out: make(chan WatchEvent, watchBuffer)}, 10) // the stream's first watch
	for _, id := range []uint64{11, 12} {
		if err := h.emit(granted(id), id); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.emit([]WatchEvent{{Type: WatchSync, Index: 5}}, 5); err != nil {
		t.Fatal(err)
	}
	sub := &watchSub{out: make(chan WatchEvent, watchBuffer)}
	if !h.join(sub, 10) {
		t.Fatal("a watch at 10 could not join a stream whose tail starts at 10")
	}
	var got []uint64
	for len(sub.out) > 0 {
		got = append(got, (<-sub.out).Index)
	}
	if fmt.Sprint(got) != "[11 12]" || sub.last != 12 {
		t.Fatalf("the joining watch was handed %v and is at %d, want [11 12] at 12", got, sub.last)
	}
}

// TestSharedStreamLeftByItsWatchesIsNotStillborn: a shared stream whose
// last watch left ends; its loop ending after that is not a refusal, and
// must not keep a new shared stream from starting at that index.
func TestSharedStreamLeftByItsWatchesIsNotStillborn(t *testing.T) {
	s := &watchShares{}
	k := shareKey{key: "k"}
	s.enter(k)
	s.enter(k)
	h := newTestHub(s, k, 10)
	s.hubs[k] = h
	sub := &watchSub{out: make(chan WatchEvent, watchBuffer)}
	h.join(sub, 10)
	h.leave(sub)
	h.end(true) // what the stream's goroutine does once its loop returns
	if at, ok := s.stillborn[k]; ok {
		t.Fatalf("a shared stream its watches left is taken as refused at %d", at)
	}
}

// TestSharedWatchDeliversItsOwnFirstSync: a fresh stream sends the state it
// read, the changes applied since, then its first sync, all at once (as a
// node does when a change lands while the watch starts). A second watch of
// the key must deliver that sync from its own stream before it moves onto
// a shared one: a shared stream resumed after the change says sync only
// once it has been quiet for a while, here never.
func TestSharedWatchDeliversItsOwnFirstSync(t *testing.T) {
	var resumed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if r.URL.Query().Get("from") != "" {
			resumed.Add(1) // a shared stream: nothing new, and quiet
		} else {
			var b []byte
			b = frame(b, "", WatchEvent{Type: WatchState, Index: 1, Key: "k", Holder: "h1", State: "held"})
			b = frame(b, "2", WatchEvent{Type: WatchReleased, Index: 2, Key: "k", Holder: "h1", State: "released"})
			b = frame(b, "2", WatchEvent{Type: WatchSync, Index: 2})
			_, _ = w.Write(b)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := New([]string{srv.URL})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := WatchOptions{Key: "k", Progress: time.Hour}
	type seen struct {
		mu  sync.Mutex
		evs []string
	}
	follow := func() *seen {
		s := &seen{}
		ch := c.Watch(ctx, o)
		go func() {
			for ev := range ch {
				s.mu.Lock()
				s.evs = append(s.evs, ev.Type)
				s.mu.Unlock()
			}
		}()
		return s
	}
	synced := func(s *seen) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.evs) < 3 || s.evs[2] != WatchSync {
			return fmt.Errorf("delivered %v, want state, released, sync", s.evs)
		}
		return nil
	}
	first := follow()
	eventually(t, 5*time.Second, func() error { return synced(first) })
	second := follow()
	eventually(t, 5*time.Second, func() error { return synced(second) })
	// It did move: the point is the order, not a stream of its own.
	eventually(t, 5*time.Second, func() error {
		if resumed.Load() == 0 {
			return errors.New("no shared stream started")
		}
		return nil
	})
}
