package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/fenced/fenced/jepsen-like/history"
)

// TenantsName names the Tenants checker.
const TenantsName = "tenant-isolation"

// unserved are the codes of a request no node could serve at that moment
// (a node down, paused or not the leader): any client may get them while
// faults are injected, and they say nothing about the other tenant. The
// flooder may also be held to its rate (rate_limited), never the other
// tenant.
var unserved = []string{history.CodeTransport, "not_leader", "not_ready", "unavailable", "outcome_unknown", "busy", "shutting_down"}

// floodAny are the answers anything the flooder does may get.
var floodAny = append([]string{"rate_limited"}, unserved...)

// floodExpected are the answers each thing the flooder does may get, on
// top of the unserved ones: its own keys and streams up to its shares,
// and nothing of the other tenant's.
var floodExpected = map[string][]string{
	// A stream whose start left a node's feed while it caught up is
	// told so (compacted): the history's window, not a share.
	history.FloodWatch: {history.CodeOK, "too_many_watches", "compacted"},
	// A cycled grant's release after an unknown outcome may find it
	// gone; ended keys past the share refuse new names.
	history.FloodCycle: {history.CodeOK, "too_many_ended_keys", "grant_ended", "stale_token", "expired"},
	// A waiting acquire retried after an unknown outcome may hear that
	// the grant its first attempt got has ended.
	history.FloodWait:          {history.CodeOK, "held", "too_many_waiters", "grant_ended"},
	history.FloodVictimAcquire: {"forbidden"},
	history.FloodVictimRead:    {"forbidden"},
}

// floodReached are the refusals the flood must have met for the run to
// prove anything: a flood that never reached a share, or never tried the
// other tenant's keys, shows nothing about them.
var floodReached = map[string]string{
	history.FloodWatch:         "too_many_watches",
	history.FloodVictimAcquire: "forbidden",
}

// Tenants checks a two-tenant run: the flooding tenant's answers (flood:
// what it did, then wire code, then count) are only those its shares and
// the ACL allow, it reached its share of watches and was refused the other
// tenant's keys, and the other tenant (ops, its whole history) was never
// refused for a share (no 429) and never saw the flooder hold its keys.
func Tenants(ops []history.Op, flood map[string]map[string]int, flooder string) Result {
	r := Result{Name: TenantsName}
	for _, o := range ops {
		r.Checked++
		if strings.HasPrefix(o.Code, "too_many_") || o.Code == "rate_limited" {
			r.violate("the other tenant was refused for a share while %s flooded (429 %s): %s", flooder, o.Code, o.Describe())
		}
		if o.HeldBy != "" && strings.HasPrefix(o.HeldBy, flooder+"/") {
			r.violate("the flooder %s held the other tenant's key: %s", flooder, o.Describe())
		}
		if o.CurrentHolder != "" && strings.HasPrefix(o.CurrentHolder, flooder+"/") {
			r.violate("the flooder %s held the other tenant's key (verify): %s", flooder, o.Describe())
		}
	}
	kinds := make([]string, 0, len(flood))
	for k := range flood {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		want, known := floodExpected[kind]
		codes := make([]string, 0, len(flood[kind]))
		for c := range flood[kind] {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		for _, c := range codes {
			r.Checked += flood[kind][c]
			if !known || slices.Contains(want, c) || slices.Contains(floodAny, c) {
				continue
			}
			r.violate("the flooder's %s was answered %s %d times; want %s (or a node that could not serve)", kind, c, flood[kind][c], strings.Join(want, ", "))
		}
	}
	reached := make([]string, 0, len(floodReached))
	for k := range floodReached {
		reached = append(reached, k)
	}
	sort.Strings(reached)
	for _, kind := range reached {
		if flood[kind][floodReached[kind]] == 0 {
			r.violate("the flooder's %s was never refused %s: the flood did not reach what it tests (%s)", kind, floodReached[kind], fmt.Sprint(flood[kind]))
		}
	}
	res := r.finish("operations of the other tenant and answers to the flooder")
	res.Summary += "; flood: " + history.Describe(flood)
	return res
}
