package metrics

// The label values of the labelled metrics. Every combination is created
// with a zero value when the process starts, so a node exports each series
// from its first scrape (a counter that appears only at its first increment
// hides that first event from rate() and from alerts on absent series);
// fenced_verifies_total's are created with verdictSeries (requests.go).
// api's tests check that these lists cover every wire error code and verify
// reason.
var (
	// RenewalKinds label fenced_renewals_total.
	RenewalKinds = []string{"acquire", "renew", "keepalive"}
	// RefusalReasons label fenced_refusals_total: the API error codes.
	RefusalReasons = []string{
		"held", "limit_mismatch", "not_holder", "stale_token", "expired", "grant_ended", "no_lease", "lock_delay", "unknown_key",
		"seq_exhausted", "epoch_exhausted", "epoch_regressed", "malformed_token", "bad_request", "not_leader",
		"not_ready", "busy", "shutting_down", "unavailable", "not_member", "outcome_unknown", "unauthenticated",
		"forbidden", "rate_limited", "request_timeout", "too_many_keys", "too_many_waiters", "too_many_ended_keys", "too_many_watches", "no_space", "compacted", "internal",
	}
	// VerifyAllowReasons and VerifyRefuseReasons label fenced_verifies_total
	// (result allow and refuse).
	VerifyAllowReasons  = []string{"ok"}
	VerifyRefuseReasons = []string{"superseded", "released", "expired", "unknown_key", "not_granted_yet",
		"holder_mismatch", "malformed", "unavailable"}
	// BatchOps label fenced_batches_total and fenced_batch_items_total.
	BatchOps = []string{"verify", "keepalive"}
	// RaftPeerRefusalSides label fenced_raft_peer_refusals_total.
	RaftPeerRefusalSides = []string{"dial", "rpc"}
	// ApplyCommands label fenced_apply_seconds.
	ApplyCommands = []string{"acquire", "release", "expire", "other"}
	// WatchEndReasons label fenced_watch_streams_ended_total.
	WatchEndReasons = []string{"slow", "gone", "lagged", "restored", "closed", "unconfirmed"}
)

func init() {
	for _, v := range RenewalKinds {
		Renewals.WithLabelValues(v)
	}
	for _, v := range RefusalReasons {
		Refusals.WithLabelValues(v)
	}
	for _, v := range BatchOps {
		Batches.WithLabelValues(v)
		BatchItems.WithLabelValues(v)
	}
	for _, v := range RaftPeerRefusalSides {
		RaftPeerRefusals.WithLabelValues(v)
	}
	for _, v := range ApplyCommands {
		ApplyLatency.WithLabelValues(v)
	}
	for _, v := range WatchEndReasons {
		WatchEnded.WithLabelValues(v)
	}
}
