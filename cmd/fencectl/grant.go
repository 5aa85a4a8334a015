package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
)

var acquireCommand = command{
	name:    "acquire",
	args:    "KEY [KEY...]",
	summary: "acquire a key (or several, all or none) and print its fencing token",
	help: `
Asks fenced to grant KEY to a holder and prints the grant: the holder, the
fencing token with its epoch and seq, and the TTL. Send the token with every
write to the protected resource; the resource must refuse lower tokens.

The grant lasts --ttl unless renewed ('fencectl renew' or 'fencectl keepalive')
and ends with 'fencectl release'. Those commands need the holder: without
--holder, acquire makes one up from the host name, the process id and a random
suffix, and prints it. Acquiring a key the same holder already holds returns the
same grant and restarts its lease.

When the outcome is unknown (the --timeout ran out during a leader change, for
example), the key may have been granted. acquire then prints the command that
repeats it with the same holder and request id (--request-id): that repeat
returns the grant if there was one, or says it already ended. Repeating it
without them would be another holder's acquire, refused by the grant the
first one made.

With --wait, a key held by someone else is waited for, first come first served,
up to that long. Without it, or when the wait runs out, acquire fails (exit 1)
with the current holder.

--lock-delay keeps the key from any other holder for that long after this
grant expires, as Chubby and Consul do: a holder that lost its lease without
knowing it gets time to notice before someone else writes. It applies after an
expiry only, not after a release (a released key is free at once); it is off
by default, and at most 5m. An acquire refused because of a lock-delay says
when to retry; one with --wait long enough waits it out.

--limit N makes KEY a semaphore of N permits (1 to 1024): up to N holders hold
it at once, each with a permit of its own and its own fencing token (higher
than every earlier grant of KEY). Renew, release and verify name the permit by
its token. While any permit is live, an acquire with another --limit (or none)
is refused (limit_mismatch). A permit with --lock-delay keeps its slot for the
delay after an expiry: the semaphore counts it against N until the delay ends.

--shared asks for a shared grant: any number of holders hold KEY shared at once,
each with its own token, and none while someone holds it exclusively (an
acquire without --shared). Once an acquire waits for KEY, a new --shared one
waits behind it (or fails as held without --wait), so readers never starve a
writer. Not with --limit. A shared grant with --lock-delay keeps exclusive
acquires out for the delay after it expires (other readers may still come).

With several KEYs, acquire takes them all for the holder in one step, or none:
each gets its own token (each key a lock of its own, renewed, released and
verified per key). A set with a key held by someone else fails naming that key,
and no key changes; with --wait it waits, holding none of them, first come
first served among sets that overlap. Not with --limit, --shared or
--lock-delay; at most 64 keys.`,
	examples: `
fencectl acquire db --holder alice --ttl 30s
fencectl acquire db --holder alice --wait 1m
fencectl acquire db --holder alice --ttl 10s --lock-delay 15s
fencectl acquire workers --limit 4 --holder w1 --wait 1m
fencectl acquire config --shared --holder reader-1
fencectl acquire account/1 account/2 --holder transfer-7 --wait 10s
TOKEN=$(fencectl acquire db --holder "$(hostname)" -o json | jq -r .token)`,
	new: func() runner { return &acquireCmd{} },
}

type acquireCmd struct {
	fs        *pflag.FlagSet
	holder    string
	requestID string
	ttl       time.Duration
	wait      time.Duration
	lockDelay time.Duration
	limit     int
	shared    bool
}

func (a *acquireCmd) flags(fs *pflag.FlagSet) {
	a.fs = fs
	fs.StringVar(&a.holder, "holder", "", "holder identity (default: HOST/PID/RANDOM, printed)")
	fs.StringVar(&a.requestID, "request-id", "", "request id, to repeat an acquire whose outcome was unknown (default: random, printed then)")
	fs.DurationVar(&a.ttl, "ttl", client.DefaultTTL, "lease time of the grant without renewal")
	fs.DurationVar(&a.wait, "wait", 0, "wait up to this long while another holder has the key")
	fs.DurationVar(&a.lockDelay, "lock-delay", 0, "keep the key from other holders this long after this grant expires (not after a release)")
	fs.IntVar(&a.limit, "limit", 0, "make the key a semaphore of this many permits (1..1024) and acquire one")
	fs.BoolVar(&a.shared, "shared", false, "acquire a shared grant (readers); without it the grant is exclusive")
}

// checkShape refuses a --shared fenced would refuse: with --limit.
func checkShape(shared bool, limit int) error {
	if shared && limit > 0 {
		return fmt.Errorf("--shared cannot be given with --limit")
	}
	return nil
}

// checkLimit refuses a --limit fenced would refuse, before any request:
// given (set), it must be 1 to client.MaxLimit.
func checkLimit(set bool, limit int) error {
	if set && (limit < 1 || limit > client.MaxLimit) {
		return fmt.Errorf("--limit %d is outside 1..%d", limit, client.MaxLimit)
	}
	return nil
}

func (a *acquireCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageErr("acquire", "acquire takes a KEY")
	}
	if len(args) > 1 {
		return a.runMulti(ctx, e, args)
	}
	if err := checkTTLWait(a.ttl, a.wait); err != nil {
		return usageErr("acquire", err.Error())
	}
	if a.lockDelay < 0 || a.lockDelay > client.MaxLockDelay {
		return usageErr("acquire", fmt.Sprintf("--lock-delay %v is outside 0..%v", a.lockDelay, client.MaxLockDelay))
	}
	if len(a.requestID) > client.MaxRequestIDLen {
		return usageErr("acquire", fmt.Sprintf("--request-id is longer than %d bytes", client.MaxRequestIDLen))
	}
	if err := checkLimit(a.fs.Changed("limit"), a.limit); err != nil {
		return usageErr("acquire", err.Error())
	}
	if err := checkShape(a.shared, a.limit); err != nil {
		return usageErr("acquire", err.Error())
	}
	holder := a.holder
	if holder == "" {
		holder = defaultHolder()
	}
	ctx, cancel := e.withTimeout(ctx, a.wait)
	defer cancel()
	req := acquireRequest(args[0], holder, a.ttl, a.wait)
	if a.requestID != "" {
		req.RequestID = a.requestID
	}
	if a.lockDelay > 0 {
		req.LockDelay = a.lockDelay.String()
	}
	req.Limit = a.limit
	if a.shared {
		req.Mode = client.ModeShared
	}
	g, err := e.client().Acquire(ctx, req)
	if errors.Is(err, client.ErrUnknownOutcome) {
		// Only the same holder and request id get the grant an earlier
		// attempt may have made; the default holder is new in every run, so
		// say which ones to repeat with.
		return explainedf(err, "outcome unknown (%v): the acquire may or may not have been granted before --timeout %v ran out; to repeat it safely, run: fencectl acquire %s",
			err, e.g.timeout, a.repeatArgs(req))
	}
	if err != nil {
		return explain(err, subject{key: args[0], holder: holder}, e)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, g)
	}
	kv := []string{"key", g.Key, "holder", g.Holder, "token", tokenText(g.Token), "ttl", g.TTL, "renewed", yesNo(g.Renewed)}
	if g.Limit > 0 {
		kv = append(kv, "limit", fmt.Sprint(g.Limit))
	}
	if g.Mode != "" {
		kv = append(kv, "mode", g.Mode)
	}
	return fields(e.stdout, kv...)
}

// runMulti acquires several keys at once, all or none.
func (a *acquireCmd) runMulti(ctx context.Context, e *env, keys []string) error {
	switch {
	case len(keys) > client.MaxMultiKeys:
		return usageErr("acquire", fmt.Sprintf("acquire takes at most %d KEYs", client.MaxMultiKeys))
	case a.limit > 0 || a.shared || a.lockDelay > 0:
		return usageErr("acquire", "--limit, --shared and --lock-delay take one KEY")
	}
	if err := checkTTLWait(a.ttl, a.wait); err != nil {
		return usageErr("acquire", err.Error())
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			return usageErr("acquire", fmt.Sprintf("KEY %q is given twice", k))
		}
		seen[k] = true
	}
	holder := a.holder
	if holder == "" {
		holder = defaultHolder()
	}
	ctx, cancel := e.withTimeout(ctx, a.wait)
	defer cancel()
	req := client.AcquireMultiRequest{Keys: keys, Holder: holder, TTL: a.ttl.String(), RequestID: a.requestID}
	if req.RequestID == "" {
		req.RequestID = client.NewRequestID()
	}
	if a.wait > 0 {
		req.Wait = a.wait.String()
	}
	mg, err := e.client().AcquireMulti(ctx, req)
	if errors.Is(err, client.ErrUnknownOutcome) {
		return explainedf(err, "outcome unknown (%v): the keys may or may not have been granted before --timeout %v ran out; to repeat it safely, run: fencectl acquire %s --holder %s --request-id %s --ttl %v",
			err, e.g.timeout, strings.Join(quoteAll(keys), " "), shellQuote(holder), shellQuote(req.RequestID), a.ttl)
	}
	if err != nil {
		return explain(err, subject{key: strings.Join(keys, " "), holder: holder}, e)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, mg)
	}
	var kv []string
	for _, g := range mg.Grants {
		kv = append(kv, "key", g.Key, "holder", g.Holder, "token", tokenText(g.Token), "ttl", g.TTL, "renewed", yesNo(g.Renewed))
	}
	return fields(e.stdout, kv...)
}

// quoteAll shell-quotes each word.
func quoteAll(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = shellQuote(w)
	}
	return out
}

// repeatArgs are the arguments that repeat req: the same holder and request
// id, so the repeat returns the grant of an earlier attempt, if it made one.
func (a *acquireCmd) repeatArgs(req client.AcquireRequest) string {
	s := fmt.Sprintf("%s --holder %s --request-id %s --ttl %v", shellQuote(req.Key), shellQuote(req.Holder), shellQuote(req.RequestID), a.ttl)
	if a.wait > 0 {
		s += fmt.Sprintf(" --wait %v", a.wait)
	}
	if a.lockDelay > 0 {
		s += fmt.Sprintf(" --lock-delay %v", a.lockDelay)
	}
	if a.limit > 0 {
		s += fmt.Sprintf(" --limit %d", a.limit)
	}
	if a.shared {
		s += " --shared"
	}
	return s
}

func acquireRequest(key, holder string, ttl, wait time.Duration) client.AcquireRequest {
	req := client.AcquireRequest{Key: key, Holder: holder, TTL: ttl.String(), RequestID: client.NewRequestID()}
	if wait > 0 {
		req.Wait = wait.String()
	}
	return req
}

// checkTTLWait refuses durations fenced would refuse, before any request.
func checkTTLWait(ttl, wait time.Duration) error {
	if ttl < client.MinTTL || ttl > client.MaxTTL {
		return fmt.Errorf("--ttl %v is outside %v..%v", ttl, client.MinTTL, client.MaxTTL)
	}
	if wait < 0 || wait > client.MaxWait {
		return fmt.Errorf("--wait %v is outside 0..%v", wait, client.MaxWait)
	}
	return nil
}

// defaultHolder names this process: HOST/PID/RANDOM. The random part matters:
// fenced treats an acquire by the current holder as a renewal of its grant, so
// two processes that reused a pid on one host must still be different holders.
func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	if len(host) > 64 {
		host = host[:64]
	}
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), randomHex(3))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// parseToken reads a token argument strictly, as fenced does.
func parseToken(cmd, s string) (fence.Token, error) {
	t, err := fence.Parse(s)
	if err != nil {
		return 0, usageErr(cmd, fmt.Sprintf("TOKEN %q: %v", s, err))
	}
	return t, nil
}

var renewCommand = command{
	name:    "renew",
	args:    "KEY TOKEN [KEY TOKEN...]",
	summary: "extend the lease of a grant (or of several, all or none) by its TTL",
	help: `
Extends the lease of the grant of KEY with TOKEN, held by --holder, by the
grant's TTL from the moment the leader answers. It fails (exit 1) when the
grant is no longer live: superseded, released or expired. A lease that has
ended cannot be brought back; acquire the key again for a new token.

With several KEY TOKEN pairs (a set 'fencectl acquire K1 K2' granted, or any
grants of the holder; at most 64, each key once), renew renews them all or
none: a set naming a grant that is not live fails naming that key, and no
lease is renewed.`,
	examples: `
fencectl renew db 4294967297 --holder alice
fencectl renew account/1 4294967297 account/2 4294967301 --holder transfer-7`,
	new: func() runner { return &renewCmd{} },
}

type renewCmd struct {
	holder string
}

func (r *renewCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&r.holder, "holder", "", "holder of the grant (required)")
}

func (r *renewCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) < 2 || len(args)%2 != 0 {
		return usageErr("renew", "renew takes KEY and TOKEN (or several KEY TOKEN pairs)")
	}
	if r.holder == "" {
		return usageErr("renew", "--holder is required")
	}
	if len(args) > 2 {
		return r.runMulti(ctx, e, args)
	}
	tok, err := parseToken("renew", args[1])
	if err != nil {
		return err
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	out, err := e.client().Renew(ctx, args[0], r.holder, tok)
	if err != nil {
		return explain(err, subject{key: args[0], holder: r.holder, token: args[1]}, e)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, out)
	}
	return fields(e.stdout, "key", out.Key, "holder", out.Holder, "token", tokenText(out.Token), "ttl", out.TTL)
}

var releaseCommand = command{
	name:    "release",
	args:    "KEY TOKEN [KEY TOKEN...] | --force KEY [TOKEN]",
	summary: "end a grant, or several all or none (with --force: any key's current grant)",
	help: `
Ends the grant of KEY with TOKEN held by --holder, so the key can be granted
again at once. Releasing a grant that was already released succeeds, so a
release can be repeated safely.

With --force an operator ends the current grant of KEY whoever holds it; TOKEN
is then optional and, when given, must be the current grant's. Without TOKEN,
release reads the current grant's token once, before it sends anything, and
every retry names that grant: a retry never ends a later grant (one a waiter
got from this very release). It prints the token and holder of the grant it
ended. The holder of a forced-out grant is not told: its token is simply no
longer current, and fenced resources refuse it once a newer token has been
used.

With several KEY TOKEN pairs (a set 'fencectl acquire K1 K2' granted, or any
grants of the holder; at most 64, each key once), release ends them all in
one step, or none: a set naming a grant that is not the holder's live one
fails naming that key, and no grant ends. A set is retried with one request
id, so a retry never ends a later grant. Not with --force.`,
	examples: `
fencectl release db 4294967297 --holder alice
fencectl release account/1 4294967297 account/2 4294967301 --holder transfer-7
fencectl release --force db`,
	new: func() runner { return &releaseCmd{} },
}

type releaseCmd struct {
	holder string
	force  bool
}

func (r *releaseCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&r.holder, "holder", "", "holder of the grant (required without --force)")
	fs.BoolVar(&r.force, "force", false, "end the key's current grant whoever holds it (operators)")
}

func (r *releaseCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) > 2 && !r.force {
		return r.runMulti(ctx, e, args)
	}
	req, err := r.request(args)
	if err != nil {
		return err
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	cl := e.client()
	if req.Force && req.Token == 0 {
		// The grant to end is named once, here: every attempt of the
		// release carries its token, so a retry can never end a grant made
		// after the first attempt (a waiter's, handed the key by it).
		k, err := cl.Key(ctx, req.Key)
		if err != nil {
			return explain(err, subject{key: req.Key}, e)
		}
		req.Token = k.Token
	}
	out, err := cl.Release(ctx, req)
	if err != nil {
		return r.explain(err, req, e)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, out)
	}
	if req.Force {
		return fields(e.stdout, "key", out.Key, "token", tokenText(out.Token), "holder", out.Holder, "state", out.State)
	}
	return fields(e.stdout, "key", out.Key, "token", tokenText(out.Token), "state", out.State)
}

// explain says what a failed release means, naming the grant it meant.
func (r *releaseCmd) explain(err error, req client.ReleaseRequest, e *env) error {
	s := subject{key: req.Key, holder: req.Holder, token: req.Token.String()}
	if req.Force && errors.Is(err, client.ErrUnknownOutcome) && (errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrExpired)) {
		return explainedf(err, "outcome unknown: the grant of key %s with token %s has ended, by this release or otherwise; a later grant of the key was left alone", req.Key, req.Token)
	}
	if errors.Is(err, client.ErrUnknownOutcome) {
		return explainedf(err, "outcome unknown (%v): the release of the grant of key %s with token %s may or may not have been applied; to repeat it safely, run: fencectl release %s",
			err, req.Key, req.Token, r.repeatArgs(req))
	}
	return explain(err, s, e)
}

// repeatArgs are the arguments that repeat req exactly.
func (r *releaseCmd) repeatArgs(req client.ReleaseRequest) string {
	if req.Force {
		return fmt.Sprintf("--force %s %s", shellQuote(req.Key), req.Token)
	}
	return fmt.Sprintf("%s %s --holder %s", shellQuote(req.Key), req.Token, shellQuote(req.Holder))
}

// shellQuote quotes s for a POSIX shell unless it needs no quotes.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:@=+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (r *releaseCmd) request(args []string) (client.ReleaseRequest, error) {
	switch {
	case r.force && (len(args) < 1 || len(args) > 2):
		return client.ReleaseRequest{}, usageErr("release", "release --force takes KEY and an optional TOKEN")
	case !r.force && len(args) != 2:
		return client.ReleaseRequest{}, usageErr("release", "release takes KEY and TOKEN (or --force KEY)")
	case !r.force && r.holder == "":
		return client.ReleaseRequest{}, usageErr("release", "--holder is required (or --force)")
	}
	req := client.ReleaseRequest{Key: args[0], Holder: r.holder, Force: r.force}
	if len(args) == 2 {
		tok, err := parseToken("release", args[1])
		if err != nil {
			return client.ReleaseRequest{}, err
		}
		req.Token = tok
	}
	return req, nil
}

// grantPairs reads KEY TOKEN pairs: at most client.MaxMultiKeys, each key
// once, each token strictly parsed.
func grantPairs(cmd string, args []string) ([]client.GrantRef, error) {
	if len(args)%2 != 0 {
		return nil, usageErr(cmd, cmd+" takes KEY TOKEN pairs")
	}
	if len(args)/2 > client.MaxMultiKeys {
		return nil, usageErr(cmd, fmt.Sprintf("%s takes at most %d KEY TOKEN pairs", cmd, client.MaxMultiKeys))
	}
	seen := map[string]bool{}
	out := make([]client.GrantRef, 0, len(args)/2)
	for i := 0; i < len(args); i += 2 {
		if seen[args[i]] {
			return nil, usageErr(cmd, fmt.Sprintf("KEY %q is given twice", args[i]))
		}
		seen[args[i]] = true
		tok, err := parseToken(cmd, args[i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, client.GrantRef{Key: args[i], Token: tok})
	}
	return out, nil
}

// pairsText is the KEY TOKEN pairs of refs, shell-quoted.
func pairsText(refs []client.GrantRef) string {
	ws := make([]string, 0, 2*len(refs))
	for _, r := range refs {
		ws = append(ws, shellQuote(r.Key), r.Token.String())
	}
	return strings.Join(ws, " ")
}

// runMulti renews a set of grants, all or none.
func (r *renewCmd) runMulti(ctx context.Context, e *env, args []string) error {
	refs, err := grantPairs("renew", args)
	if err != nil {
		return err
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	out, err := e.client().RenewMulti(ctx, r.holder, refs)
	if err != nil {
		return explain(err, subject{key: strings.Join(keysOf(refs), " "), holder: r.holder}, e)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, out)
	}
	var kv []string
	for _, g := range out.Renewed {
		kv = append(kv, "key", g.Key, "holder", g.Holder, "token", tokenText(g.Token), "ttl", g.TTL)
	}
	return fields(e.stdout, kv...)
}

// runMulti releases a set of grants in one step, all or none.
func (r *releaseCmd) runMulti(ctx context.Context, e *env, args []string) error {
	if r.holder == "" {
		return usageErr("release", "--holder is required")
	}
	refs, err := grantPairs("release", args)
	if err != nil {
		return err
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	req := client.ReleaseMultiRequest{Keys: refs, Holder: r.holder, RequestID: client.NewRequestID()}
	out, err := e.client().ReleaseMulti(ctx, req)
	if errors.Is(err, client.ErrUnknownOutcome) {
		return explainedf(err, "outcome unknown (%v): the release of the set may or may not have been applied; repeating it is safe (a grant already released is no refusal): fencectl release %s --holder %s",
			err, pairsText(refs), shellQuote(r.holder))
	}
	if err != nil {
		return explain(err, subject{key: strings.Join(keysOf(refs), " "), holder: r.holder}, e)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, out)
	}
	var kv []string
	for _, g := range out.Released {
		kv = append(kv, "key", g.Key, "token", tokenText(g.Token), "state", g.State)
	}
	return fields(e.stdout, kv...)
}

// keysOf returns the keys of refs.
func keysOf(refs []client.GrantRef) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.Key
	}
	return out
}
