package checker

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fenced/fenced/jepsen-like/history"
)

// AvailabilityName is the name of the availability checker's result.
const AvailabilityName = "availability"

// Unavailability is the client-observed time without service under one kind
// of fault: for every client and every fault of that kind, the longest gap
// between two operations the cluster served, while a quorum of nodes was
// healthy and connected; Max and P99 are over those per-client figures.
type Unavailability struct {
	Nemesis string `json:"nemesis"`
	// Faults is how many faults of this kind the run had; Samples how many
	// (fault, client) gaps were measured.
	Faults  int `json:"faults"`
	Samples int `json:"samples"`
	// Max, P99 and P50 of the per-client longest gaps.
	Max time.Duration `json:"max"`
	P99 time.Duration `json:"p99"`
	P50 time.Duration `json:"p50"`
	// Worst says where Max was seen: client, fault and the gap's ends.
	Worst string `json:"worst,omitempty"`
	// Bound is the checker's limit; Target the figure to report against
	// (the election timeout plus one second).
	Bound  time.Duration `json:"bound"`
	Target time.Duration `json:"target"`
}

// AvailabilityOptions configure the availability checker.
type AvailabilityOptions struct {
	// Nemeses are the faults that leave a quorum of healthy, connected nodes
	// for their whole length (one node frozen or slow); only their windows
	// are measured.
	Nemeses []string
	// ElectionTimeout is fenced's --election-timeout in the run; Margin is
	// added to it to make the bound.
	ElectionTimeout time.Duration
	Margin          time.Duration
}

// Served reports whether the cluster answered op with a definite verdict
// (see served); the report marks each client's longest time without one.
func Served(o *history.Op) bool { return served(o) }

// served reports whether the cluster answered op with a definite verdict:
// an acknowledgement, a verify's verdict, or a refusal that says something
// about the key (held, stale, expired...). Timeouts, "unavailable" and
// unknown outcomes without such a verdict are no service.
func served(o *history.Op) bool {
	switch o.Kind {
	case history.Acquire, history.Renew, history.Release, history.Keepalive, history.Verify:
	default:
		return false // the harness's resource, not fenced
	}
	if o.Outcome == history.OK {
		return o.Kind != history.Verify || o.Code != "unavailable"
	}
	switch o.Code {
	case "held", "not_holder", "stale_token", "expired", "grant_ended", "no_lease", "lock_delay",
		"unknown_key", "too_many_keys", "too_many_waiters":
		return true
	}
	return false
}

// gapStat is one client's longest gap in one fault's window.
type gapStat struct {
	client     int
	fault      int
	from, to   int64
	d          time.Duration
	unfinished bool
}

// Availability checks that clients are served while a quorum is healthy:
// during each fault of opt.Nemeses (which leave two of three nodes, three of
// five, healthy and connected), and until the next fault begins, no client
// goes longer than ElectionTimeout + Margin between two operations the
// cluster served. A gap is counted from the fault's start at the earliest,
// and ends at the client's next served operation, or, if none came, at the
// next fault's start or the end of the run. It also returns, per nemesis,
// the max, p99 and median of the per-client longest gaps.
func Availability(ops []history.Op, faults []history.Fault, opt AvailabilityOptions) Result {
	r := Result{Name: AvailabilityName}
	bound := opt.ElectionTimeout + opt.Margin
	target := opt.ElectionTimeout + time.Second
	scope := map[string]bool{}
	for _, n := range opt.Nemeses {
		scope[n] = true
	}
	// Each client's served completions and its invocations, sorted; the
	// run's end.
	byClient := map[int][]int64{}
	invoked := map[int][][2]int64{}
	var end int64
	for i := range ops {
		o := &ops[i]
		end = max(end, o.Complete)
		if o.Kind == history.Write || o.Kind == history.Read {
			continue
		}
		invoked[o.Client] = append(invoked[o.Client], [2]int64{o.Invoke, o.Complete})
		if _, ok := byClient[o.Client]; !ok {
			byClient[o.Client] = nil
		}
		if served(o) {
			byClient[o.Client] = append(byClient[o.Client], o.Complete)
		}
	}
	var clients []int
	for c, ts := range byClient {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		clients = append(clients, c)
	}
	sort.Ints(clients)
	starts := make([]int64, 0, len(faults))
	for _, f := range faults {
		starts = append(starts, f.Start)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })

	stats := map[string][]gapStat{}
	counts := map[string]int{}
	var order []string
	for _, f := range faults {
		if !scope[f.Nemesis] {
			continue
		}
		if counts[f.Nemesis] == 0 {
			order = append(order, f.Nemesis)
		}
		counts[f.Nemesis]++
		// The window: the fault, then the healthy cluster after its heal,
		// until the next fault (of any kind) begins.
		stop := end
		if i := sort.Search(len(starts), func(i int) bool { return starts[i] > f.Start }); i < len(starts) {
			stop = starts[i]
		}
		for _, c := range clients {
			if !asked(invoked[c], f.Start, stop) {
				continue // a client that asked nothing was not kept waiting
			}
			if g, ok := longestGap(byClient[c], f.Start, stop); ok {
				g.client, g.fault = c, f.Index
				stats[f.Nemesis] = append(stats[f.Nemesis], g)
			}
		}
	}
	var figures []Unavailability
	for _, n := range order {
		gs := stats[n]
		r.Checked += len(gs)
		u := Unavailability{Nemesis: n, Faults: counts[n], Samples: len(gs), Bound: bound, Target: target}
		ds := make([]time.Duration, len(gs))
		for i, g := range gs {
			ds[i] = g.d
			if g.d > bound {
				how := "until its next served operation"
				if g.unfinished {
					how = "and none came before the window ended"
				}
				r.violate("client c%d went %v without service (bound %v = election timeout %v + margin %v) during %s #%d, from %.3fs to %.3fs %s",
					g.client, g.d.Round(time.Millisecond), bound, opt.ElectionTimeout, opt.Margin, n, g.fault, float64(g.from)/1e9, float64(g.to)/1e9, how)
			}
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		if len(ds) > 0 {
			u.Max, u.P99, u.P50 = ds[len(ds)-1], percentile(ds, 99), percentile(ds, 50)
			w := gs[0]
			for _, g := range gs {
				if g.d > w.d {
					w = g
				}
			}
			u.Worst = fmt.Sprintf("c%d in %s #%d, %.3fs..%.3fs", w.client, n, w.fault, float64(w.from)/1e9, float64(w.to)/1e9)
		}
		figures = append(figures, u)
	}
	res := r.finish("client gaps in windows of a healthy quorum")
	res.Unavailability = figures
	if len(figures) == 0 {
		res.Summary = "ok: no fault that leaves a healthy quorum in this run (" + strings.Join(opt.Nemeses, ", ") + ")"
		return res
	}
	var parts []string
	for _, u := range figures {
		parts = append(parts, fmt.Sprintf("%s max %v p99 %v", u.Nemesis, u.Max.Round(time.Millisecond), u.P99.Round(time.Millisecond)))
	}
	verdict := "ok"
	if !res.Pass {
		verdict = fmt.Sprintf("FAIL: %d gaps over the bound", res.Count)
	}
	res.Summary = fmt.Sprintf("%s: time without service while a quorum was healthy (bound %v): %s", verdict, bound, strings.Join(parts, "; "))
	return res
}

// longestGap returns a client's longest time without service in the window
// [start, stop): between consecutive served completions, counted from start
// at the earliest and cut at stop (the next fault may stop service for its
// own reasons). A client with no served operation before the window opened
// is left out: it was not running (the recovery probe).
func longestGap(ts []int64, start, stop int64) (gapStat, bool) {
	if len(ts) == 0 || ts[0] > start {
		return gapStat{}, false
	}
	var g gapStat
	prev := start
	i := sort.Search(len(ts), func(i int) bool { return ts[i] > start })
	for ; i < len(ts) && prev < stop; i++ {
		to := min(ts[i], stop)
		if d := time.Duration(to - prev); d > g.d {
			g.from, g.to, g.d, g.unfinished = prev, to, d, to < ts[i]
		}
		prev = ts[i]
	}
	if prev < stop && i == len(ts) {
		// No service until the window closed: the gap lasts at least that.
		if d := time.Duration(stop - prev); d > g.d {
			g.from, g.to, g.d, g.unfinished = prev, stop, d, true
		}
	}
	return g, true
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

// asked reports whether a client had an operation under way at some time in
// [from, to): one that was invoked or still waiting for its answer there.
func asked(spans [][2]int64, from, to int64) bool {
	for _, sp := range spans {
		if sp[0] < to && sp[1] >= from {
			return true
		}
	}
	return false
}
