package checker

import "github.com/fenced/fenced/jepsen-like/history"

// ReleaseIntent checks that no release ended a grant its caller did not mean:
// an acknowledged release, forced or not, answers with the token of the grant
// it ended, and that must be the token the release named when it was first
// sent. A retry of a release whose answer was lost must name the same grant
// as its first attempt; one that looks the key's current token up again can
// end the next holder's grant (handed to a waiter in the first attempt's own
// commit), and that holder is never told.
func ReleaseIntent(ops []history.Op) Result {
	r := Result{Name: "release-intent"}
	for i := range ops {
		o := &ops[i]
		if o.Kind != history.Release || o.Outcome != history.OK || o.Ended == 0 {
			continue
		}
		r.Checked++
		if o.Ended != o.Token {
			r.violate("a release meant for grant %s ended grant %s:\n  %s", history.Tok(o.Token), history.Tok(o.Ended), o.Describe())
		}
	}
	return r.finish("acknowledged releases")
}
