package checker

import (
	"time"

	"github.com/fenced/fenced/jepsen-like/history"
)

// LeaseBoundName names the LeaseBound checker.
const LeaseBoundName = "lease-bound"

// LeaseBound checks that a holder that stopped renewing loses its key
// within bound of its last acknowledged grant or renewal, however often
// the leader changes meanwhile (the flap-leaders nemesis: dead holders'
// acquires, kind "acquire", and the first reads that saw each grant ended,
// kind end). A grant never seen ended was kept for the whole flapping. The
// time is counted from the acquire's invocation: the grant was made after
// it, so what is measured is never shorter than the truth.
func LeaseBound(ops []history.Op, end string, bound time.Duration) Result {
	r := Result{Name: LeaseBoundName}
	ended := map[string]history.Op{}
	for _, o := range ops {
		if o.Kind == end {
			ended[o.Key] = o
		}
	}
	for _, o := range ops {
		if o.Kind != history.Acquire || o.Outcome != history.OK {
			continue
		}
		r.Checked++
		e, ok := ended[o.Key]
		switch {
		case !ok:
			r.violate("the grant %s of %s, whose holder stopped renewing at once, was never seen to end while leaders changed (bound %v):\n  %s",
				history.Tok(o.Granted), o.Key, bound, o.Describe())
		case time.Duration(e.Invoke-o.Invoke) > bound:
			r.violate("the grant %s of %s, whose holder stopped renewing at once, ended %v after it was asked for, past the bound %v",
				history.Tok(o.Granted), o.Key, time.Duration(e.Invoke-o.Invoke).Round(time.Millisecond), bound)
		}
	}
	return r.finish("grants of holders that stopped renewing")
}
