package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Every request and every verdict adds to a labelled series. Resolving the
// series from its label values (hashing and validating each value, a lock,
// a string for the status code) costs more than the addition itself, so
// the series are resolved once: the request series on a route's first
// answer with a status code, the verdict series when the process starts.
// The label values are bounded as before: routes are the mux's patterns,
// status codes the ones the handlers write, reasons the lists in labels.go.

// requestKey names the request series of one route and status code.
type requestKey struct {
	route string
	code  int
}

// requestSeries are the series a request of one route and status code
// adds to.
type requestSeries struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// requestSeriesOf holds *requestSeries by requestKey: written once per
// key, read by every request after, which sync.Map serves without a lock.
var requestSeriesOf sync.Map

// ObserveRequest counts a request to route answered with code in
// fenced_http_requests_total and records how long it took in
// fenced_http_request_seconds.
func ObserveRequest(route string, code int, took time.Duration) {
	k := requestKey{route, code}
	v, ok := requestSeriesOf.Load(k)
	if !ok {
		v, _ = requestSeriesOf.LoadOrStore(k, &requestSeries{
			count:   Requests.WithLabelValues(route, strconv.Itoa(code)),
			latency: RequestLatency.WithLabelValues(route),
		})
	}
	s := v.(*requestSeries)
	s.count.Inc()
	s.latency.Observe(took.Seconds())
}

// verdictSeries are the fenced_verifies_total series of the known reasons,
// by result; filled when the process starts (which also exports each with
// a zero value from the first scrape), read-only after.
var verdictSeries = map[bool]map[string]prometheus.Counter{
	true:  verdictCounters("allow", VerifyAllowReasons),
	false: verdictCounters("refuse", VerifyRefuseReasons),
}

func verdictCounters(result string, reasons []string) map[string]prometheus.Counter {
	m := make(map[string]prometheus.Counter, len(reasons))
	for _, r := range reasons {
		m[r] = Verifies.WithLabelValues(result, r)
	}
	return m
}

// CountVerdict counts a verify verdict in fenced_verifies_total: allow or
// refuse, and its reason.
func CountVerdict(allow bool, reason string) {
	if c, ok := verdictSeries[allow][reason]; ok {
		c.Inc()
		return
	}
	result := "refuse"
	if allow {
		result = "allow"
	}
	Verifies.WithLabelValues(result, reason).Inc()
}
