// Package checker judges a history of the chaos suite: linearizability of each
// key against a model of fenced (porcupine), the token invariants, verify
// safety, the fenced resource, lease expiry, convergence and recovery after
// the final heal. Unknown outcomes are unknown: they may have happened or not,
// and no checker counts them as failures.
package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// maxReported bounds the violations a result lists; Count has them all.
const maxReported = 20

// Result is one checker's verdict.
type Result struct {
	Name string `json:"name"`
	Pass bool   `json:"pass"`
	// Summary is one line: what was checked and how it went.
	Summary string `json:"summary"`
	// Violations describe the first anomalies, with the operations involved.
	Violations []string `json:"violations,omitempty"`
	Count      int      `json:"count"`
	// Checked is the number of operations or facts the checker looked at.
	Checked int `json:"checked"`
	// Info is porcupine's linearization, for the visualisation.
	Info *porcupine.LinearizationInfo `json:"-"`
	// Unavailability is the availability checker's figures, per nemesis.
	Unavailability []Unavailability `json:"unavailability,omitempty"`
}

func (r *Result) violate(format string, args ...any) {
	r.Count++
	if len(r.Violations) < maxReported {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

func (r *Result) finish(what string) Result {
	r.Pass = r.Count == 0
	if r.Pass {
		r.Summary = fmt.Sprintf("ok: %d %s checked", r.Checked, what)
	} else {
		r.Summary = fmt.Sprintf("FAIL: %d violations in %d %s", r.Count, r.Checked, what)
	}
	return *r
}

// Final is what the runner observed after the final heal.
type Final struct {
	// At is the history time of the final reads.
	At int64 `json:"at"`
	// Keys is the cluster's state of every key, read linearizably through
	// each node (followers forward), by node.
	Keys map[string][]client.KeyInfo `json:"keys"`
	// Statuses is each node's own, local view (GET /v1/cluster) once the
	// convergence wait ended.
	Statuses map[string]*client.Status `json:"statuses"`
	// Converged says every node reported the same applied index, commit
	// index and key count within ConvergeLimit.
	Converged      bool          `json:"converged"`
	ConvergeWait   time.Duration `json:"converge_wait"`
	ConvergeLimit  time.Duration `json:"converge_limit"`
	ConvergeDetail string        `json:"converge_detail,omitempty"`
	// Recovered says a probe acquire, verify and release succeeded within
	// RecoveryLimit of the final heal.
	Recovered      bool          `json:"recovered"`
	RecoveryTime   time.Duration `json:"recovery_time"`
	RecoveryLimit  time.Duration `json:"recovery_limit"`
	RecoveryDetail string        `json:"recovery_detail,omitempty"`
	// Reclaim says the cluster ran with key reclamation: a key absent from
	// the final state was reclaimed after its last grant ended.
	Reclaim bool `json:"reclaim,omitempty"`
	// Churning names the keys the churn workload reclaims and grants again
	// up to the final reads (a prefix; "" for none): the leader may forget
	// one between the reads through two nodes, so convergence leaves them
	// to the churn checkers.
	Churning string `json:"churning,omitempty"`
}

// Options tune the checkers.
type Options struct {
	// TTL is the lease every grant asked for.
	TTL time.Duration
	// LinearizableTimeout bounds porcupine; 0 means no bound.
	LinearizableTimeout time.Duration
	// Faults annotate the visualisation.
	Faults []history.Fault
	// Availability configures the availability checker.
	Availability AvailabilityOptions
}

// All runs every checker. final may be nil when the run could not observe
// the cluster after the heal; the checkers that need it then fail.
func All(ops []history.Op, final *Final, opt Options) []Result {
	return []Result{
		Linearizable(ops, opt),
		TokenOrder(ops),
		NoLostGrant(ops, final),
		StaleVerify(ops),
		Resource(ops),
		LeaseNoEarlyExpiry(ops, opt.TTL),
		ReleaseIntent(ops),
		Convergence(final),
		Recovery(ops, opt.Faults, final),
		Availability(ops, opt.Faults, opt.Availability),
	}
}

// Linearizable checks each key's history against the model with porcupine.
func Linearizable(ops []history.Op, opt Options) Result {
	r := Result{Name: "linearizable"}
	lops := LockOps(ops)
	r.Checked = len(lops)
	model := Model()
	res, info := porcupine.CheckOperationsVerbose(model, lops, opt.LinearizableTimeout)
	info.AddAnnotations(Annotations(opt.Faults))
	r.Info = &info
	switch res {
	case porcupine.Ok:
		return r.finish("lock operations (per key, porcupine)")
	case porcupine.Unknown:
		// A timeout proves nothing either way; it is reported, and passes,
		// as Jepsen's :unknown validity does not fail a test.
		r.Pass = true
		r.Summary = fmt.Sprintf("unknown: porcupine did not finish within %v on %d operations", opt.LinearizableTimeout, len(lops))
		return r
	}
	for _, part := range model.Partition(lops) {
		if porcupine.CheckOperationsTimeout(model, part, opt.LinearizableTimeout) != porcupine.Illegal {
			continue
		}
		r.violate("%s", explain(model, part, opt.LinearizableTimeout))
	}
	if r.Count == 0 {
		r.violate("no linearization exists; see linearizability.html")
	}
	return r.finish("lock operations (per key, porcupine)")
}

// explain describes a key whose history has no linearization: the end of the
// longest partial linearization porcupine found, with the model's state, and
// the operations that could not come next.
func explain(model porcupine.Model, part []porcupine.Operation, timeout time.Duration) string {
	key := part[0].Input.(*history.Op).Key
	_, info := porcupine.CheckOperationsVerbose(model, part, timeout)
	var longest []porcupine.Operation
	for _, p := range info.PartialLinearizationsOperations() {
		for _, l := range p {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "key %s is not linearizable: %d of %d operations linearize, then none of the next can", key, len(longest), len(part))
	state := model.Init()
	done := map[int]bool{}
	for i, o := range longest {
		_, state = model.Step(state, o.Input, o.Output)
		done[o.Input.(*history.Op).Index] = true
		if i >= len(longest)-6 {
			fmt.Fprintf(&b, "\n    %s  => %s", o.Input.(*history.Op).Describe(), model.DescribeState(state))
		}
	}
	var rest []*history.Op
	for _, o := range part {
		if op := o.Input.(*history.Op); !done[op.Index] {
			rest = append(rest, op)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Invoke < rest[j].Invoke })
	fmt.Fprintf(&b, "\n  could not follow (earliest first):")
	for i, op := range rest {
		if i == 6 {
			break
		}
		fmt.Fprintf(&b, "\n    %s", op.Describe())
	}
	return b.String()
}

// Annotations turns the fault timeline into porcupine annotations.
func Annotations(faults []history.Fault) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, f := range faults {
		out = append(out, porcupine.Annotation{
			Tag: "nemesis", Start: f.Start, End: f.End,
			Description: f.Nemesis, Details: fmt.Sprintf("%s %v %s", f.Nemesis, f.Nodes, f.Detail),
			BackgroundColor: "#f8d7da",
		})
	}
	return out
}

// grants returns the acknowledged grants (ok acquires) by key.
func grants(ops []history.Op) map[string][]*history.Op {
	out := map[string][]*history.Op{}
	for i := range ops {
		if o := &ops[i]; o.Kind == history.Acquire && o.Outcome == history.OK {
			out[o.Key] = append(out[o.Key], o)
		}
	}
	return out
}

// ackedBefore answers "the highest token of a grant acknowledged before t".
type ackedBefore struct {
	completes []int64
	maxTok    []fence.Token
	maxOp     []*history.Op
}

func newAckedBefore(gs []*history.Op) *ackedBefore {
	sorted := append([]*history.Op(nil), gs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Complete < sorted[j].Complete })
	a := &ackedBefore{}
	var m fence.Token
	var mo *history.Op
	for _, g := range sorted {
		if g.Granted > m {
			m, mo = g.Granted, g
		}
		a.completes = append(a.completes, g.Complete)
		a.maxTok = append(a.maxTok, m)
		a.maxOp = append(a.maxOp, mo)
	}
	return a
}

// before returns the highest token acknowledged strictly before t, and its op.
func (a *ackedBefore) before(t int64) (fence.Token, *history.Op) {
	i := sort.Search(len(a.completes), func(i int) bool { return a.completes[i] >= t })
	if i == 0 {
		return 0, nil
	}
	return a.maxTok[i-1], a.maxOp[i-1]
}

// TokenOrder checks that tokens are unique (one holder per token) and
// strictly increase in grant order: a grant acknowledged before another was
// asked for has a lower token.
func TokenOrder(ops []history.Op) Result {
	r := Result{Name: "token-order"}
	for _, gs := range grants(ops) {
		owner := map[fence.Token]*history.Op{}
		acked := newAckedBefore(gs)
		for _, g := range gs {
			r.Checked++
			if o, ok := owner[g.Granted]; ok && o.Holder != g.Holder {
				r.violate("token %s granted twice, to %s and %s:\n  %s\n  %s", history.Tok(g.Granted), o.Holder, g.Holder, o.Describe(), g.Describe())
			} else if !ok {
				owner[g.Granted] = g
			}
			if m, mo := acked.before(g.Invoke); m > g.Granted || (m == g.Granted && mo.Holder != g.Holder) {
				r.violate("token went backwards: %s was acknowledged before %s was asked for, which got %s:\n  %s\n  %s",
					history.Tok(m), g.Holder, history.Tok(g.Granted), mo.Describe(), g.Describe())
			}
		}
	}
	return r.finish("acknowledged grants")
}

// NoLostGrant checks that no acknowledged grant is lost, through failovers,
// crashes and restarts: once a grant is acknowledged, the key's current token
// as any later operation observes it is never below it (a verify's current
// token, a renewal or release accepted for an older token, the final state).
func NoLostGrant(ops []history.Op, final *Final) Result {
	r := Result{Name: "no-lost-grant"}
	gs := grants(ops)
	acked := map[string]*ackedBefore{}
	for k, g := range gs {
		acked[k] = newAckedBefore(g)
	}
	for i := range ops {
		o := &ops[i]
		a := acked[o.Key]
		if a == nil || o.Outcome != history.OK {
			continue
		}
		m, mo := a.before(o.Invoke)
		if m == 0 {
			continue
		}
		switch o.Kind {
		case history.Verify:
			if o.Current == 0 {
				continue
			}
			r.Checked++
			if o.Current < m {
				r.violate("verify saw current token %s after grant %s was acknowledged:\n  %s\n  %s", history.Tok(o.Current), history.Tok(m), mo.Describe(), o.Describe())
			}
		case history.Renew, history.Release, history.Keepalive:
			tok := o.Token
			if o.Kind == history.Keepalive {
				if tok = o.Granted; tok == 0 {
					continue
				}
			}
			r.Checked++
			if tok < m {
				r.violate("%s of token %s accepted after grant %s was acknowledged:\n  %s\n  %s", o.Kind, history.Tok(tok), history.Tok(m), mo.Describe(), o.Describe())
			}
		}
	}
	if final == nil || len(final.Keys) == 0 {
		r.violate("no final state of the cluster could be read after the heal")
		return r.finish("observations")
	}
	for node, keys := range final.Keys {
		cur := map[string]fence.Token{}
		for _, k := range keys {
			cur[k.Key] = k.Token
		}
		for key, a := range acked {
			m, mo := a.before(final.At)
			if m == 0 {
				continue
			}
			r.Checked++
			if _, present := cur[key]; !present && final.Reclaim {
				continue // reclaimed after it ended: token-order checks its next grant
			}
			if cur[key] < m {
				r.violate("final state through %s has %s at token %s, below acknowledged grant %s:\n  %s", node, key, history.Tok(cur[key]), history.Tok(m), mo.Describe())
			}
		}
	}
	return r.finish("observations")
}

// StaleVerify checks that no verify allowed a token whose supersession (a
// higher grant) or release was acknowledged before the verify began.
func StaleVerify(ops []history.Op) Result {
	r := Result{Name: "stale-verify"}
	gs := grants(ops)
	acked := map[string]*ackedBefore{}
	for k, g := range gs {
		acked[k] = newAckedBefore(g)
	}
	type kt struct {
		key string
		tok fence.Token
	}
	released := map[kt]*history.Op{}
	for i := range ops {
		o := &ops[i]
		if o.Kind == history.Release && o.Outcome == history.OK {
			if p := released[kt{o.Key, o.Token}]; p == nil || o.Complete < p.Complete {
				released[kt{o.Key, o.Token}] = o
			}
		}
	}
	for i := range ops {
		o := &ops[i]
		if o.Kind != history.Verify || o.Outcome != history.OK {
			continue
		}
		r.Checked++
		if !o.Allow {
			continue
		}
		if a := acked[o.Key]; a != nil {
			if m, mo := a.before(o.Invoke); m > o.Token {
				r.violate("verify allowed %s after grant %s superseded it:\n  %s\n  %s", history.Tok(o.Token), history.Tok(m), mo.Describe(), o.Describe())
				continue
			}
		}
		if rel := released[kt{o.Key, o.Token}]; rel != nil && rel.Complete < o.Invoke {
			r.violate("verify allowed %s after its release was acknowledged:\n  %s\n  %s", history.Tok(o.Token), rel.Describe(), o.Describe())
		}
	}
	return r.finish("verifies")
}

// Resource checks the fenced resource, in its own order of accesses: it never
// admitted a token below one it had admitted, never admitted one token for two
// holders, never refused a token that was not below its mark, and lost no
// acknowledged write (every read returns exactly the writes admitted before).
func Resource(ops []history.Op) Result {
	r := Result{Name: "resource"}
	var acc []*history.Op
	for i := range ops {
		if o := &ops[i]; (o.Kind == history.Write || o.Kind == history.Read) && o.Outcome != history.Info {
			acc = append(acc, o)
		}
	}
	sort.Slice(acc, func(i, j int) bool { return acc[i].Seq < acc[j].Seq })
	type reg struct {
		high   fence.Token
		highOp *history.Op
		values []int
	}
	regs := map[string]*reg{}
	for _, o := range acc {
		r.Checked++
		g := regs[o.Key]
		if g == nil {
			g = &reg{}
			regs[o.Key] = g
		}
		if o.Outcome == history.Fail {
			if strings.HasPrefix(o.Code, "proof_") {
				continue // refused for its proof, before any token was compared
			}
			if o.Token >= g.high {
				r.violate("resource refused token %s, not below its mark %s:\n  %s", history.Tok(o.Token), history.Tok(g.high), o.Describe())
			}
			continue
		}
		switch {
		case o.Token < g.high:
			r.violate("resource admitted token %s after admitting %s (a stale holder wrote):\n  %s\n  %s", history.Tok(o.Token), history.Tok(g.high), g.highOp.Describe(), o.Describe())
		case o.Token == g.high && g.highOp != nil && g.highOp.Holder != o.Holder:
			r.violate("resource admitted token %s from two holders:\n  %s\n  %s", history.Tok(o.Token), g.highOp.Describe(), o.Describe())
		}
		if o.Token >= g.high {
			g.high, g.highOp = o.Token, o
		}
		switch o.Kind {
		case history.Write:
			g.values = append(g.values, o.Value)
		case history.Read:
			if o.Digest == 0 {
				// Recorded before reads kept a digest: all values are there.
				if !slices.Equal(o.Values, g.values) {
					r.violate("read of %s returned %d values, not the %d writes admitted before it (an acknowledged write lost or changed):\n  %s", o.Key, len(o.Values), len(g.values), o.Describe())
				}
			} else if o.Count != len(g.values) || o.Digest != history.Digest(g.values) || !slices.Equal(o.Values, history.Tail(g.values)) {
				r.violate("read of %s returned %d values, not the %d writes admitted before it (an acknowledged write lost or changed):\n  %s", o.Key, o.Count, len(g.values), o.Describe())
			}
		}
	}
	return r.finish("resource accesses")
}

// LeaseNoEarlyExpiry checks invariant 6: a lease never ends before its TTL
// has run from the last acknowledged grant or renewal. The leader arms the
// lease after the request was sent and a new leader re-arms it in full, so a
// grant of a higher token that completed less than TTL after the holder's
// last acknowledged renewal was invoked (and that the holder did not release)
// means the lease ended early.
func LeaseNoEarlyExpiry(ops []history.Op, ttl time.Duration) Result {
	r := Result{Name: "lease-no-early-expiry"}
	if ttl <= 0 {
		r.Summary = "skipped: no TTL given"
		r.Pass = true
		return r
	}
	type kt struct {
		key string
		tok fence.Token
	}
	lastRenew := map[kt]*history.Op{}
	releaseAt := map[kt]int64{}
	for i := range ops {
		o := &ops[i]
		switch {
		case o.Kind == history.Acquire && o.Outcome == history.OK:
			k := kt{o.Key, o.Granted}
			if p := lastRenew[k]; p == nil || o.Invoke > p.Invoke {
				lastRenew[k] = o
			}
		case o.Kind == history.Renew && o.Outcome == history.OK, o.Kind == history.Keepalive && o.Outcome == history.OK && o.Granted != 0:
			k := kt{o.Key, o.Token}
			if o.Kind == history.Keepalive {
				k.tok = o.Granted
			}
			if p := lastRenew[k]; p == nil || o.Invoke > p.Invoke {
				lastRenew[k] = o
			}
		case o.Kind == history.Release && o.Outcome != history.Fail:
			k := kt{o.Key, o.Token}
			if t, ok := releaseAt[k]; !ok || o.Invoke < t {
				releaseAt[k] = o.Invoke
			}
		}
	}
	gs := grants(ops)
	for k, last := range lastRenew {
		for _, g := range gs[k.key] {
			if g.Granted <= k.tok {
				continue
			}
			r.Checked++
			if g.Complete >= last.Invoke+int64(ttl) {
				continue
			}
			if t, ok := releaseAt[k]; ok && t < g.Complete {
				continue
			}
			r.violate("lease of %s ended early: grant %s completed %.3fs after the last renewal was asked for (TTL %v):\n  %s\n  %s",
				history.Tok(k.tok), history.Tok(g.Granted), float64(g.Complete-last.Invoke)/1e9, ttl, last.Describe(), g.Describe())
		}
	}
	return r.finish("later grants against leases")
}

// Convergence checks that every node reached the same state after the heal.
func Convergence(final *Final) Result {
	r := Result{Name: "convergence"}
	if final == nil {
		r.violate("no final observation")
		return r.finish("nodes")
	}
	r.Checked = len(final.Statuses)
	if !final.Converged {
		r.violate("nodes did not converge within %v: %s", final.ConvergeLimit, final.ConvergeDetail)
	}
	// Every node's linearizable view must agree too.
	var ref string
	var refNode string
	for node, keys := range final.Keys {
		s := fmt.Sprint(keyTokens(settled(keys, final.Churning)))
		if ref == "" {
			ref, refNode = s, node
		} else if s != ref {
			r.violate("keys read through %s differ from those read through %s", node, refNode)
		}
	}
	res := r.finish("nodes")
	if res.Pass {
		res.Summary = fmt.Sprintf("ok: %d nodes at the same applied index and key count after %v", r.Checked, final.ConvergeWait.Round(time.Millisecond))
	}
	return res
}

// settled leaves out the keys whose names start with churning (none when it
// is empty).
func settled(keys []client.KeyInfo, churning string) []client.KeyInfo {
	if churning == "" {
		return keys
	}
	var out []client.KeyInfo
	for _, k := range keys {
		if !strings.HasPrefix(k.Key, churning) {
			out = append(out, k)
		}
	}
	return out
}

func keyTokens(keys []client.KeyInfo) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Key+"="+k.Token.String()+"/"+k.State)
	}
	sort.Strings(out)
	return out
}

// Recovery checks that the cluster served again within the limit after the
// final heal (a probe), and after every fault's heal: the clients' first
// successful operation on fenced after each heal came within the limit.
func Recovery(ops []history.Op, faults []history.Fault, final *Final) Result {
	r := Result{Name: "recovery"}
	if final == nil {
		r.violate("no final observation")
		return r.finish("heals")
	}
	r.Checked++
	if !final.Recovered {
		r.violate("cluster did not serve within %v of the final heal: %s", final.RecoveryLimit, final.RecoveryDetail)
	}
	// Completion times of successful operations on fenced, sorted.
	var oks []int64
	for i := range ops {
		switch o := &ops[i]; o.Kind {
		case history.Acquire, history.Verify, history.Renew, history.Release, history.Keepalive:
			if o.Outcome == history.OK {
				oks = append(oks, o.Complete)
			}
		}
	}
	sort.Slice(oks, func(i, j int) bool { return oks[i] < oks[j] })
	var worst time.Duration
	worstFault := ""
	for _, f := range faults {
		if f.Nemesis == "client-pause" {
			continue // a client's fault: the cluster never stopped serving
		}
		i := sort.Search(len(oks), func(i int) bool { return oks[i] >= f.End })
		if i == len(oks) {
			continue // the run ended right after: the final probe covers it
		}
		r.Checked++
		d := time.Duration(oks[i] - f.End)
		if d > worst {
			worst, worstFault = d, fmt.Sprintf("%s #%d", f.Nemesis, f.Index)
		}
		if d > final.RecoveryLimit {
			r.violate("no operation succeeded until %v after the heal of %s #%d (limit %v)", d.Round(time.Millisecond), f.Nemesis, f.Index, final.RecoveryLimit)
		}
	}
	res := r.finish("heals")
	if res.Pass {
		res.Summary = fmt.Sprintf("ok: served again %v after the final heal, at worst %v after a fault's heal (%s); limit %v",
			final.RecoveryTime.Round(time.Millisecond), worst.Round(time.Millisecond), worstFault, final.RecoveryLimit)
	}
	return res
}

// HostileTokensName is the name of the HostileTokens check.
const HostileTokensName = "hostile-tokens"

// HostileTokens checks that no write of the hostile client, which makes
// its tokens up (higher than any grant) and carries no genuine proof of
// them, was admitted by the resource: a guard that requires proofs admits
// only tokens fenced signed. A run without a hostile client passes with
// nothing checked.
func HostileTokens(ops []history.Op, kind string) Result {
	r := Result{Name: HostileTokensName}
	for i := range ops {
		o := &ops[i]
		if o.Kind != kind {
			continue
		}
		r.Checked++
		if o.Outcome == history.OK {
			r.violate("the resource admitted a made-up token %s for %s (%s): a poisoned fence refuses every real holder after it:\n  %s",
				history.Tok(o.Token), o.Key, o.Error, o.Describe())
		}
	}
	return r.finish("writes with made-up tokens, each refused for its proof")
}
