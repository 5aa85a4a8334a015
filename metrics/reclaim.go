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
		Help: "Ended keys the leader tracks until their retention passes."})
	EpochBumps = promauto.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "reclaim_epoch_bumps_total",
		Help: "Epoch floor raises made by reclamation entries this node proposed as leader."})
	EpochsLeft = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "epochs_left",
		Help: "Epochs left before the epoch space (2^31-1) is exhausted: the highest epoch minus the current term plus the epoch floor."})
	Keys = promauto.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "keys",
		Help: "Keys in the replicated state (held, released and expired, not yet reclaimed)."})
)
