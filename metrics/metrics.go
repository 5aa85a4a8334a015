// Package metrics holds fenced's Prometheus metrics, and wires the metrics of
// hashicorp/raft and raft-boltdb into the same registry.
package metrics

import (
	"net/http"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const ns = "fenced"

// The metrics a node exports. Counters of grant events are counted by the
// leader only, so summing them over the cluster counts each event once.
var (
	Grants = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "grants_total",
		Help: "New grants made (each with a new token)."})
	Renewals = promauto.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "renewals_total",
		Help: "Lease renewals, by how: acquire (by the holder), renew, keepalive."}, []string{"how"})
	Releases = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "releases_total",
		Help: "Grants ended by a release."})
	Expiries = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "expiries_total",
		Help: "Grants ended because their lease ran out on the leader's clock."})
	Handoffs = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "handoffs_total",
		Help: "Grants made to a waiter in the same commit that freed the key."})
	Refusals = promauto.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "refusals_total",
		Help: "Requests refused, by reason (the API error code)."}, []string{"reason"})
	Verifies = promauto.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "verifies_total",
		Help: "Verify verdicts, by result (allow, refuse) and reason."}, []string{"result", "reason"})
	Waiters = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "waiters",
		Help: "Acquires waiting for a key on this node."})
	LeaderChanges = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "leader_changes_total",
		Help: "Times this node gained or lost leadership."})
	IsLeader = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "is_leader",
		Help: "1 while this node is the ready leader."})
	ApplyLatency = promauto.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "apply_seconds",
		Help:    "Time from proposing a command to its result, by command.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"command"})
	ConfirmLatency = promauto.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "leadership_confirm_seconds",
		Help:    "Time of one shared leadership confirmation round.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16)})
	ConfirmBatch = promauto.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "leadership_confirm_batch",
		Help:    "Requests served by one leadership confirmation round.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 10)})
	RenewalConfirms = promauto.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "renewal_confirmations_total",
		Help: "Renewal and keepalive requests by what proved this node still leads: recent_quorum (a heartbeat a quorum accepted within the renewal window) or round (a confirmation round of their own)."},
		[]string{"by"})
	VerifyConfirms = promauto.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "verify_confirmations_total",
		Help: "Verify requests (single or batched) by what proved the state they read was current: recent_quorum (a heartbeat a quorum accepted within the renewal window) or round (a confirmation round of their own)."},
		[]string{"by"})
	Batches = promauto.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "batches_total",
		Help: "Batch requests served, by operation (verify, keepalive)."}, []string{"op"})
	BatchItems = promauto.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "batch_items_total",
		Help: "Items (checks, holders) in the batch requests served, by operation (verify, keepalive)."}, []string{"op"})
	WatchStreams = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "watch_streams",
		Help: "Watch streams being served by this node."})
	WatchEnded = promauto.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "watch_streams_ended_total",
		Help: "Watch streams that ended other than by the watcher, by reason: slow (a write waited the write timeout), gone (the connection failed), lagged, restored, closed, unconfirmed (the node could not confirm it is current)."},
		[]string{"reason"})
	Requests = promauto.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "http_requests_total",
		Help: "HTTP API requests, by route and status code."}, []string{"route", "code"})
	// RequestLatency splits an operation's latency as a client sees it:
	// beside apply_seconds and raft's commitTime, it shows what decoding,
	// checking, signing and encoding add to the commit.
	RequestLatency = promauto.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "http_request_seconds",
		Help:    "Time from a request's arrival in the handler to its answer handed to the connection, by route (a watch's time is its stream's length).",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18)}, []string{"route"})
	RaftPeerRefusals = promauto.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "raft_peer_refusals_total",
		Help: "Raft connections refused because a peer's certificate does not name the server: dial (the server that answered at a member's address is not that member) or rpc (an RPC's sender is not the server its connection's certificate names)."},
		[]string{"side"})
	CredentialsReload = promauto.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "credentials_reload_success",
		Help: "1 when the latest load of this material (http_tls, peer_tls, tokens) succeeded; 0 when its latest reload failed, so the node still uses the material it had before."},
		[]string{"material"})
	LogStalls = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "log_stalls_total",
		Help: "Times this node, leading, stopped leading because its own raft log write (fsync) took longer than --log-stall-bound."})
	LogStoreFailed = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "log_store_failed",
		Help: "1 once an fsync of the Raft log failed: the node stops itself and must be restarted."})
	DiskFreeBytes = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "disk_free_bytes",
		Help: "Free bytes of the file system holding the data dir, as the latest check saw them."})
	DataDirBytes = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "data_dir_bytes",
		Help: "Size of the files in the data dir (WAL segments at their preallocated size)."})
	NoSpace = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "no_space",
		Help: "1 while the data dir is below its free-space floor or a log write failed for lack of space: the leader refuses new keys (no_space)."})
	CredentialsLoaded = promauto.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "credentials_loaded_timestamp_seconds",
		Help: "Unix time the material in use (http_tls, peer_tls, tokens) was loaded."}, []string{"material"})
)

// ObserveApply records one proposal's latency.
func ObserveApply(command string, start time.Time) {
	ApplyLatency.WithLabelValues(command).Observe(time.Since(start).Seconds())
}

var sinkOnce sync.Once

// InstallRaftSink routes the go-metrics that hashicorp/raft and raft-boltdb
// emit (through go-metrics' compat package, as they do) into the Prometheus
// registry that Handler serves. Call it once per process, before the node
// starts.
func InstallRaftSink() error {
	var err error
	sinkOnce.Do(func() {
		var sink *gmprom.PrometheusSink
		sink, err = gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Expiration: time.Minute})
		if err != nil {
			return
		}
		cfg := gometrics.DefaultConfig(ns)
		cfg.EnableHostname = false
		cfg.EnableRuntimeMetrics = false // the Go collector already exports them
		_, err = gometrics.NewGlobal(cfg, sink)
	})
	return err
}

// Handler serves the metrics in the Prometheus text format.
func Handler() http.Handler { return promhttp.Handler() }
