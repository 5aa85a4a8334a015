package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLabelledMetricsExistFromStart: the labelled metrics are exported, with
// zero values, before anything happened, on every node, so that dashboards
// and rate() see them from the first scrape.
func TestLabelledMetricsExistFromStart(t *testing.T) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	for _, name := range []string{"fenced_verifies_total", "fenced_refusals_total", "fenced_renewals_total", "fenced_apply_seconds", "fenced_batches_total", "fenced_batch_items_total", "fenced_raft_peer_refusals_total"} {
		if series[name] == 0 {
			t.Errorf("%s has no series before any event", name)
		}
	}
}
