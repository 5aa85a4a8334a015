package checker

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/anishathalye/porcupine"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// The linearizability model of one key of fenced, as a nondeterministic state
// machine for porcupine.
//
// The state is the key's last grant: its holder, token and status. Two things
// are not visible in the history and are modelled as nondeterminism:
//
//   - Lease expiry happens on the leader's clock. Before any operation, a held
//     grant may have expired. While a grant is held, its lease may be live or
//     dead (a new leader re-arms dead-but-unexpired leases), so a renewal or
//     verify of the current grant may be refused as expired at any time.
//     What is never legal: allowing or renewing a token that is not the
//     current grant, or one whose grant was released.
//   - An acquire with an unknown outcome may have made a grant whose token
//     nobody saw. The state then knows only a strict lower bound of the
//     current token, until an operation reveals it (a verify's current token,
//     or the same holder's next acquire).
//
// Every acquire's token must exceed the key's high-water mark, which is the
// current grant's token (fenced never forgets it, even after a release).

type status uint8

const (
	stNone status = iota
	stHeld
	stReleased
	stExpired
)

func (s status) String() string {
	return [...]string{"none", "held", "released", "expired"}[s]
}

// lockState is the model state of one key.
type lockState struct {
	St     status
	Holder string
	// Tok is the current grant's token; when Unknown, a strict lower bound
	// of it.
	Tok     fence.Token
	Unknown bool
}

func (s lockState) String() string {
	if s.St == stNone {
		return "none"
	}
	tok := history.Tok(s.Tok)
	if s.Unknown {
		tok = ">" + tok
	}
	return fmt.Sprintf("%s %s %s", s.St, s.Holder, tok)
}

// view is the state seen against a concrete token t: rel is the sign of
// t - current token, and st the state refined by that assumption.
type view struct {
	rel int
	st  lockState
}

// views compares t with the current token. A known token gives one view; an
// unknown one above its lower bound can be equal to, below or above t.
func views(s lockState, t fence.Token) []view {
	if !s.Unknown {
		switch {
		case t < s.Tok:
			return []view{{-1, s}}
		case t > s.Tok:
			return []view{{1, s}}
		}
		return []view{{0, s}}
	}
	if t <= s.Tok {
		return []view{{-1, s}}
	}
	eq, above := s, s
	eq.Tok, eq.Unknown = t, false
	above.Tok = t // the real token is above t: t is the new lower bound
	return []view{{0, eq}, {-1, above}, {1, s}}
}

// step returns every state the key can be in after op, from s.
func step(s lockState, op *history.Op) []lockState {
	var out []lockState
	out = append(out, stepOne(s, op)...)
	if s.St == stHeld {
		e := s
		e.St = stExpired
		out = append(out, stepOne(e, op)...)
	}
	return out
}

func stepOne(s lockState, op *history.Op) []lockState {
	switch op.Kind {
	case history.Acquire:
		return stepAcquire(s, op)
	case history.Release:
		return stepRelease(s, op)
	case history.Renew:
		return stepRenew(s, op)
	case history.Keepalive:
		if op.Outcome != history.OK || op.Granted == 0 {
			return []lockState{s} // no lease renewed: it may have been dead
		}
		renewal := *op
		renewal.Token = op.Granted
		return stepRenew(s, &renewal)
	case history.Verify:
		return stepVerify(s, op)
	}
	return []lockState{s}
}

// grantTo is the state after a new grant with token t (0: unknown token).
func grantTo(s lockState, holder string, t fence.Token) []lockState {
	if s.St == stHeld {
		return nil
	}
	if t == 0 {
		return []lockState{{St: stHeld, Holder: holder, Tok: s.Tok, Unknown: true}}
	}
	if s.St != stNone && t <= s.Tok {
		return nil // a token must exceed the high-water mark
	}
	return []lockState{{St: stHeld, Holder: holder, Tok: t}}
}

func stepAcquire(s lockState, op *history.Op) []lockState {
	var out []lockState
	switch op.Outcome {
	case history.OK:
		// The holder's existing grant comes back (renewed), or a new one.
		// The renewed flag is not trusted: a retried attempt of a grant that
		// committed is answered "renewed" although it is this call's grant.
		if s.St == stHeld && s.Holder == op.Holder {
			for _, v := range views(s, op.Granted) {
				if v.rel == 0 {
					out = append(out, v.st)
				}
			}
		}
		out = append(out, grantTo(s, op.Holder, op.Granted)...)
	case history.Fail:
		if op.Code == "held" {
			if s.St == stHeld && (op.HeldBy == "" || op.HeldBy == s.Holder) {
				out = append(out, s)
			}
			return out
		}
		out = append(out, s) // refused without effect (unavailable, ...)
	default: // unknown: no effect, the holder's grant again, or a new grant
		out = append(out, s)
		out = append(out, grantTo(s, op.Holder, 0)...)
	}
	return out
}

// stepRelease: a release ends the grant of its token, if that is the
// current grant and (unless forced) the op's holder's; releasing a released
// grant again succeeds, as a retry must.
func stepRelease(s lockState, op *history.Op) []lockState {
	released := func() []lockState {
		var out []lockState
		if s.St == stNone {
			return nil
		}
		for _, v := range views(s, op.Token) {
			if v.rel == 0 && (op.Force || v.st.Holder == op.Holder) && (v.st.St == stHeld || v.st.St == stReleased) {
				r := v.st
				r.St = stReleased
				out = append(out, r)
			}
		}
		return out
	}
	switch op.Outcome {
	case history.OK:
		return released()
	case history.Fail:
		return refusal(s, op, false)
	}
	return append([]lockState{s}, released()...)
}

// refusal checks a definite refusal of a release or renewal against s: the
// FSM checks the token, then the holder, then the grant's state.
func refusal(s lockState, op *history.Op, renew bool) []lockState {
	if op.Code == "unknown_key" {
		if s.St == stNone {
			return []lockState{s}
		}
		return nil
	}
	var out []lockState
	switch op.Code {
	case "stale_token", "not_holder", "expired", "no_lease":
		if s.St == stNone {
			return nil
		}
		for _, v := range views(s, op.Token) {
			ok := false
			switch op.Code {
			case "stale_token":
				ok = v.rel != 0
			case "not_holder":
				ok = !op.Force && v.rel == 0 && v.st.Holder != op.Holder
			case "no_lease":
				ok = renew && v.rel == 0 && v.st.Holder == op.Holder && v.st.St == stReleased
			case "expired":
				// A renewal is refused as expired when the lease is dead
				// though the grant is still held; a release only once the
				// expiry is applied.
				ok = v.rel == 0 && (op.Force || v.st.Holder == op.Holder) &&
					(v.st.St == stExpired || (renew && v.st.St == stHeld))
			}
			if ok {
				out = append(out, v.st)
			}
		}
		return out
	}
	return []lockState{s} // refused without effect (unavailable, ...)
}

func stepRenew(s lockState, op *history.Op) []lockState {
	switch op.Outcome {
	case history.OK:
		var out []lockState
		if s.St == stNone {
			return nil
		}
		for _, v := range views(s, op.Token) {
			if v.rel == 0 && v.st.Holder == op.Holder && v.st.St == stHeld {
				out = append(out, v.st)
			}
		}
		return out
	case history.Fail:
		return refusal(s, op, true)
	}
	return []lockState{s}
}

func stepVerify(s lockState, op *history.Op) []lockState {
	if op.Outcome != history.OK {
		return []lockState{s}
	}
	switch op.Code {
	case "unknown_key":
		if s.St == stNone && !op.Allow {
			return []lockState{s}
		}
		return nil
	case "malformed", "unavailable":
		if op.Allow {
			return nil
		}
		return []lockState{s}
	}
	if s.St == stNone {
		return nil
	}
	// The verdict names the key's current grant: pin the state to it.
	bases := []lockState{s}
	if op.Current != 0 {
		bases = nil
		for _, v := range views(s, op.Current) {
			if v.rel == 0 && (op.CurrentHolder == "" || op.CurrentHolder == v.st.Holder) {
				bases = append(bases, v.st)
			}
		}
	}
	var out []lockState
	for _, b := range bases {
		for _, v := range views(b, op.Token) {
			st, ok := v.st, false
			if op.Allow {
				ok = op.Code == "ok" && v.rel == 0 && st.St == stHeld && (op.Holder == "" || op.Holder == st.Holder)
			} else {
				switch op.Code {
				case "superseded":
					ok = v.rel < 0
				case "not_granted_yet":
					ok = v.rel > 0
				case "released":
					ok = v.rel == 0 && st.St == stReleased
				case "expired":
					ok = v.rel == 0 && (st.St == stExpired || st.St == stHeld)
				case "holder_mismatch":
					ok = v.rel == 0 && st.St == stHeld && op.Holder != "" && op.Holder != st.Holder
				case "ok":
					ok = false // "ok" always allows
				default:
					ok = true // a refusal for a reason the model does not know constrains nothing
				}
			}
			if ok {
				out = append(out, st)
			}
		}
	}
	return out
}

// Model is the porcupine model of fenced's keys, partitioned by key.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, o := range h {
				k := o.Input.(*history.Op).Key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], o)
			}
			sort.Strings(keys)
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{lockState{}} },
		Step: func(state, input, _ interface{}) []interface{} {
			next := step(state.(lockState), input.(*history.Op))
			out := make([]interface{}, len(next))
			for i, n := range next {
				out[i] = n
			}
			return out
		},
		Equal: func(a, b interface{}) bool { return a.(lockState) == b.(lockState) },
		Hash: func(s interface{}) uint64 {
			st := s.(lockState)
			h := fnv.New64a()
			fmt.Fprintf(h, "%d|%s|%d|%v", st.St, st.Holder, st.Tok, st.Unknown)
			return h.Sum64()
		},
		DescribeOperation: func(input, _ interface{}) string { return input.(*history.Op).Describe() },
		DescribeState:     func(s interface{}) string { return s.(lockState).String() },
	}
	return nm.ToModel()
}

// LockOps selects the operations the linearizability check sees, as
// porcupine operations. Unknown verifies and renewals are left out: they
// change nothing, so they constrain nothing. Unknown acquires and releases
// stay, open-ended: they may take effect at any time after their invocation.
func LockOps(ops []history.Op) []porcupine.Operation {
	var end int64
	for i := range ops {
		end = max(end, ops[i].Complete)
	}
	var out []porcupine.Operation
	for i := range ops {
		o := &ops[i]
		switch o.Kind {
		case history.Acquire, history.Release:
		case history.Renew, history.Verify, history.Keepalive:
			if o.Outcome == history.Info {
				continue
			}
		default:
			continue
		}
		ret := o.Complete
		if o.Outcome == history.Info {
			ret = end + 1 // after everything: it may linearize anywhere
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: o, Call: o.Invoke, Output: nil, Return: ret})
	}
	return out
}
