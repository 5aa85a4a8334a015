package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
)

// streamCounter is a transport that counts the watch streams open through
// it.
type streamCounter struct {
	rt   http.RoundTripper
	open atomic.Int64
}

func (s *streamCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	if err != nil || r.URL.Path != "/v1/watch" {
		return resp, err
	}
	s.open.Add(1)
	resp.Body = &countedBody{ReadCloser: resp.Body, open: &s.open}
	return resp, nil
}

type countedBody struct {
	io.ReadCloser
	open   *atomic.Int64
	closed sync.Once
}

func (b *countedBody) Close() error {
	b.closed.Do(func() { b.open.Add(-1) })
	return b.ReadCloser.Close()
}

// TestSharedWatchesOnACluster: watches of one Client of a key and of a
// prefix, started at different moments through a follower while keys are
// granted, released and handed off, share a stream per key and per prefix,
// and each delivers what a watch on a stream of its own delivers after the
// first sync it delivered: the same changes, in the same order, once.
func TestSharedWatchesOnACluster(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, fol := leaderOf(t, nodes)
	counter := &streamCounter{rt: &http.Transport{MaxIdleConnsPerHost: 64}}
	c := client.New([]string{fol.url}, client.WithHTTPClient(&http.Client{Transport: counter}))
	w := client.New([]string{lead.url})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type watch struct {
		o   client.WatchOptions
		mu  sync.Mutex
		evs []client.WatchEvent
	}
	follow := func(o client.WatchOptions) *watch {
		wt := &watch{o: o}
		ch := c.Watch(ctx, o)
		go func() {
			for ev := range ch {
				wt.mu.Lock()
				wt.evs = append(wt.evs, ev)
				wt.mu.Unlock()
			}
		}()
		return wt
	}
	// The references, each on a stream of its own, started first.
	refKey := follow(client.WatchOptions{Key: "jobs/a", Private: true})
	refPrefix := follow(client.WatchOptions{Prefix: "jobs/", Private: true})
	evsOf := func(wt *watch) []client.WatchEvent {
		wt.mu.Lock()
		defer wt.mu.Unlock()
		return append([]client.WatchEvent(nil), wt.evs...)
	}
	// They must have every change the others may deliver.
	testutil.Eventually(t, 30*time.Second, func() error {
		if !hasSync(evsOf(refKey)) || !hasSync(evsOf(refPrefix)) {
			return errors.New("the references have not synced")
		}
		return nil
	})
	var shared []*watch
	step := func(i int) {
		key := fmt.Sprintf("jobs/%c", 'a'+i%3)
		if i%4 == 3 {
			key = fmt.Sprintf("jobs/held-%d", i) // kept: the prefix's state grows
		}
		g, err := w.Acquire(ctx, client.AcquireRequest{Key: key, Holder: fmt.Sprint("h", i), TTL: "30s"})
		if err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			return
		}
		if _, err := w.Release(ctx, client.ReleaseRequest{Key: key, Holder: g.Holder, Token: g.Token}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 40; i++ {
		if i%4 == 0 {
			shared = append(shared, follow(client.WatchOptions{Key: "jobs/a"}), follow(client.WatchOptions{Prefix: "jobs/"}))
		}
		step(i)
	}
	last, err := w.Acquire(ctx, client.AcquireRequest{Key: "jobs/a", Holder: "last", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	delivered := func(evs []client.WatchEvent) bool {
		for _, ev := range evs {
			if ev.Type == client.WatchGranted && ev.Holder == "last" {
				return true
			}
		}
		return false
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		for i, wt := range append([]*watch{refKey, refPrefix}, shared...) {
			if !delivered(evsOf(wt)) {
				return fmt.Errorf("watch %d has not delivered the last grant (%v)", i, last.Token)
			}
		}
		return nil
	})
	for i, wt := range shared {
		ref := refKey
		if wt.o.Prefix != "" {
			ref = refPrefix
		}
		got, want := afterFirstSync(t, evsOf(wt)), changes(evsOf(ref))
		from := got.sync
		if d := earlyDifference(got.early, want, from); d != "" {
			t.Fatalf("watch %d (%+v), before its first sync at %d: %s", i, wt.o, from, d)
		}
		if d := firstDifference(describeAll(got.changes), describeAll(want[through(want, from):])); d != "" {
			t.Fatalf("watch %d (%+v), first sync at %d: %s", i, wt.o, from, d)
		}
	}
	// One stream per key or prefix shared, and the references' own.
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := counter.open.Load(); n != 4 {
			return fmt.Errorf("%d watch streams open, want 4", n)
		}
		return nil
	})
}

type firstSync struct {
	sync uint64
	// early are the changes delivered before the first sync, changes
	// those after it.
	early, changes []client.WatchEvent
}

// afterFirstSync splits what a fresh watch delivered at its first sync. A
// fresh stream sends the state at the index it read it, then the changes
// applied since, then its first sync (sendPoll): a change made while the
// watch starts comes before that sync.
func afterFirstSync(t *testing.T, evs []client.WatchEvent) firstSync {
	t.Helper()
	for i, ev := range evs {
		if ev.Type == client.WatchSync {
			return firstSync{sync: ev.Index, early: changes(evs[:i]), changes: changes(evs[i+1:])}
		}
	}
	t.Fatal("no sync")
	return firstSync{}
}

// earlyDifference describes how the changes a fresh watch delivered before
// its first sync (at index sync) differ from what a watch on a stream of
// its own delivered, want, or is "". They are changes since the state the
// watch started from, so they are the last of want's up to sync: none
// skipped, none made up, none after the sync.
func earlyDifference(early, want []client.WatchEvent, sync uint64) string {
	upTo := through(want, sync)
	if len(early) > upTo {
		return fmt.Sprintf("%d changes, where a watch of its own had %d through that index", len(early), upTo)
	}
	return firstDifference(describeAll(early), describeAll(want[upTo-len(early):upTo]))
}

// through returns how many of changes, in index order, are at or before
// index.
func through(changes []client.WatchEvent, index uint64) int {
	n := len(changes)
	for n > 0 && changes[n-1].Index > index {
		n--
	}
	return n
}

func describeWatchEvent(ev client.WatchEvent) string {
	return fmt.Sprintf("%d %s %s %s %v", ev.Index, ev.Type, ev.Key, ev.Holder, ev.Token)
}

// describeAll describes each of evs, in order.
func describeAll(evs []client.WatchEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, describeWatchEvent(ev))
	}
	return out
}

// firstDifference describes where got and want part, or is "".
func firstDifference(got, want []string) string {
	for i := 0; i < len(got) || i < len(want); i++ {
		switch {
		case i >= len(got):
			return fmt.Sprintf("missing from the %dth change on: %q", i, want[i:])
		case i >= len(want):
			return fmt.Sprintf("extra from the %dth change on: %q", i, got[i:])
		case got[i] != want[i]:
			return fmt.Sprintf("the %dth change is %q, want %q (then %q)", i, got[i], want[i], want[i+1:min(i+4, len(want))])
		}
	}
	return ""
}

// TestEarlyDifference: the check of the changes a fresh watch delivered
// before its first sync accepts exactly the last changes through the sync's
// index, and names what it finds otherwise.
func TestEarlyDifference(t *testing.T) {
	ev := func(i uint64, typ string) client.WatchEvent {
		return client.WatchEvent{Type: typ, Index: i, Key: "jobs/a", Holder: "h", Token: 1}
	}
	want := []client.WatchEvent{ev(3, client.WatchGranted), ev(5, client.WatchReleased), ev(7, client.WatchGranted), ev(9, client.WatchReleased)}
	cases := []struct {
		name  string
		early []client.WatchEvent
		sync  uint64
		ok    bool
	}{
		{"none", nil, 7, true},
		{"the last through the sync", []client.WatchEvent{ev(5, client.WatchReleased), ev(7, client.WatchGranted)}, 8, true},
		{"all through the sync", want[:3], 7, true},
		{"one skipped", []client.WatchEvent{ev(7, client.WatchGranted)}, 9, false},
		{"one made up", []client.WatchEvent{ev(7, client.WatchExpired)}, 7, false},
		{"one after the sync", []client.WatchEvent{ev(9, client.WatchReleased)}, 8, false},
		{"more than there were", []client.WatchEvent{ev(1, client.WatchGranted), ev(3, client.WatchGranted)}, 3, false},
	}
	for _, c := range cases {
		if d := earlyDifference(c.early, want, c.sync); (d == "") != c.ok {
			t.Errorf("%s: earlyDifference = %q, want ok %v", c.name, d, c.ok)
		}
	}
}
