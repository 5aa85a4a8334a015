package checker

import (
	"testing"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

func forced(t fence.Token, ended fence.Token) history.Op {
	return history.Op{Kind: history.Release, Token: t, Force: true, Ended: ended}
}

// A forced release ends whoever's grant its token names; its retry after the
// grant went to a waiter is refused (stale_token, recorded as unknown). Both
// linearize, and no release ended a grant it did not name.
func TestForcedReleaseGood(t *testing.T) {
	t1, t2 := tok(1, 1), tok(1, 2)
	b := (&h{}).
		add(acq("a", t1), 0, 10).
		add(history.Op{Kind: history.Acquire, Holder: "b", Granted: t2, Wait: 500e6}, 20, 60). // handed over by the release
		add(forced(t1, t1), 30, 50).
		add(history.Op{Kind: history.Verify, Token: t1, Holder: "a", Own: true, Code: "superseded", Current: t2, CurrentHolder: "b"}, 70, 80).
		add(history.Op{Kind: history.Renew, Holder: "a", Token: t1, Outcome: history.Fail, Code: "stale_token"}, 90, 100).
		// The retry of a forced release whose first answer was lost: the
		// grant it names is gone, the refusal makes it unknown.
		add(history.Op{Kind: history.Release, Token: t1, Force: true, Outcome: history.Info, Code: "stale_token"}, 110, 130).
		add(ver(t2, "b", true, "ok", t2, "b"), 140, 150).
		add(rel("b", t2), 160, 170)
	b.ops[3].Allow = false
	for _, r := range []Result{lin(t, b.ops), ReleaseIntent(b.ops), LeaseNoEarlyExpiry(b.ops, 0), StaleVerify(b.ops)} {
		if !r.Pass {
			t.Errorf("%s: %s %v", r.Name, r.Summary, r.Violations)
		}
	}
	// A forced release of a grant that is not current is refused.
	bad := (&h{}).
		add(acq("a", t1), 0, 10).
		add(rel("a", t1), 20, 30).
		add(acq("b", t2), 40, 50).
		add(forced(t1, t1), 60, 70)
	if r := lin(t, bad.ops); r.Pass {
		t.Fatalf("a forced release of a superseded grant linearized: %s", r.Summary)
	}
}

// The positive control's history: the operator meant t1, its retry looked the
// key up again and ended the waiter's t2. release-intent sees the answer name
// another grant; the linearizability check sees b's grant end with no
// release of it.
func TestForcedReleaseRetryEndsTheNextGrant(t *testing.T) {
	t1, t2 := tok(1, 1), tok(1, 2)
	b := (&h{}).
		add(acq("a", t1), 0, 10).
		add(history.Op{Kind: history.Acquire, Holder: "b", Granted: t2, Wait: 500e6}, 20, 60).
		add(forced(t1, t2), 30, 90).
		add(history.Op{Kind: history.Verify, Token: t2, Holder: "b", Own: true, Code: "released", Current: t2, CurrentHolder: "b"}, 100, 110)
	if r := ReleaseIntent(b.ops); r.Pass || r.Count != 1 {
		t.Fatalf("release-intent: %s", r.Summary)
	} else {
		t.Log(r.Violations[0])
	}
	if r := lin(t, b.ops); r.Pass {
		t.Fatalf("linearizable passed a grant released by nobody: %s", r.Summary)
	}
}
