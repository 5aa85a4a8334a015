package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The metrics of key reclamation (--key-retention). They are set by the
// leader; a follower's stay at their last values.
var (
	KeysReclaimed = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "keys_reclaimed_total",
		Help: "Ended keys forgotten by reclamation entries this node proposed as leader."})
	ReclaimPending = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "keys_reclaim_pending",
		Help: "Ended keys the leader tracks until their retention passes (one per key, its latest end)."})
	// LeaseTouches counts the grants renewed through a Touch entry: the
	// first renewal of each grant after an election.
	LeaseTouches = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "lease_touches_total",
		Help: "Grants whose first renewal after an election was written to the log (a touch), so a later leader counts their leases from it."})
	// EndedKeyRefusals counts the acquires of new key names refused because
	// their identity had --max-ended-keys-per-identity ended keys kept.
	EndedKeyRefusals = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "ended_keys_limit_refusals_total",
		Help: "Acquires of new key names refused because their identity had as many ended keys kept as it may."})
	// EndedKeysMaxIdentity is the most ended keys one identity has kept.
	EndedKeysMaxIdentity = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "ended_keys_max_per_identity",
		Help: "The most ended keys any one identity has kept, on the leader (see --max-ended-keys-per-identity)."})
	EpochBumps = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "reclaim_epoch_bumps_total",
		Help: "Epoch floor raises made by reclamation entries this node proposed as leader."})
	EpochsLeft = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "epochs_left",
		Help: "Epochs left before the epoch space (2^31-1) is exhausted: the highest epoch minus the current term plus the epoch floor."})
	Keys = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "keys",
		Help: "Keys in the replicated state (held, released and expired, not yet reclaimed)."})
	// RequestIDs is the number of request ids remembered beyond their
	// key's last grant (the request-id history).
	RequestIDs = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "request_ids_remembered",
		Help: "Request ids remembered beyond their key's last grant, so a late retry is never granted twice."})
	// RequestIDsForgottenEarly counts the ids forgotten before their 15
	// minutes because their client (or all clients together) was over its
	// share of the history.
	RequestIDsForgottenEarly = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "request_ids_forgotten_early_total",
		Help: "Request ids forgotten before their 15-minute window because their client, or all clients together, was over its share."})
)
