package metrics

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// sampleCount is the number of observations in route's latency histogram.
func sampleCount(t testing.TB, route string) uint64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fenced_http_request_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// TestObserveRequestAddsToItsRoutesSeries: each request adds to the series
// of its own route and status code, the first one of a pair as well as
// those served from the resolved series after it, and to no other.
func TestObserveRequestAddsToItsRoutesSeries(t *testing.T) {
	const a, b = "POST /test/a", "GET /test/b"
	for i := 0; i < 3; i++ {
		ObserveRequest(a, 200, time.Millisecond)
	}
	ObserveRequest(a, 409, time.Millisecond)
	ObserveRequest(b, 200, time.Millisecond)
	for _, c := range []struct {
		route, code string
		want        float64
	}{{a, "200", 3}, {a, "409", 1}, {b, "200", 1}, {b, "409", 0}} {
		if got := testutil.ToFloat64(Requests.WithLabelValues(c.route, c.code)); got != c.want {
			t.Errorf("%s %s: %v requests counted, want %v", c.route, c.code, got, c.want)
		}
	}
	if got := sampleCount(t, a); got != 4 {
		t.Errorf("%s: %d latencies recorded, want 4", a, got)
	}
	if got := sampleCount(t, b); got != 1 {
		t.Errorf("%s: %d latencies recorded, want 1", b, got)
	}
}

// TestCountVerdictAddsToItsReasonsSeries: a verdict adds to the series of
// its result and reason, for the reasons resolved at start, for one that is
// not in the lists, and for a result and reason that never go together.
func TestCountVerdictAddsToItsReasonsSeries(t *testing.T) {
	cases := []struct {
		allow  bool
		reason string
	}{{true, "ok"}, {false, "superseded"}, {false, "expired"}, {false, "not_in_the_lists"}, {false, "ok"}}
	for _, c := range cases {
		result := map[bool]string{true: "allow", false: "refuse"}[c.allow]
		s := Verifies.WithLabelValues(result, c.reason)
		other := Verifies.WithLabelValues(map[bool]string{true: "refuse", false: "allow"}[c.allow], c.reason)
		before, otherBefore := testutil.ToFloat64(s), testutil.ToFloat64(other)
		CountVerdict(c.allow, c.reason)
		CountVerdict(c.allow, c.reason)
		if got := testutil.ToFloat64(s) - before; got != 2 {
			t.Errorf("%s %s: counted %v, want 2", result, c.reason, got)
		}
		if got := testutil.ToFloat64(other) - otherBefore; got != 0 {
			t.Errorf("%s %s: the other result's series counted %v", result, c.reason, got)
		}
	}
}

// BenchmarkObserveRequest is a request's metrics as ServeHTTP records
// them: resolved once per route and code (ObserveRequest) against
// resolving the labels on every request, as fenced did before.
//
//	go test -run '^$' -bench ObserveRequest -benchmem ./metrics/
func BenchmarkObserveRequest(b *testing.B) {
	const route = "POST /bench/verify"
	b.Run("resolved", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ObserveRequest(route, 200, 200*time.Microsecond)
			}
		})
	})
	b.Run("by-labels", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				Requests.WithLabelValues(route, strconv.Itoa(200)).Inc()
				RequestLatency.WithLabelValues(route).Observe((200 * time.Microsecond).Seconds())
			}
		})
	})
}
