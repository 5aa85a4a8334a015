package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
)

var lockCommand = command{
	name:    "lock",
	args:    "KEY -- COMMAND [ARGS...]",
	summary: "run a command while holding a key; terminate it when the key is lost",
	help: `
Acquires KEY (waiting up to --wait while someone else holds it), runs COMMAND
while renewing the lease, releases the key when COMMAND exits, and exits with
COMMAND's exit code (128+N when signal N ended it).

COMMAND runs directly, not through a shell, unless --shell is given: then the
words after -- are joined with spaces and run by /bin/sh -c. It runs in its own
process group, with these variables added to its environment:

  FENCE_KEY             the key
  FENCE_TOKEN           the fencing token of the grant: send it with every write
  FENCE_HOLDER          the holder fencectl acquired the key as
  FENCE_LEASE_DEADLINE  until when the lease is certainly held if no renewal
                        succeeds, RFC 3339 with nanoseconds, on this machine's
                        clock, as of the start of COMMAND
  FENCE_ENDPOINTS       the endpoints fencectl used, so COMMAND can run
                        'fencectl verify "$FENCE_KEY" "$FENCE_TOKEN"'

When the lease is lost (fenced refuses a renewal: the grant was superseded,
released or expired) or cannot be renewed before its deadline, fencectl sends
SIGTERM to COMMAND's process group and SIGKILL --grace later, prints why, and
exits 4. The deadline is the send time of the last successful renewal plus
the TTL fenced answered to it (--ttl, unless the same holder's acquire
elsewhere changed it) minus a safety margin, on fencectl's own clock. The margin is the larger
of ttl/3 and grace+1s (or --margin, which must exceed --grace by 250ms), and
the TTL must be at least 1.5 times the margin. fenced restarts a lease when it
answers a renewal, after the renewal was sent, so it cannot grant the key to
anyone else before send time + ttl, and by then COMMAND was SIGKILLed: the
margin is larger than the grace.

What this cannot do: a COMMAND that was frozen (or a fencectl that was frozen
while COMMAND kept running) can still act after the key moved on, until it is
killed. Only the resource can refuse such late writes: send FENCE_TOKEN with
every write and have the resource refuse lower tokens.

With --limit N, KEY is a semaphore of N permits (1 to 1024) and COMMAND runs
under one of them: up to N such commands run at once, each with its own
FENCE_TOKEN (a resource that must see only live permits asks verify, which
allows any live permit's token). While any permit is live, a lock of KEY with
another --limit (or none) is refused. With --shared, COMMAND runs under a
shared grant, beside other --shared ones and never beside a lock of KEY
without --shared.

SIGINT, SIGTERM and SIGHUP are passed on to COMMAND's process group while it
runs. Received while waiting for the key, they end fencectl (exit 130, 143,
129) and any grant that may have been made is released. Everything left in
COMMAND's process group when COMMAND exits is terminated before the key is
released. With -o json, a report of the run goes to stderr as one JSON
document, as stdout belongs to COMMAND.`,
	examples: `
fencectl lock db-migrate -- ./migrate.sh --apply
fencectl lock nightly --wait 10m --ttl 30s -- backup /var/lib/data
fencectl lock deploy --shell -- 'deploy.sh "$FENCE_TOKEN" && notify done'
fencectl lock job --holder "$(hostname)" --grace 10s --ttl 1m -- ./job
fencectl lock encoders --limit 4 --wait 1h -- ./encode.sh`,
	new: func() runner { return &lockCmd{} },
}

type lockCmd struct {
	fs     *pflag.FlagSet
	holder string
	ttl    time.Duration
	wait   time.Duration
	grace  time.Duration
	margin time.Duration
	shell  bool
	limit  int
	shared bool
}

func (l *lockCmd) flags(fs *pflag.FlagSet) {
	l.fs = fs
	fs.DurationVar(&l.ttl, "ttl", client.DefaultTTL, "lease time of the grant; renewed while COMMAND runs")
	fs.DurationVar(&l.wait, "wait", 0, "wait up to this long while another holder has the key")
	fs.StringVar(&l.holder, "holder", "", "holder identity (default: HOST/PID/RANDOM)")
	fs.BoolVar(&l.shell, "shell", false, "run the words after -- with /bin/sh -c")
	fs.DurationVar(&l.grace, "grace", 2*time.Second, "time between SIGTERM and SIGKILL when the lock is lost")
	fs.DurationVar(&l.margin, "margin", 0, "stop COMMAND this long before the lease could expire (default: the larger of ttl/3 and grace+1s)")
	fs.IntVar(&l.limit, "limit", 0, "make the key a semaphore of this many permits (1..1024) and run COMMAND under one of them")
	fs.BoolVar(&l.shared, "shared", false, "run COMMAND under a shared grant (readers), beside other shared ones")
}

func (l *lockCmd) run(ctx context.Context, e *env, args []string) error {
	key, argv, err := l.split(args)
	if err != nil {
		return err
	}
	t, err := newLockTiming(l.ttl, l.grace, l.margin)
	if err != nil {
		return usageErr("lock", err.Error())
	}
	if err := checkTTLWait(l.ttl, l.wait); err != nil {
		return usageErr("lock", err.Error())
	}
	if err := checkLimit(l.fs.Changed("limit"), l.limit); err != nil {
		return usageErr("lock", err.Error())
	}
	if err := checkShape(l.shared, l.limit); err != nil {
		return usageErr("lock", err.Error())
	}
	argv, holder, sigs, stop := prepareSession(l.shell, argv, l.holder)
	defer stop()
	s := &lockSession{e: e, c: e.waitingClient(), key: key, holder: holder, t: t, wait: l.wait, sigs: sigs, limit: l.limit, shared: l.shared}
	return s.run(ctx, argv)
}

// split separates KEY from COMMAND. "--" is needed only when COMMAND has
// arguments that look like flags; before it, only KEY is allowed.
func (l *lockCmd) split(args []string) (string, []string, error) {
	dash := l.fs.ArgsLenAtDash()
	switch {
	case len(args) == 0 || dash == 0:
		return "", nil, usageErr("lock", "lock needs KEY -- COMMAND")
	case dash > 1:
		return "", nil, usageErr("lock", fmt.Sprintf("only KEY goes before --, got %q", args[:dash]))
	case len(args) < 2:
		return "", nil, usageErr("lock", "lock needs a COMMAND after KEY --")
	}
	return args[0], args[1:], nil
}

// lockSession is one run of lock.
type lockSession struct {
	e      *env
	c      *client.Client
	key    string
	holder string
	t      lockTiming
	wait   time.Duration
	sigs   chan os.Signal
	value  string // published with the grant (elect --value)
	// limit, when set, makes the grant one of the key's permits; shared
	// makes it a shared grant.
	limit  int
	shared bool
	// election: the grant is the leadership of an election (elect), and
	// is spoken of as such.
	election bool
	// warned: warnShortTTL has run.
	warned bool
}

// waitingFor names what the session waits for, in messages.
func (s *lockSession) waitingFor() string {
	if s.election {
		return "the leadership of election " + s.key
	}
	return "the lock on key " + s.key
}

// lockReport is the JSON document lock writes to stderr with -o json.
type lockReport struct {
	Key      string      `json:"key"`
	Holder   string      `json:"holder"`
	Token    fence.Token `json:"token"`
	Epoch    uint64      `json:"epoch"`
	Seq      uint64      `json:"seq"`
	ExitCode int         `json:"exit_code"`
	Lost     bool        `json:"lost"`
	Killed   bool        `json:"killed,omitempty"` // SIGKILL was needed
	Error    string      `json:"error,omitempty"`
}

// warnShortTTL says, once per session, when the TTL cannot survive one
// leader failover with the cluster's timeouts: the leader may die just
// before a renewal, and the renewals left in the window must outlast the
// failover, or the command is killed although its holder is alive. A status
// that does not come is no reason to hold the command back.
func (s *lockSession) warnShortTTL(ctx context.Context) {
	if s.warned {
		return
	}
	s.warned = true
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := s.c.Status(sctx)
	if err != nil || st.FailoverMS <= 0 {
		return
	}
	failover := time.Duration(st.FailoverMS) * time.Millisecond
	if !survives(s.t, failover) {
		min := s.t.ttl
		for t := s.t; !survives(t, failover) && min < client.MaxTTL; {
			min += 100 * time.Millisecond
			if t2, err := newLockTiming(min, s.t.grace, s.t.fixedMargin); err == nil {
				t = t2
			}
		}
		fmt.Fprintf(s.e.stderr, "fencectl: warning: --ttl %v may not survive a leader failover: this cluster may renew nothing for up to %v after its leader dies, and renewing every %v with a kill margin of %v, the lock has only %v left when a leader dies just before a renewal; the command would be killed although it is alive. Use --ttl %v or more.\n",
			s.t.ttl, failover, s.t.interval.Round(time.Millisecond), s.t.margin.Round(time.Millisecond), (s.t.window - s.t.interval).Round(time.Millisecond), min)
	}
}

// survives reports whether a lock of timing t outlasts a failover: after a
// renewal that was due just as the leader died, the renewals left before
// the kill margin must come after the new leader serves.
func survives(t lockTiming, failover time.Duration) bool { return t.window-t.interval > failover }

func (s *lockSession) run(ctx context.Context, argv []string) error {
	g, sent, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	if g.Renewed {
		fmt.Fprintf(s.e.stderr, "fencectl: warning: holder %s already held key %s; sharing its grant (token %s)\n", s.holder, s.key, g.Token)
	}
	s.warnShortTTL(ctx)
	k := newKeeper(s.c, *g, s.t, sent)
	if err := s.refresh(ctx, k); err != nil {
		_ = s.release(ctx, g.Token, true)
		return err
	}
	if sig, ok := pending(s.sigs); ok {
		_ = s.release(ctx, g.Token, true)
		return interrupted(sig, s.waitingFor())
	}
	ch, err := startChild(argv, s.environ(k), os.Stdin, s.e.stdout, s.e.stderr)
	if err != nil {
		_ = s.release(ctx, g.Token, true)
		return startFailure(argv[0], err)
	}
	kctx, stopKeeper := context.WithCancel(ctx)
	go k.run(kctx)
	lost := s.supervise(k, ch)
	rep := lockReport{Key: s.key, Holder: s.holder, Token: g.Token, Epoch: g.Epoch, Seq: g.Seq}
	if lost != nil {
		rep.Lost, rep.Killed = true, ch.stop(s.t.grace)
		stopKeeper()
		rep.ExitCode, rep.Error = exitLockLost, lost.Error()
		// Said at once; the release below may take a while when fenced is
		// out of reach.
		fmt.Fprintf(s.e.stderr, "fencectl: %s\n", s.lostMessage(lost, g.Token, argv[0], rep.Killed))
		_ = s.release(ctx, g.Token, false) // ends the grant early if fenced still has it
		s.printReport(rep)
		return &exitError{code: exitLockLost}
	}
	if ch.groupAlive() {
		rep.Killed = ch.stop(s.t.grace) // nothing of COMMAND may outlive the grant
	}
	stopKeeper()
	rep.ExitCode = ch.exitCode()
	if err := s.release(ctx, g.Token, true); err != nil {
		rep.Error = oneLine(err.Error())
	}
	s.printReport(rep)
	if rep.ExitCode == 0 {
		return nil
	}
	return &exitError{code: rep.ExitCode}
}

// acquire gets the grant. A signal while waiting abandons the request and
// releases whatever grant it may have made.
func (s *lockSession) acquire(ctx context.Context) (*client.Grant, time.Time, error) {
	actx, cancel := s.e.withTimeout(ctx, s.wait)
	defer cancel()
	type result struct {
		g   *client.Grant
		err error
	}
	res := make(chan result, 1)
	sent := time.Now()
	go func() {
		req := acquireRequest(s.key, s.holder, s.t.ttl, s.wait)
		req.Value, req.Limit = s.value, s.limit
		if s.shared {
			req.Mode = client.ModeShared
		}
		g, err := s.c.Acquire(actx, req)
		res <- result{g, err}
	}()
	select {
	case r := <-res:
		var ae *client.Error
		if r.err != nil && !errors.As(r.err, &ae) {
			// No definite answer: the grant may have been made.
			s.abandon(ctx, nil)
		}
		return r.g, sent, explain(r.err, subject{key: s.key, holder: s.holder}, s.e)
	case sig := <-s.sigs:
		cancel()
		r := <-res
		s.abandon(ctx, r.g)
		return nil, sent, interrupted(sig, s.waitingFor())
	}
}

// abandon releases a grant this run may hold without knowing its token:
// one it got (g), or one an interrupted acquire may have made, found by
// reading the key. A grant made after that read, by a wait fenced had not yet
// seen abandoned, is never renewed and ends after --ttl.
func (s *lockSession) abandon(ctx context.Context, g *client.Grant) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.e.g.timeout)
	defer cancel()
	go func() { // a second signal gives up on the cleanup
		select {
		case <-s.sigs:
			cancel()
		case <-cctx.Done():
		}
	}()
	if g != nil {
		_ = s.releaseWith(cctx, g.Token)
		return
	}
	ki, err := s.c.Key(cctx, s.key)
	if err == nil && ki.State == "held" && ki.Holder == s.holder {
		_ = s.releaseWith(cctx, ki.Token)
	}
}

// refresh renews a grant whose acquire took long (it waited in a queue)
// before COMMAND starts: the lease is only known to run from the send time
// of the acquire, which may leave little or nothing of the window.
func (s *lockSession) refresh(ctx context.Context, k *keeper) error {
	k.mu.Lock()
	enough := k.window() - k.interval()
	k.mu.Unlock()
	if time.Until(k.deadline()) >= enough {
		return nil
	}
	if err := k.renew(ctx, time.Now().Add(s.e.g.timeout)); err != nil {
		return fmt.Errorf("acquired key %s but could not renew it before starting the command: %w", s.key,
			explain(err, subject{key: s.key, holder: s.holder, token: k.grant.Token.String()}, s.e))
	}
	return nil
}

// clockCheck bounds how long the supervisor sleeps, so that a wall clock
// running ahead of a stopped monotonic clock (a suspended machine) is noticed.
const clockCheck = 250 * time.Millisecond

// errDeadline says the lease could not be renewed before its deadline.
var errDeadline = errors.New("could not renew the lease before its deadline")

// supervise waits for COMMAND to exit, passing signals on to its group. It
// returns nil when COMMAND exited, or why the lock was lost.
func (s *lockSession) supervise(k *keeper, ch *child) error {
	for {
		if k.expired(time.Now()) {
			if err := k.failure(); err != nil {
				return fmt.Errorf("%w (last error: %v)", errDeadline, oneLine(err.Error()))
			}
			return errDeadline
		}
		wake := time.NewTimer(min(time.Until(k.deadline()), clockCheck))
		select {
		case <-ch.done:
			wake.Stop()
			return nil
		case sig := <-s.sigs:
			ch.signal(sig.(syscall.Signal))
		case err := <-k.lost:
			wake.Stop()
			return fmt.Errorf("fenced refused to renew the lease: %v", oneLine(err.Error()))
		case <-wake.C:
		}
		wake.Stop()
	}
}

// lostMessage says what was lost (the lock, or the leadership of elect),
// with its key and token, why, and how COMMAND was stopped.
func (s *lockSession) lostMessage(lost error, tok fence.Token, name string, killed bool) string {
	how := fmt.Sprintf("%s was sent SIGTERM and exited within the %v grace period", name, s.t.grace)
	if killed {
		how = fmt.Sprintf("%s was sent SIGTERM, then SIGKILL after %v", name, s.t.grace)
	}
	what := "lock on key"
	if s.election {
		what = "leadership of election"
	}
	return fmt.Sprintf("%s %s (token %s) lost: %v; %s", what, s.key, tok, lost, how)
}

// environ is COMMAND's environment: fencectl's, plus the grant.
func (s *lockSession) environ(k *keeper) []string {
	return append(os.Environ(),
		"FENCE_KEY="+s.key,
		"FENCE_TOKEN="+k.grant.Token.String(),
		"FENCE_HOLDER="+s.holder,
		"FENCE_LEASE_DEADLINE="+k.deadline().Format(time.RFC3339Nano),
		"FENCE_ENDPOINTS="+strings.Join(s.e.g.endpoints, ","),
	)
}

// release ends the grant on the way out. A grant that already ended needs
// nothing more. When warn is set, a failure is reported on stderr: the grant
// then stays until its lease expires.
func (s *lockSession) release(ctx context.Context, tok fence.Token, warn bool) error {
	timeout := s.e.g.timeout
	if !warn {
		timeout = min(timeout, time.Second) // the lease is lost anyway
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := s.releaseWith(rctx, tok)
	if err != nil && warn {
		fmt.Fprintf(s.e.stderr, "fencectl: warning: could not release key %s (it expires after %v): %s\n",
			s.key, s.t.ttl, oneLine(explain(err, subject{key: s.key, holder: s.holder, token: tok.String()}, s.e).Error()))
	}
	return err
}

func (s *lockSession) releaseWith(ctx context.Context, tok fence.Token) error {
	_, err := s.c.Release(ctx, client.ReleaseRequest{Key: s.key, Holder: s.holder, Token: tok})
	if errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrExpired) || errors.Is(err, client.ErrNoLease) {
		return nil // the grant has ended already
	}
	return err
}

func (s *lockSession) printReport(rep lockReport) {
	if s.e.jsonOutput() {
		_ = printJSON(s.e.stderr, rep)
	}
}

// pending returns a signal that arrived and was not handled yet.
func pending(sigs <-chan os.Signal) (os.Signal, bool) {
	select {
	case sig := <-sigs:
		return sig, true
	default:
		return nil, false
	}
}

// interrupted is the exit of a fencectl ended by a signal while it waited
// for what: 128+N, as a shell reports a process a signal ended.
func interrupted(sig os.Signal, what string) error {
	code := exitErr
	if s, ok := sig.(syscall.Signal); ok {
		code = 128 + int(s)
	}
	return &exitError{code: code, msg: fmt.Sprintf("interrupted by %v while waiting for %s", sig, what)}
}

// startFailure exits 127 when COMMAND is not found and 126 when it cannot be
// run, as shells do.
func startFailure(name string, err error) error {
	code := 126
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		code = 127
	}
	return &exitError{code: code, msg: fmt.Sprintf("cannot run %s: %v", name, err)}
}

// prepareSession readies a command run under a grant (lock, elect): COMMAND's
// argv (through /bin/sh -c with --shell), the holder (a default one when none
// was given), and the signals, taken before anything is acquired so that none
// can end fencectl between a grant and its release; stop gives them back.
func prepareSession(shell bool, argv []string, holder string) ([]string, string, chan os.Signal, func()) {
	if shell {
		argv = []string{"/bin/sh", "-c", strings.Join(argv, " ")}
	}
	if holder == "" {
		holder = defaultHolder()
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	return argv, holder, sigs, func() { signal.Stop(sigs) }
}
