package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// tok builds the token of the seq-th grant of an epoch.
func tok(epoch, seq uint64) fence.Token {
	t, err := fence.Compose(epoch, seq)
	if err != nil {
		panic(err)
	}
	return t
}

// h builds hand-written histories; times are in milliseconds.
type h struct{ ops []history.Op }

func (b *h) add(o history.Op, inv, comp int64) *h {
	o.Index = len(b.ops)
	o.Invoke, o.Complete = inv*1e6, comp*1e6
	if o.Key == "" {
		o.Key = "k"
	}
	if o.Outcome == "" {
		o.Outcome = history.OK
	}
	b.ops = append(b.ops, o)
	return b
}

func acq(holder string, t fence.Token) history.Op {
	return history.Op{Kind: history.Acquire, Holder: holder, Granted: t}
}

func acqFail(holder, code, by string) history.Op {
	return history.Op{Kind: history.Acquire, Holder: holder, Outcome: history.Fail, Code: code, HeldBy: by}
}

func acqInfo(holder string) history.Op {
	return history.Op{Kind: history.Acquire, Holder: holder, Outcome: history.Info, Code: "outcome_unknown"}
}

func rel(holder string, t fence.Token) history.Op {
	return history.Op{Kind: history.Release, Holder: holder, Token: t}
}

func renew(holder string, t fence.Token) history.Op {
	return history.Op{Kind: history.Renew, Holder: holder, Token: t}
}

func renewFail(holder string, t fence.Token, code string) history.Op {
	return history.Op{Kind: history.Renew, Holder: holder, Token: t, Outcome: history.Fail, Code: code}
}

func ver(t fence.Token, holder string, allow bool, reason string, cur fence.Token, curHolder string) history.Op {
	return history.Op{Kind: history.Verify, Token: t, Holder: holder, Allow: allow, Code: reason, Current: cur, CurrentHolder: curHolder}
}

func write(holder string, t fence.Token, v, seq int, ok bool) history.Op {
	o := history.Op{Kind: history.Write, Holder: holder, Token: t, Value: v, Seq: seq}
	if !ok {
		o.Outcome, o.Code = history.Fail, "stale_token"
	}
	return o
}

func read(holder string, t fence.Token, seq int, values ...int) history.Op {
	return history.Op{Kind: history.Read, Holder: holder, Token: t, Seq: seq, Count: len(values), Digest: history.Digest(values), Values: history.Tail(values)}
}

func lin(t *testing.T, ops []history.Op) Result {
	t.Helper()
	return Linearizable(ops, Options{LinearizableTimeout: 10 * time.Second})
}

func expect(t *testing.T, r Result, pass bool) {
	t.Helper()
	if r.Pass != pass {
		t.Fatalf("%s: pass=%v, want %v: %s %v", r.Name, r.Pass, pass, r.Summary, r.Violations)
	}
}

func TestLinearizableGood(t *testing.T) {
	a1, b1, a2 := tok(2, 1), tok(2, 2), tok(3, 1)
	cases := map[string]*h{
		"grant, verify, renew, release, regrant": new(h).
			add(acq("a", a1), 0, 10).
			add(ver(a1, "a", true, "ok", a1, "a"), 20, 30).
			add(renew("a", a1), 40, 50).
			add(acqFail("b", "held", "a"), 45, 55).
			add(rel("a", a1), 60, 70).
			add(ver(a1, "", false, "released", a1, "a"), 80, 90).
			add(acq("b", b1), 100, 110).
			add(ver(a1, "", false, "superseded", b1, "b"), 120, 130).
			add(ver(b1+1, "", false, "not_granted_yet", b1, "b"), 120, 130),
		"expiry is nondeterministic: a later grant after a walk-away": new(h).
			add(acq("a", a1), 0, 10).
			add(acq("b", b1), 20, 30).
			add(renewFail("a", a1, "stale_token"), 40, 50).
			add(ver(a1, "a", false, "superseded", b1, "b"), 40, 50),
		"a held grant whose lease died refuses, then a new leader re-arms it": new(h).
			add(acq("a", a1), 0, 10).
			add(ver(a1, "a", false, "expired", a1, "a"), 20, 30).
			add(renew("a", a1), 40, 50).
			add(ver(a1, "a", true, "ok", a1, "a"), 60, 70),
		"concurrent acquires: either order": new(h).
			add(acq("a", a1), 0, 50).
			add(acq("b", b1), 10, 40),
		"unknown acquire took effect, revealed by a verify": new(h).
			add(acq("a", a1), 0, 10).
			add(rel("a", a1), 20, 30).
			add(acqInfo("b"), 40, 50).
			add(ver(a1, "", false, "superseded", b1, "b"), 60, 70).
			add(acq("a", a2), 80, 90),
		"unknown acquire took effect, found again by its holder": new(h).
			add(acqInfo("a"), 0, 10).
			add(acq("a", a1), 20, 30).
			add(ver(a1, "a", true, "ok", a1, "a"), 40, 50),
		"unknown acquire never took effect": new(h).
			add(acqInfo("a"), 0, 10).
			add(acq("b", b1), 20, 30),
		"retried release of a released grant succeeds": new(h).
			add(acq("a", a1), 0, 10).
			add(rel("a", a1), 20, 30).
			add(rel("a", a1), 40, 50),
		"refusals without effect": new(h).
			add(history.Op{Kind: history.Acquire, Holder: "a", Outcome: history.Fail, Code: "unavailable"}, 0, 10).
			add(ver(a1, "", false, "unknown_key", 0, ""), 20, 30).
			add(acq("a", a1), 40, 50).
			add(history.Op{Kind: history.Release, Holder: "a", Token: a1, Outcome: history.Fail, Code: "unavailable"}, 60, 70).
			add(ver(a1, "", true, "ok", a1, "a"), 80, 90),
		"the epoch rises, seq restarts": new(h).
			add(acq("a", a1), 0, 10).
			add(rel("a", a1), 20, 30).
			add(acq("b", a2), 40, 50),
		"keepalive renews the current grant, or nothing": new(h).
			add(acq("a", a1), 0, 10).
			add(history.Op{Kind: history.Keepalive, Holder: "a", Granted: a1}, 20, 30).
			add(history.Op{Kind: history.Keepalive, Holder: "a"}, 40, 50).
			add(ver(a1, "b", false, "holder_mismatch", a1, "a"), 60, 70),
		"expired release refusal after expiry": new(h).
			add(acq("a", a1), 0, 10).
			add(history.Op{Kind: history.Release, Holder: "a", Token: a1, Outcome: history.Fail, Code: "expired"}, 20, 30).
			add(ver(a1, "", false, "expired", a1, "a"), 40, 50),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) { expect(t, lin(t, b.ops), true) })
	}
}

func TestLinearizableBad(t *testing.T) {
	a1, b1 := tok(2, 1), tok(2, 2)
	cases := map[string]*h{
		"token reused by a later grant": new(h).
			add(acq("a", b1), 0, 10).
			add(rel("a", b1), 20, 30).
			add(acq("b", b1), 40, 50),
		"token went backwards": new(h).
			add(acq("a", b1), 0, 10).
			add(rel("a", b1), 20, 30).
			add(acq("b", a1), 40, 50),
		"verify allowed a superseded token": new(h).
			add(acq("a", a1), 0, 10).
			add(acq("b", b1), 20, 30).
			add(ver(a1, "", true, "ok", a1, "a"), 40, 50),
		"verify allowed a released token": new(h).
			add(acq("a", a1), 0, 10).
			add(rel("a", a1), 20, 30).
			add(ver(a1, "a", true, "ok", a1, "a"), 40, 50),
		"renewal of a superseded token accepted": new(h).
			add(acq("a", a1), 0, 10).
			add(acq("b", b1), 20, 30).
			add(renew("a", a1), 40, 50),
		"acquire granted while held, no expiry possible (release refused later)": new(h).
			add(acq("a", a1), 0, 10).
			add(acq("b", b1), 20, 30).
			add(rel("a", a1), 40, 50),
		"keepalive renewed a superseded grant": new(h).
			add(acq("a", a1), 0, 10).
			add(acq("b", b1), 20, 30).
			add(history.Op{Kind: history.Keepalive, Holder: "a", Granted: a1}, 40, 50),
		"held refusal names a holder that does not hold": new(h).
			add(acq("a", a1), 0, 10).
			add(rel("a", a1), 20, 30).
			add(acqFail("b", "held", "a"), 40, 50),
		"verify names a current token that regressed": new(h).
			add(acq("a", a1), 0, 10).
			add(rel("a", a1), 20, 30).
			add(acq("b", b1), 40, 50).
			add(ver(a1, "", false, "released", a1, "a"), 60, 70),
		"a failed acquire took effect": new(h).
			add(acq("a", a1), 0, 10).
			add(rel("a", a1), 20, 30).
			add(acqFail("b", "unavailable", ""), 40, 50).
			add(ver(a1, "", false, "superseded", b1, "b"), 60, 70),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			r := lin(t, b.ops)
			expect(t, r, false)
			if !strings.Contains(r.Violations[0], "not linearizable") {
				t.Fatalf("violation does not explain: %v", r.Violations)
			}
		})
	}
}

func TestTokenOrder(t *testing.T) {
	a1, b1 := tok(2, 1), tok(2, 2)
	good := new(h).add(acq("a", a1), 0, 10).add(acq("b", b1), 20, 30).
		add(acq("a", tok(3, 1)), 25, 60). // concurrent with b's: any order
		add(acq("c", tok(3, 2)), 70, 80). //
		add(acq("c", tok(3, 2)), 90, 100) // the same grant again, renewed
	expect(t, TokenOrder(good.ops), true)

	backwards := new(h).add(acq("a", b1), 0, 10).add(acq("b", a1), 20, 30)
	expect(t, TokenOrder(backwards.ops), false)
	dup := new(h).add(acq("a", a1), 0, 10).add(acq("b", a1), 20, 30)
	r := TokenOrder(dup.ops)
	expect(t, r, false)
	if !strings.Contains(r.Violations[0], "granted twice") {
		t.Fatalf("want a duplicate-token violation first: %v", r.Violations)
	}
}

func TestNoLostGrant(t *testing.T) {
	a1, b1 := tok(2, 1), tok(3, 1)
	final := func(k fence.Token) *Final {
		return &Final{At: 1e12, Keys: map[string][]client.KeyInfo{"n1": {{Key: "k", Token: k}}, "n2": {{Key: "k", Token: k}}}}
	}
	good := new(h).add(acq("a", a1), 0, 10).add(ver(a1, "", true, "ok", a1, "a"), 20, 30).
		add(acq("b", b1), 40, 50).add(ver(a1, "", false, "superseded", b1, "b"), 60, 70)
	expect(t, NoLostGrant(good.ops, final(b1)), true)

	lostInVerify := new(h).add(acq("a", a1), 0, 10).add(acq("b", b1), 20, 30).
		add(ver(a1, "", false, "released", a1, "a"), 40, 50)
	expect(t, NoLostGrant(lostInVerify.ops, final(b1)), false)
	lostAtEnd := new(h).add(acq("a", a1), 0, 10).add(acq("b", b1), 20, 30)
	expect(t, NoLostGrant(lostAtEnd.ops, final(a1)), false)
	renewOld := new(h).add(acq("a", a1), 0, 10).add(acq("b", b1), 20, 30).add(renew("a", a1), 40, 50)
	expect(t, NoLostGrant(renewOld.ops, final(b1)), false)
	expect(t, NoLostGrant(good.ops, nil), false)
}

func TestStaleVerify(t *testing.T) {
	a1, b1 := tok(2, 1), tok(2, 2)
	good := new(h).add(acq("a", a1), 0, 10).
		add(ver(a1, "", true, "ok", a1, "a"), 20, 30).
		add(rel("a", a1), 25, 40). // concurrent with the verify: either order
		add(ver(a1, "", true, "ok", a1, "a"), 35, 45).
		add(acq("b", b1), 50, 60).
		add(ver(a1, "", false, "superseded", b1, "b"), 70, 80)
	expect(t, StaleVerify(good.ops), true)

	superseded := new(h).add(acq("a", a1), 0, 10).add(acq("b", b1), 20, 30).add(ver(a1, "", true, "ok", a1, "a"), 40, 50)
	expect(t, StaleVerify(superseded.ops), false)
	released := new(h).add(acq("a", a1), 0, 10).add(rel("a", a1), 20, 30).add(ver(a1, "a", true, "ok", a1, "a"), 40, 50)
	expect(t, StaleVerify(released.ops), false)
}

func TestResource(t *testing.T) {
	a1, b1 := tok(2, 1), tok(2, 2)
	good := new(h).
		add(write("a", a1, 1, 1, true), 0, 1).
		add(write("a", a1, 2, 2, true), 2, 3).
		add(write("b", b1, 3, 3, true), 4, 5).
		add(write("a", a1, 4, 4, false), 6, 7).
		add(read("a", a1, 5), 6, 7).
		add(history.Op{Kind: history.Read, Holder: "a", Token: a1, Seq: 5, Outcome: history.Fail, Code: "stale_token"}, 8, 9).
		add(read("b", b1, 6, 1, 2, 3), 10, 11)
	good.ops[4].Outcome, good.ops[4].Values, good.ops[4].Seq = history.Fail, nil, 5
	good.ops[5].Seq = 6
	good.ops[6].Seq = 7
	expect(t, Resource(good.ops), true)

	stale := new(h).add(write("b", b1, 1, 1, true), 0, 1).add(write("a", a1, 2, 2, true), 2, 3)
	expect(t, Resource(stale.ops), false)
	shared := new(h).add(write("a", a1, 1, 1, true), 0, 1).add(write("b", a1, 2, 2, true), 2, 3)
	expect(t, Resource(shared.ops), false)
	lost := new(h).add(write("a", a1, 1, 1, true), 0, 1).add(read("a", a1, 2), 2, 3)
	expect(t, Resource(lost.ops), false)
	var many []int
	for i := 1; i <= 20; i++ {
		many = append(many, i)
	}
	long := new(h)
	for i, v := range many {
		long.add(write("a", a1, v, i+1, true), int64(i), int64(i))
	}
	long.add(read("a", a1, 21, many...), 30, 31)
	expect(t, Resource(long.ops), true)
	changed := append(append([]int(nil), many[:3]...), append([]int{99}, many[4:]...)...)
	long.ops[len(long.ops)-1] = read("a", a1, 21, changed...)
	long.ops[len(long.ops)-1].Index, long.ops[len(long.ops)-1].Key = 20, "k"
	expect(t, Resource(long.ops), false)
	wrongRefusal := new(h).add(write("a", a1, 1, 1, true), 0, 1).add(write("b", b1, 2, 2, false), 2, 3)
	expect(t, Resource(wrongRefusal.ops), false)
}

func TestLeaseNoEarlyExpiry(t *testing.T) {
	ttl := 100 * time.Millisecond
	a1, b1 := tok(2, 1), tok(2, 2)
	good := new(h).add(acq("a", a1), 0, 10).add(renew("a", a1), 50, 60).add(acq("b", b1), 100, 160)
	expect(t, LeaseNoEarlyExpiry(good.ops, ttl), true)
	released := new(h).add(acq("a", a1), 0, 10).add(rel("a", a1), 20, 30).add(acq("b", b1), 40, 50)
	expect(t, LeaseNoEarlyExpiry(released.ops, ttl), true)
	early := new(h).add(acq("a", a1), 0, 10).add(renew("a", a1), 50, 60).add(acq("b", b1), 100, 140)
	expect(t, LeaseNoEarlyExpiry(early.ops, ttl), false)
}

func TestConvergenceAndRecovery(t *testing.T) {
	keys := []client.KeyInfo{{Key: "k", Token: tok(2, 1), State: "released"}}
	ok := &Final{Converged: true, Recovered: true, RecoveryTime: time.Second, RecoveryLimit: 10 * time.Second,
		Keys: map[string][]client.KeyInfo{"n1": keys, "n2": keys}, Statuses: map[string]*client.Status{"n1": {}, "n2": {}}}
	expect(t, Convergence(ok), true)
	expect(t, Recovery(nil, nil, ok), true)
	healed := []history.Fault{{Nemesis: "kill-all", Start: 0, End: 1e9}}
	quick := new(h).add(acq("a", tok(2, 1)), 500, 1500)
	expect(t, Recovery(quick.ops, healed, ok), true)
	late := new(h).add(acq("a", tok(2, 1)), 500, 20000)
	expect(t, Recovery(late.ops, healed, ok), false)

	diverged := *ok
	diverged.Converged, diverged.ConvergeDetail = false, "n2 applied 7, n1 applied 9"
	expect(t, Convergence(&diverged), false)
	differ := *ok
	differ.Keys = map[string][]client.KeyInfo{"n1": keys, "n2": {{Key: "k", Token: tok(2, 2), State: "held"}}}
	expect(t, Convergence(&differ), false)
	slow := *ok
	slow.Recovered = false
	expect(t, Recovery(nil, nil, &slow), false)
	expect(t, Convergence(nil), false)
	expect(t, Recovery(nil, nil, nil), false)
}

// Keys the churn workload reclaims up to the final reads may differ between
// the reads through two nodes; every other key must not.
func TestConvergenceLeavesChurningKeys(t *testing.T) {
	a := []client.KeyInfo{{Key: "jepsen/k0", Token: 1 << 32, State: "held"}, {Key: "jepsen/churn/k1", Token: 1 << 32, State: "released"}}
	b := []client.KeyInfo{{Key: "jepsen/k0", Token: 1 << 32, State: "held"}}
	final := &Final{Converged: true, Keys: map[string][]client.KeyInfo{"n1": a, "n2": b}, Churning: "jepsen/churn/"}
	if r := Convergence(final); !r.Pass {
		t.Fatalf("a churn key reclaimed between two reads failed convergence: %+v", r)
	}
	final.Churning = ""
	if r := Convergence(final); r.Pass {
		t.Fatal("without churn, keys that differ between nodes must fail convergence")
	}
}

func TestHostileTokens(t *testing.T) {
	ops := []history.Op{
		{Kind: "hostile-write", Key: "k", Token: fence.MaxToken, Outcome: history.Fail, Code: "proof_missing"},
		{Kind: "hostile-write", Key: "k", Token: fence.MaxToken, Outcome: history.Fail, Code: "proof_signature"},
	}
	if r := HostileTokens(ops, "hostile-write"); !r.Pass || r.Checked != 2 {
		t.Fatalf("refused hostile writes: %+v", r)
	}
	ops = append(ops, history.Op{Kind: "hostile-write", Key: "k", Token: fence.MaxToken, Outcome: history.OK})
	if r := HostileTokens(ops, "hostile-write"); r.Pass {
		t.Fatal("an admitted made-up token passed")
	}
}
