package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
)

var selftestCommand = command{
	name:    "selftest",
	summary: "check on a scratch key that the live cluster allows a current token and refuses stale ones",
	help: `
Runs a fencing check against the live cluster on a scratch key (default
fencectl-selftest/RANDOM). First the positive control: a fresh token must be
ALLOWED, because a guard that refuses everything would pass every other check.
Then tokens that must be REFUSED, each for its reason: another holder's
(holder_mismatch), one not granted yet (the current token + 1, and a token of
the highest possible epoch: not_granted_yet), malformed ones (malformed), a
released one (released), a superseded one (superseded), one of a key never
granted (unknown_key), and one whose lease ran out (expired). It also checks
that a new grant gets a higher token.

Each check is printed with ✓ or ✗; the exit code is 0 when all pass, 1
otherwise. fenced keeps every key forever, so a selftest run from cron should
pass a fixed --key.`,
	examples: `
fencectl selftest
fencectl selftest --key ops/selftest --endpoints 10.0.0.1:7700
fencectl selftest -o json | jq -e .pass`,
	new: func() runner { return &selftestCmd{} },
}

type selftestCmd struct {
	key string
}

func (s *selftestCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&s.key, "key", "", "scratch key to test on (default: fencectl-selftest/RANDOM)")
}

// check is one step of the self-test.
type check struct {
	Name  string `json:"name"`
	Token string `json:"token,omitempty"`
	Want  string `json:"want"`
	Got   string `json:"got"`
	Pass  bool   `json:"pass"`
}

// selftestReport is the JSON document of fencectl selftest.
type selftestReport struct {
	Key    string  `json:"key"`
	Pass   bool    `json:"pass"`
	Checks []check `json:"checks"`
}

// Verdicts as the checks show them.
const (
	wantAllow = "ALLOW"
	refuse    = "REFUSE "
)

func (s *selftestCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 0 {
		return usageErr("selftest", "selftest takes no arguments")
	}
	key := s.key
	if key == "" {
		key = "fencectl-selftest/" + randomHex(4)
	}
	st := &selftest{e: e, c: e.client(), key: key, suffix: randomHex(3)}
	st.run(ctx)
	rep := selftestReport{Key: key, Pass: st.passed(), Checks: st.checks}
	if e.jsonOutput() {
		if err := printJSON(e.stdout, rep); err != nil {
			return err
		}
	} else {
		st.print()
	}
	if !rep.Pass {
		return &exitError{code: exitErr, msg: fmt.Sprintf("selftest on key %s FAILED: %d of %d checks failed", key, st.failed(), len(st.checks))}
	}
	return nil
}

// selftest is one run of the checks.
type selftest struct {
	e      *env
	c      *client.Client
	key    string
	suffix string
	checks []check
}

func (st *selftest) holder(name string) string { return "fencectl-selftest/" + name + "/" + st.suffix }

// run performs the checks in order. It stops early only when it cannot get
// a grant to test with; that is a failure too.
func (st *selftest) run(ctx context.Context) {
	a, b := st.holder("a"), st.holder("b")
	g1, ok := st.acquire(ctx, "acquire a fresh grant", a, 30*time.Second)
	if !ok {
		return
	}
	t1 := g1.Token
	st.verify(ctx, "fresh token is allowed (positive control)", st.key, t1.String(), a, wantAllow)
	st.verify(ctx, "fresh token is allowed without a holder", st.key, t1.String(), "", wantAllow)
	st.verify(ctx, "fresh token of another holder is refused", st.key, t1.String(), b, cluster.ReasonHolderMismatch)
	st.verify(ctx, "token not granted yet (current + 1) is refused", st.key, (t1 + 1).String(), "", cluster.ReasonNotGrantedYet)
	future, _ := fence.Compose(fence.MaxEpoch, 1)
	st.verify(ctx, "token of a far-future epoch is refused", st.key, future.String(), "", cluster.ReasonNotGrantedYet)
	for _, bad := range []string{"abc", "0" + t1.String(), "-" + t1.String(), "0", "9223372036854775808"} {
		st.verify(ctx, "malformed token is refused", st.key, bad, "", cluster.ReasonMalformed)
	}
	if !st.release(ctx, "release the fresh grant", a, t1) {
		return
	}
	st.verify(ctx, "released token is refused", st.key, t1.String(), "", cluster.ReasonReleased)
	g2, ok := st.acquire(ctx, "acquire a second grant", b, 30*time.Second)
	if !ok {
		return
	}
	st.record(check{Name: "the second grant's token is higher", Token: g2.Token.String(), Want: "> " + t1.String(),
		Got: g2.Token.String(), Pass: g2.Token > t1})
	st.verify(ctx, "second token is allowed", st.key, g2.Token.String(), b, wantAllow)
	st.verify(ctx, "superseded token is refused", st.key, t1.String(), "", cluster.ReasonSuperseded)
	st.verify(ctx, "token of a key never granted is refused", st.key+"/never-granted", t1.String(), "", cluster.ReasonUnknownKey)
	if !st.release(ctx, "release the second grant", b, g2.Token) {
		return
	}
	st.expiry(ctx, a)
}

// expiry takes a grant with the shortest TTL and waits for fenced to refuse
// it as expired.
func (st *selftest) expiry(ctx context.Context, holder string) {
	g, ok := st.acquire(ctx, "acquire a grant with a short TTL", holder, client.MinTTL)
	if !ok {
		return
	}
	name, tok := "expired token is refused", g.Token.String()
	limit := time.Now().Add(min(st.e.g.timeout, 3*time.Second))
	for {
		got := st.ask(ctx, st.key, tok, "")
		if got != wantAllow || !time.Now().Before(limit) {
			st.record(check{Name: name, Token: tok, Want: refuse + string(cluster.ReasonExpired), Got: got,
				Pass: got == refuse+string(cluster.ReasonExpired)})
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (st *selftest) acquire(ctx context.Context, name, holder string, ttl time.Duration) (*client.Grant, bool) {
	rctx, cancel := st.e.withTimeout(ctx, 0)
	defer cancel()
	g, err := st.c.Acquire(rctx, acquireRequest(st.key, holder, ttl, 0))
	if err != nil {
		st.record(check{Name: name, Want: "a grant", Got: oneLine(explain(err, subject{key: st.key, holder: holder}, st.e).Error())})
		return nil, false
	}
	st.record(check{Name: name, Token: g.Token.String(), Want: "a grant", Got: "token " + g.Token.String(), Pass: true})
	return g, true
}

func (st *selftest) release(ctx context.Context, name, holder string, tok fence.Token) bool {
	rctx, cancel := st.e.withTimeout(ctx, 0)
	defer cancel()
	_, err := st.c.Release(rctx, client.ReleaseRequest{Key: st.key, Holder: holder, Token: tok})
	c := check{Name: name, Token: tok.String(), Want: "released", Got: "released", Pass: err == nil}
	if err != nil {
		c.Got = oneLine(explain(err, subject{key: st.key, holder: holder, token: tok.String()}, st.e).Error())
	}
	st.record(c)
	return c.Pass
}

// verify asks fenced and records whether the verdict is the one wanted:
// ALLOW, or REFUSE for the given reason.
func (st *selftest) verify(ctx context.Context, name, key, tok, holder string, want any) {
	w := fmt.Sprint(want)
	if r, ok := want.(cluster.Reason); ok {
		w = refuse + string(r)
	}
	got := st.ask(ctx, key, tok, holder)
	st.record(check{Name: name, Token: tok, Want: w, Got: got, Pass: got == w})
}

// ask returns the verdict as "ALLOW" or "REFUSE reason". An error with a
// verdict other than malformed (fenced did not answer) is shown with the
// error, so it never matches an expected reason.
func (st *selftest) ask(ctx context.Context, key, tok, holder string) string {
	rctx, cancel := st.e.withTimeout(ctx, 0)
	defer cancel()
	v, err := st.c.Verify(rctx, key, tok, holder)
	switch {
	case err != nil && v.Reason == string(cluster.ReasonMalformed):
		return refuse + v.Reason
	case err != nil:
		return refuse + v.Reason + ": " + oneLine(err.Error())
	case v.Allow:
		return wantAllow
	}
	return refuse + v.Reason
}

func (st *selftest) record(c check) { st.checks = append(st.checks, c) }

func (st *selftest) failed() int {
	n := 0
	for _, c := range st.checks {
		if !c.Pass {
			n++
		}
	}
	return n
}

// passed requires at least the positive control to have run, so that a run
// that could not even get a grant never passes.
func (st *selftest) passed() bool { return len(st.checks) > 1 && st.failed() == 0 }

func (st *selftest) print() {
	fmt.Fprintf(st.e.stdout, "selftest on key %s\n", st.key)
	for _, c := range st.checks {
		mark := "✓"
		if !c.Pass {
			mark = "✗"
		}
		line := fmt.Sprintf("%s %s", mark, c.Name)
		if c.Token != "" {
			line += fmt.Sprintf(" [token %q]", c.Token)
		}
		if c.Pass {
			line += ": " + c.Got
		} else {
			line += fmt.Sprintf(": want %s, got %s", c.Want, c.Got)
		}
		fmt.Fprintln(st.e.stdout, line)
	}
	verdict := "PASS"
	if !st.passed() {
		verdict = "FAIL"
	}
	fmt.Fprintf(st.e.stdout, "%s: %d checks, %d failed\n", verdict, len(st.checks), st.failed())
}
