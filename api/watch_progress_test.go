package api

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenced/fenced/client"
)

// checkCounts are what confirming quiet streams cost the leader: the read
// index requests followers forwarded to it, and its leadership
// confirmation rounds (process-wide counters; only a leader adds to them);
// and the streams the nodes ended, whose watchers resume with a new stream
// that needs a check of its own.
type checkCounts struct{ forwarded, confirmations, ended uint64 }

func countChecks(t testing.TB) checkCounts {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var c checkCounts
	for _, mf := range mfs {
		switch mf.GetName() {
		case "fenced_http_requests_total":
			for _, m := range mf.GetMetric() {
				var route, code string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "route":
						route = l.GetValue()
					case "code":
						code = l.GetValue()
					}
				}
				if route == "GET /v1/watch/index" && code == "200" {
					c.forwarded += uint64(m.GetCounter().GetValue())
				}
			}
		case "fenced_leadership_confirm_seconds":
			for _, m := range mf.GetMetric() {
				c.confirmations += m.GetHistogram().GetSampleCount()
			}
		case "fenced_watch_streams_ended_total":
			for _, m := range mf.GetMetric() {
				c.ended += uint64(m.GetCounter().GetValue())
			}
		}
	}
	return c
}

// quietWatchers starts n watchers of their own keys with progress through
// url, waits until each had its first sync, then counts the checks made
// while they stay quiet for d, and the streams the nodes ended since the
// watchers began. It returns the counts and the time they covered.
func quietWatchers(t testing.TB, url string, n int, progress, d time.Duration) (checkCounts, time.Duration) {
	t.Helper()
	// Streams ended since the watchers began: a stream that ended before
	// the quiet time may come back during it.
	initial := countChecks(t)
	c := client.New([]string{url}, client.WithHTTPClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n + 16}}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var synced sync.WaitGroup
	for i := 0; i < n; i++ {
		synced.Add(1)
		ch := c.Watch(ctx, client.WatchOptions{Key: "quiet/" + strings.Repeat("k", i%7+1), Progress: progress})
		go func() {
			first := true
			for ev := range ch {
				if ev.Type == client.WatchSync && first {
					first = false
					synced.Done()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { synced.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the watchers did not all start")
	}
	before, start := countChecks(t), time.Now()
	time.Sleep(d) // the quiet time measured, not a synchronisation
	after, took := countChecks(t), time.Since(start)
	return checkCounts{after.forwarded - before.forwarded, after.confirmations - before.confirmations, after.ended - initial.ended}, took
}

// TestQuietStreamsShareProgressChecks: the quiet streams of a node share
// its checks with the leader: one check per progress interval serves them
// all, however many there are, instead of one per stream per interval.
func TestQuietStreamsShareProgressChecks(t *testing.T) {
	nodes := startCluster(t, 3)
	_, fol := leaderOf(t, nodes)
	const watchers, progress = 50, 100 * time.Millisecond
	got, took := quietWatchers(t, fol.url, watchers, progress, 3*time.Second)
	intervals := uint64(took/progress) + 1
	t.Logf("%d quiet watchers (progress %v) on a follower for %v: %d read index requests forwarded to the leader, %d leadership confirmations, %d streams ended by a node",
		watchers, progress, took.Round(time.Millisecond), got.forwarded, got.confirmations, got.ended)
	// A check for quiet streams starts more than a progress interval after
	// the one before it, so at most one per interval, and one more in
	// flight at each end. A stream a node ended (on a loaded machine, a
	// check that outlasted its interval) comes back as a new stream, whose
	// arrival may start a check of its own: at most one each.
	if limit := intervals + 2 + got.ended; got.forwarded > limit {
		t.Fatalf("%d read index requests forwarded in %d progress intervals with %d streams resumed (at most %d): the streams do not share their checks",
			got.forwarded, intervals, got.ended, limit)
	}
}

// BenchmarkQuietWatchersOnFollowers counts what 200 quiet watchers with
// progress=100ms, a hundred on each follower of a 3-node cluster, cost the
// leader in 40 s: read index requests forwarded to it and leadership
// confirmations, per second.
//
//	go test -run '^$' -bench BenchmarkQuietWatchersOnFollowers -benchtime 1x ./api/
func BenchmarkQuietWatchersOnFollowers(b *testing.B) {
	nodes := startCluster(b, 3)
	lead, _ := leaderOf(b, nodes)
	var fols []string
	for _, n := range nodes {
		if n != lead {
			fols = append(fols, n.url)
		}
	}
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		counts := make([]checkCounts, len(fols))
		var took time.Duration
		for j, url := range fols {
			wg.Add(1)
			go func() {
				defer wg.Done()
				counts[j], took = quietWatchers(b, url, 100, 100*time.Millisecond, 40*time.Second)
			}()
		}
		wg.Wait()
		// The counters are the process's: each follower's share saw them all.
		got := counts[0]
		b.ReportMetric(float64(got.forwarded), "forwarded")
		b.ReportMetric(float64(got.confirmations), "confirmations")
		b.ReportMetric(float64(got.forwarded)/took.Seconds(), "forwarded/s")
		b.ReportMetric(float64(got.confirmations)/took.Seconds(), "confirmations/s")
	}
}

// TestCheckWaitTimeoutIsUnavailable: a stream waits for a shared check
// only as long as its progress interval; a check slower than that (a
// loaded leader) ends the stream as unavailable, which the watcher resumes
// from, never as an internal error.
func TestCheckWaitTimeoutIsUnavailable(t *testing.T) {
	var c indexChecks
	release := make(chan struct{})
	defer close(release)
	slow := func(ctx context.Context) (uint64, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 7, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := c.get(ctx, time.Now(), slow)
	if code, status := codeOf(err); code != "unavailable" || status != http.StatusServiceUnavailable {
		t.Fatalf("a wait for a slow check ended with %v: code %s (%d); want unavailable (503)", err, code, status)
	}
}
