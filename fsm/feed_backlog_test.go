package fsm

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

// fullFeed returns a feed whose history holds n events of keys k/0 ... k/n-1
// at indexes 1..n.
func fullFeed(n int) *Feed {
	fd := newFeed()
	fd.SetLimits(n, 0)
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{Index: uint64(i + 1), Type: EventGranted, Key: fmt.Sprintf("k/%d", i)}
	}
	fd.publish(evs, uint64(n))
	return fd
}

// TestSubscribeCopiesNoBacklogUnderTheLock: a subscription that resumes from
// far back is handed a cursor into the history, not a copy of it made under
// the feed's lock (which every apply takes to publish); each poll takes a
// bounded chunk, and the whole backlog then the new events arrive in order.
func TestSubscribeCopiesNoBacklogUnderTheLock(t *testing.T) {
	const n = 10000
	fd := fullFeed(n)
	s, err := fd.Subscribe("k/", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	copied := len(s.buf)
	s.mu.Unlock()
	if copied != 0 {
		t.Fatalf("subscribe copied %d events of its backlog under the feed's lock", copied)
	}
	var got []uint64
	for polls := 0; len(got) < n+1; polls++ {
		if polls == 3 {
			// A new event while the backlog is taken comes after it.
			fd.publish([]Event{{Index: n + 1, Type: EventGranted, Key: "k/new"}}, n+1)
		}
		b, err := s.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) > 1024 {
			t.Fatalf("one poll took %d events, more than a chunk of 1024", len(b.Events))
		}
		for _, ev := range b.Events {
			got = append(got, ev.Index)
		}
		if polls > 2*n {
			t.Fatalf("no end to the backlog after %d polls: %d events", polls, len(got))
		}
	}
	for i, idx := range got {
		if idx != uint64(i+1) {
			t.Fatalf("event %d has index %d: the backlog and the new event out of order", i, idx)
		}
	}
}

// BenchmarkPublishWhileSubscribing measures what a watch that resumes from
// the oldest event of a full history (65,536 events) costs the apply path:
// each publish of one event, timed while such subscriptions come and go,
// waits for the feed's lock that a subscribe holds.
//
//	go test -run '^$' -bench BenchmarkPublishWhileSubscribing ./fsm/
func BenchmarkPublishWhileSubscribing(b *testing.B) {
	fd := fullFeed(DefaultHistory)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s, err := fd.Subscribe("k/", false, fd.Since())
			if err != nil {
				continue
			}
			for i := 0; i < 64; i++ { // a watcher taking its backlog
				if _, err := s.Poll(); err != nil {
					break
				}
			}
			s.Close()
		}
	}()
	lat := make([]time.Duration, 0, b.N)
	next := uint64(DefaultHistory)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		next++
		start := time.Now()
		fd.publish([]Event{{Index: next, Type: EventGranted, Key: "k/x"}}, next)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)*999/1000].Nanoseconds()), "p99.9-publish-ns")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-publish-µs")
}

// BenchmarkSubscribeFullHistory is the cost of subscribing from the oldest
// event of a full history, under the feed's lock.
//
//	go test -run '^$' -bench BenchmarkSubscribeFullHistory ./fsm/
func BenchmarkSubscribeFullHistory(b *testing.B) {
	fd := fullFeed(DefaultHistory)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := fd.Subscribe("k/", false, fd.Since())
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}
