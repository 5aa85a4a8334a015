package fsm

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// watcher is a subscription under test and what it should hear.
type watcher struct {
	sub    *Sub
	prefix string
	exact  bool
	from   uint64
	got    []uint64
	err    error
	closed bool
	// last is the batch last polled, still the watcher's until it hands
	// it back with PollInto; lastIdx is what it held then.
	last    []Event
	lastIdx []uint64
	// published is every event published so far.
	published *[]Event
}

func (w *watcher) follows(ev Event) bool {
	if ev.Index <= w.from {
		return false
	}
	if w.exact {
		return ev.Key == w.prefix
	}
	return strings.HasPrefix(ev.Key, w.prefix)
}

// poll polls once and reports whether it got events.
func (w *watcher) poll() bool {
	if w.err != nil || w.closed {
		return false
	}
	for i, ev := range w.last {
		if ev.Index != w.lastIdx[i] {
			panic(fmt.Sprintf("a batch changed while its watcher held it: %v, was %v", w.last, w.lastIdx))
		}
	}
	var b Batch
	var err error
	if len(w.got)%2 == 0 {
		b, err = w.sub.Poll()
	} else {
		b, err = w.sub.PollInto(w.last)
	}
	if err != nil {
		w.err = err
		return false
	}
	w.last, w.lastIdx = b.Events, w.lastIdx[:0]
	for _, ev := range b.Events {
		w.got = append(w.got, ev.Index)
		w.lastIdx = append(w.lastIdx, ev.Index)
	}
	if n := len(b.Events); n > 0 {
		// A batch ends at an entry's end: every event of its last entry
		// that the watcher follows is in it.
		end, have, want := b.Events[n-1].Index, 0, 0
		for _, ev := range b.Events {
			if ev.Index == end {
				have++
			}
		}
		for _, ev := range *w.published {
			if ev.Index == end && w.follows(ev) {
				want++
			}
		}
		if have != want {
			panic(fmt.Sprintf("a batch took %d of the %d events of entry %d", have, want, end))
		}
	}
	return len(b.Events) > 0
}

// TestFeedDeliversExactlyTheMatchingEventsInOrder: for random sequences of
// subscribes (of a key, of a prefix, from some past index), closes, polls
// and published entries, every subscription hears exactly the events it
// follows, in log order, none skipped or repeated; one that falls more than
// its bound behind (or, still taking its backlog, behind the history) ends
// with ErrLagged, having heard a gap-free prefix of them; one that was closed hears nothing after ErrClosed.
func TestFeedDeliversExactlyTheMatchingEventsInOrder(t *testing.T) {
	keys := []string{"a", "a/1", "a/2", "ab", "b", "b/1"}
	prefixes := []string{"", "a", "a/", "b", "c"}
	for seed := int64(1); seed <= 100; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			fd := newFeed()
			fd.SetLimits(64, 1+rng.Intn(8))
			// Small chunks: subscriptions that resume take their
			// backlog over several polls, while entries are published
			// and the history moves on.
			fd.chunk = 1 + rng.Intn(4)
			var (
				all      []Event
				watchers []*watcher
				index    uint64
			)
			for step := 0; step < 300; step++ {
				switch op := rng.Intn(10); {
				case op < 2:
					w := &watcher{published: &all}
					if rng.Intn(2) == 0 {
						w.prefix, w.exact = keys[rng.Intn(len(keys))], true
					} else {
						w.prefix = prefixes[rng.Intn(len(prefixes))]
					}
					w.from = index - uint64(rng.Intn(int(min(index, 20))+1))
					sub, err := fd.Subscribe(w.prefix, w.exact, w.from)
					if errors.Is(err, ErrCompacted) {
						if w.from >= fd.Since() {
							t.Fatalf("subscribe from %d refused, history since %d", w.from, fd.Since())
						}
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					w.sub = sub
					watchers = append(watchers, w)
				case op < 3 && len(watchers) > 0:
					w := watchers[rng.Intn(len(watchers))]
					if !w.closed {
						w.poll()
						w.sub.Close()
						w.closed = true
					}
				case op < 6 && len(watchers) > 0:
					watchers[rng.Intn(len(watchers))].poll()
				default:
					var changes []Event
					for n := rng.Intn(3); n >= 0; n-- {
						index += uint64(1 + rng.Intn(2)) // some entries change nothing
						if rng.Intn(4) > 0 {
							changes = append(changes, Event{Index: index, Type: EventGranted, Key: keys[rng.Intn(len(keys))]})
							continue
						}
						// A reclamation: an event per key, one index.
						for _, i := range rng.Perm(len(keys))[:2+rng.Intn(len(keys)-1)] {
							changes = append(changes, Event{Index: index, Type: EventDeleted, Key: keys[i]})
						}
					}
					fd.publish(changes, index)
					all = append(all, changes...)
				}
			}
			for _, w := range watchers {
				// Until the backlog is taken and the buffer empty.
				for w.poll() || w.sub != nil && !w.closed && w.err == nil && !w.sub.live.Load() {
				}
				var want []uint64
				for _, ev := range all {
					if w.follows(ev) {
						want = append(want, ev.Index)
					}
				}
				desc := fmt.Sprintf("watcher of %q (exact %v) from %d", w.prefix, w.exact, w.from)
				switch {
				case w.closed:
					// A subscription that lagged before it was closed
					// keeps saying so.
					if _, err := w.sub.Poll(); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrLagged) {
						t.Fatalf("%s: closed, then polled: %v", desc, err)
					}
				case w.err != nil && !errors.Is(w.err, ErrLagged):
					t.Fatalf("%s: %v", desc, w.err)
				}
				if w.err == nil && !w.closed && len(w.got) != len(want) {
					t.Fatalf("%s heard %v, want %v", desc, w.got, want)
				}
				if len(w.got) > len(want) {
					t.Fatalf("%s heard %v, more than %v", desc, w.got, want)
				}
				for i := range w.got {
					if w.got[i] != want[i] {
						t.Fatalf("%s heard %v, want a prefix of %v", desc, w.got, want)
					}
				}
			}
		})
	}
}

// TestFeedIndexForgetsClosedSubscriptions: closing or lagging out the last
// watcher of a key leaves nothing behind in the feed's index.
func TestFeedIndexForgetsClosedSubscriptions(t *testing.T) {
	fd := newFeed()
	fd.SetLimits(16, 1)
	a, _ := fd.Subscribe("k", true, 0)
	b, _ := fd.Subscribe("k", true, 0)
	p, _ := fd.Subscribe("k", false, 0)
	a.Close()
	fd.publish([]Event{{Index: 1, Key: "k"}, {Index: 2, Key: "k"}}, 2) // b and p lag
	if _, err := b.Poll(); !errors.Is(err, ErrLagged) {
		t.Fatalf("b: %v, want ErrLagged", err)
	}
	p.Close()
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if len(fd.byKey) != 0 || len(fd.prefixed) != 0 {
		t.Fatalf("feed still holds %d keys, %d prefix watchers", len(fd.byKey), len(fd.prefixed))
	}
}
