package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// The shape workloads' checkers.
const (
	PermitCountName    = "permit-count"
	RWExclusionName    = "rw-exclusion"
	MultiAtomicityName = "multi-atomicity"
)

// modeExclusive and modeShared are the modes an rw acquire records.
const (
	modeExclusive = "exclusive"
	modeShared    = "shared"
)

// liveWindow is the part of a grant's life the history proves: from the
// acknowledgement of its acquire until the first release of it was asked
// for or TTL after its last acknowledged acquire or renewal was asked for,
// whichever comes first. The leader arms a lease after the request was sent
// and a new leader re-arms it in full (the reasoning of
// lease-no-early-expiry), so the grant is live for all of it. A grant may
// live longer; two windows that overlap are two grants live together.
type liveWindow struct {
	key        string
	tok        fence.Token
	holder     string
	mode       string
	op         *history.Op
	start, end int64
}

func (w *liveWindow) String() string {
	return fmt.Sprintf("%s %s live [%.3fs..%.3fs): %s", w.holder, history.Tok(w.tok), float64(w.start)/1e9, float64(w.end)/1e9, w.op.Describe())
}

// grantOps expands the acknowledged acquires of ops into one acquire per
// key: a multi-key acquire becomes one per key of its set, with the same
// times.
func grantOps(ops []history.Op) []history.Op {
	var out []history.Op
	for _, o := range ops {
		switch {
		case o.Kind == history.Acquire && o.Outcome == history.OK:
			out = append(out, o)
		case o.Kind == history.AcquireMulti && o.Outcome == history.OK:
			for i, k := range o.Keys {
				if i < len(o.Grants) {
					g := o
					g.Kind, g.Key, g.Granted, g.Keys, g.Grants = history.Acquire, k, o.Grants[i], nil, nil
					out = append(out, g)
				}
			}
		}
	}
	return out
}

// liveWindows returns every acknowledged grant's proven live window, by
// key: from its acknowledgement until its release was asked for, or until
// TTL and its lock-delay after its last acquire or renewal was asked for.
func liveWindows(ops []history.Op, ttl time.Duration) map[string][]*liveWindow {
	type kt struct {
		key string
		tok fence.Token
	}
	gs := grantOps(ops)
	lastAsked := map[kt]int64{}
	delay := map[kt]time.Duration{}
	for _, g := range gs {
		k := kt{g.Key, g.Granted}
		if g.Invoke >= lastAsked[k] {
			delay[k] = g.LockDelay
		}
		lastAsked[k] = max(lastAsked[k], g.Invoke)
	}
	released := map[kt]int64{}
	for _, o := range ops {
		k := kt{o.Key, o.Token}
		switch {
		case o.Kind == history.Renew && o.Outcome == history.OK:
			lastAsked[k] = max(lastAsked[k], o.Invoke)
		case o.Kind == history.Release && o.Outcome != history.Fail:
			if t, ok := released[k]; !ok || o.Invoke < t {
				released[k] = o.Invoke
			}
		}
	}
	out := map[string][]*liveWindow{}
	seen := map[kt]bool{}
	for i := range gs {
		g := &gs[i]
		k := kt{g.Key, g.Granted}
		if seen[k] {
			continue // a retried request answered with the same grant
		}
		seen[k] = true
		// A grant that was not released is live until its lease ran out,
		// then keeps its slot for its lock-delay: fenced lets no grant in
		// that a live one would exclude until both are over.
		end := lastAsked[k] + int64(ttl) + int64(delay[k])
		if t, ok := released[k]; ok {
			end = min(end, t)
		}
		if end <= g.Complete {
			continue
		}
		out[g.Key] = append(out[g.Key], &liveWindow{key: g.Key, tok: g.Granted, holder: g.Holder, mode: g.Mode, op: g, start: g.Complete, end: end})
	}
	return out
}

// sweep calls at with each window as it starts and the windows live then
// (itself included), in time order; a window ending when another starts
// is not live then.
func sweep(ws []*liveWindow, at func(w *liveWindow, live []*liveWindow)) {
	type event struct {
		t     int64
		start bool
		w     *liveWindow
	}
	evs := make([]event, 0, 2*len(ws))
	for _, w := range ws {
		evs = append(evs, event{w.start, true, w}, event{w.end, false, w})
	}
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].t != evs[j].t {
			return evs[i].t < evs[j].t
		}
		return !evs[i].start && evs[j].start
	})
	var live []*liveWindow
	for _, e := range evs {
		if !e.start {
			live = slices.DeleteFunc(live, func(w *liveWindow) bool { return w == e.w })
			continue
		}
		live = append(live, e.w)
		at(e.w, live)
	}
}

func describeLive(live []*liveWindow) string {
	parts := make([]string, len(live))
	for i, w := range live {
		parts[i] = "  " + w.String()
	}
	return strings.Join(parts, "\n")
}

// staleAllows reports verifies that allowed a token whose release had been
// acknowledged before the verify began.
func staleAllows(r *Result, ops []history.Op) {
	type kt struct {
		key string
		tok fence.Token
	}
	releasedAt := map[kt]*history.Op{}
	for i := range ops {
		if o := &ops[i]; o.Kind == history.Release && o.Outcome == history.OK {
			k := kt{o.Key, o.Token}
			if p := releasedAt[k]; p == nil || o.Complete < p.Complete {
				releasedAt[k] = o
			}
		}
	}
	for i := range ops {
		o := &ops[i]
		if o.Kind != history.Verify || o.Outcome != history.OK || !o.Allow {
			continue
		}
		if rel := releasedAt[kt{o.Key, o.Token}]; rel != nil && rel.Complete < o.Invoke {
			r.violate("a verify allowed %s after its release was acknowledged:\n  %s\n  %s", history.Tok(o.Token), rel.Describe(), o.Describe())
		}
	}
}

// ShapeTokens is token-order over a shape workload's grants, a multi-key
// acquire counting as one grant per key: tokens are unique per key and
// strictly increase in grant order across every permit, shared grant and
// exclusive grant of the key.
func ShapeTokens(ops []history.Op, name string) Result {
	r := TokenOrder(grantOps(ops))
	r.Name = name
	return r
}

// PermitCount checks the semaphore workload: at no moment are more grants
// of a key proven live than the limit its acquires name, and no verify
// allows a released permit. The summary gives the most permits proven live
// at once and the most holders the shared resource counted inside at once
// (which a paused holder can raise without any fault of fenced's: it is
// reported, not judged).
func PermitCount(ops []history.Op, ttl time.Duration) Result {
	r := Result{Name: PermitCountName}
	limits := map[string]int{}
	inside := 0
	for _, o := range ops {
		if o.Kind == history.Acquire && o.Limit > 0 {
			limits[o.Key] = o.Limit
		}
		if o.Kind == history.Write {
			inside = max(inside, o.Count)
		}
	}
	most := 0
	for key, ws := range liveWindows(ops, ttl) {
		limit := limits[key]
		if limit == 0 {
			continue
		}
		sweep(ws, func(w *liveWindow, live []*liveWindow) {
			r.Checked++
			most = max(most, len(live))
			if len(live) > limit {
				r.violate("%d permits of %s live at once, limit %d:\n%s", len(live), key, limit, describeLive(live))
			}
		})
	}
	staleAllows(&r, ops)
	res := r.finish("acknowledged permits")
	res.Summary += fmt.Sprintf("; at most %d proven live at once, at most %d holders inside the resource at once", most, inside)
	return res
}

// article puts "a" or "an" before a mode.
func article(mode string) string {
	if strings.HasPrefix(mode, "e") {
		return "an " + mode
	}
	return "a " + mode
}

// RWExclusion checks the readers-writer workload: no grant is proven live
// beside an exclusive one; a verify never allows a token once a later
// exclusive grant was acknowledged (a reader's token is refused once a
// writer came), nor an exclusive grant's token once any later grant was;
// and the resource admitted by the readers-writer rule (a read not below
// the highest write token, a write not below the highest token of any
// access), refusing nothing else.
func RWExclusion(ops []history.Op, ttl time.Duration) Result {
	r := Result{Name: RWExclusionName}
	for key, ws := range liveWindows(ops, ttl) {
		sweep(ws, func(w *liveWindow, live []*liveWindow) {
			r.Checked++
			for _, o := range live {
				if o != w && (o.mode == modeExclusive || w.mode == modeExclusive) {
					r.violate("%s grant of %s live beside %s one:\n%s", article(w.mode), key, article(o.mode), describeLive([]*liveWindow{o, w}))
					return
				}
			}
		})
	}
	// Verifies against later grants.
	mode := map[string]map[fence.Token]string{}
	gs := grants(ops)
	for key, g := range gs {
		mode[key] = map[fence.Token]string{}
		for _, o := range g {
			mode[key][o.Granted] = o.Mode
		}
	}
	for i := range ops {
		v := &ops[i]
		if v.Kind != history.Verify || v.Outcome != history.OK || !v.Allow {
			continue
		}
		for _, g := range gs[v.Key] {
			if g.Granted > v.Token && g.Complete < v.Invoke && (g.Mode == modeExclusive || mode[v.Key][v.Token] == modeExclusive) {
				r.violate("a verify allowed %s (%s) after a later %s grant %s was acknowledged:\n  %s\n  %s",
					history.Tok(v.Token), mode[v.Key][v.Token], g.Mode, history.Tok(g.Granted), g.Describe(), v.Describe())
				break
			}
		}
	}
	staleAllows(&r, ops)
	// The resource, in its own order.
	var acc []*history.Op
	for i := range ops {
		if o := &ops[i]; (o.Kind == history.Read || o.Kind == history.Write) && o.Seq > 0 {
			acc = append(acc, o)
		}
	}
	sort.Slice(acc, func(i, j int) bool { return acc[i].Seq < acc[j].Seq })
	type marks struct{ write, any fence.Token }
	m := map[string]*marks{}
	staleReads := 0
	for _, o := range acc {
		k := m[o.Key]
		if k == nil {
			k = &marks{}
			m[o.Key] = k
		}
		r.Checked++
		admitted := o.Outcome == history.OK
		switch {
		case o.Kind == history.Read && admitted && o.Token < k.write:
			r.violate("the resource admitted a read with %s after a write with %s:\n  %s", history.Tok(o.Token), history.Tok(k.write), o.Describe())
		case o.Kind == history.Write && admitted && o.Token < k.any:
			r.violate("the resource admitted a write with %s after an access with %s:\n  %s", history.Tok(o.Token), history.Tok(k.any), o.Describe())
		case o.Kind == history.Read && !admitted && o.Token >= k.write, o.Kind == history.Write && !admitted && o.Token >= k.any:
			r.violate("the resource refused %s, not below its mark:\n  %s", history.Tok(o.Token), o.Describe())
		case o.Kind == history.Read && !admitted:
			staleReads++
		}
		if admitted {
			k.any = max(k.any, o.Token)
			if o.Kind == history.Write {
				k.write = max(k.write, o.Token)
			}
		}
	}
	res := r.finish("grants, verifies and resource accesses")
	modes := map[string]int{}
	for _, g := range grantOps(ops) {
		modes[g.Mode]++
	}
	res.Summary += fmt.Sprintf("; %d shared and %d exclusive grants, %d stale reads refused by the resource", modes[modeShared], modes[modeExclusive], staleReads)
	return res
}

// MultiAtomicity checks the multi-key workload: each acknowledged set has a
// token for every key, all of one epoch; every key read that shows a
// set's holder (unique per request) shows that set's token of the key, and
// every such read of one set shows the same log index (one log entry made
// the whole set); no read shows the holder of a refused set (no partial
// grant); and no two grants of a key are proven live at once.
func MultiAtomicity(ops []history.Op, ttl time.Duration) Result {
	r := Result{Name: MultiAtomicityName}
	byHolder := map[string]*history.Op{}
	outcomes := map[history.Outcome]int{}
	for i := range ops {
		o := &ops[i]
		if o.Kind != history.AcquireMulti {
			continue
		}
		byHolder[o.Holder] = o
		outcomes[o.Outcome]++
		if o.Outcome != history.OK {
			continue
		}
		r.Checked++
		if len(o.Grants) != len(o.Keys) {
			r.violate("a set of %d keys was answered with %d grants:\n  %s", len(o.Keys), len(o.Grants), o.Describe())
			continue
		}
		for _, t := range o.Grants[1:] {
			if t.Epoch() != o.Grants[0].Epoch() {
				r.violate("a set's grants are of different epochs:\n  %s", o.Describe())
				break
			}
		}
	}
	type seen struct {
		index uint64
		read  *history.Op
	}
	indexOf := map[string]seen{}
	for i := range ops {
		rd := &ops[i]
		if rd.Kind != history.ReadKey || rd.Outcome != history.OK || rd.CurrentHolder == "" {
			continue
		}
		set := byHolder[rd.CurrentHolder]
		if set == nil {
			continue
		}
		r.Checked++
		switch set.Outcome {
		case history.Fail:
			r.violate("a refused set holds a key (a partial grant):\n  %s\n  %s", set.Describe(), rd.Describe())
			continue
		case history.Info:
			continue // it may have been granted, all of it; its tokens are unknown
		}
		i := slices.Index(set.Keys, rd.Key)
		if i < 0 || i >= len(set.Grants) || set.Grants[i] != rd.Current {
			r.violate("a read shows a grant of %s to the set's holder that is not the set's:\n  %s\n  %s", rd.Key, set.Describe(), rd.Describe())
			continue
		}
		if s, ok := indexOf[rd.CurrentHolder]; !ok {
			indexOf[rd.CurrentHolder] = seen{rd.KeyIndex, rd}
		} else if s.index != rd.KeyIndex {
			r.violate("a set's grants were made by different log entries (%d and %d):\n  %s\n  %s\n  %s", s.index, rd.KeyIndex, set.Describe(), s.read.Describe(), rd.Describe())
		}
	}
	for key, ws := range liveWindows(ops, ttl) {
		sweep(ws, func(w *liveWindow, live []*liveWindow) {
			r.Checked++
			if len(live) > 1 {
				r.violate("%d grants of %s live at once:\n%s", len(live), key, describeLive(live))
			}
		})
	}
	staleAllows(&r, ops)
	res := r.finish("sets, key reads and grants")
	res.Summary += fmt.Sprintf("; %d sets granted, %d refused, %d unknown", outcomes[history.OK], outcomes[history.Fail], outcomes[history.Info])
	return res
}

// Shapes returns the checkers of one shape workload's operations.
func Shapes(shape string, ops []history.Op, ttl time.Duration) []Result {
	switch shape {
	case "semaphore":
		return []Result{PermitCount(ops, ttl), ShapeTokens(ops, "permit-tokens")}
	case "rw":
		return []Result{RWExclusion(ops, ttl), ShapeTokens(ops, "rw-tokens")}
	case "multi":
		return []Result{MultiAtomicity(ops, ttl), ShapeTokens(ops, "multi-tokens")}
	}
	return nil
}
