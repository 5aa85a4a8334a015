package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
)

var electCommand = command{
	name:    "elect",
	args:    "NAME [-- COMMAND [ARGS...]]",
	summary: "campaign in an election and run a command while leader; or observe the leader",
	help: `
Campaigns in the election NAME (a key): waits until it holds the key, then runs
COMMAND while it leads, exactly as 'fencectl lock' does, with FENCE_TOKEN set
to the leadership's token (its term of office: every later leader has a higher
one) and --value published with the grant for others to read (an address, say).
When the leadership is lost, or could be lost on fencectl's clock, COMMAND's
process group gets SIGTERM and SIGKILL --grace later, before the key can pass
to another candidate; fencectl then exits 4, or with --recampaign waits to be
elected again and runs COMMAND anew. When COMMAND exits by itself fencectl
resigns (releases the key) and exits with COMMAND's code.

With --observe, fencectl runs no command: it prints the leader and every
change of it (a new leader, a new value, no leader) until interrupted, and
never a leader whose token is lower than one it printed. With -o json each
change is one JSON object on its own line.

The resource the leader writes to must fence by token: a leader that was
frozen can still write after it lost the election, until it is killed, and
only FENCE_TOKEN lets the resource refuse those late writes.`,
	examples: `
fencectl elect svc/leader --value "http://$(hostname):8080" -- ./serve --leader
fencectl elect svc/leader --recampaign --ttl 15s -- ./scheduler
fencectl elect svc/leader --observe -o json`,
	new: func() runner { return &electCmd{} },
}

type electCmd struct {
	fs         *pflag.FlagSet
	holder     string
	value      string
	ttl        time.Duration
	grace      time.Duration
	margin     time.Duration
	shell      bool
	recampaign bool
	observe    bool
}

func (c *electCmd) flags(fs *pflag.FlagSet) {
	c.fs = fs
	fs.StringVar(&c.holder, "holder", "", "candidate identity (default: HOST/PID/RANDOM)")
	fs.StringVar(&c.value, "value", "", "value published with the leadership (at most 1 KiB)")
	fs.DurationVar(&c.ttl, "ttl", client.DefaultTTL, "lease time of the leadership; renewed while COMMAND runs")
	fs.DurationVar(&c.grace, "grace", 2*time.Second, "time between SIGTERM and SIGKILL when the leadership is lost")
	fs.DurationVar(&c.margin, "margin", 0, "stop COMMAND this long before the lease could expire (default: the larger of ttl/3 and grace+1s)")
	fs.BoolVar(&c.shell, "shell", false, "run the words after -- with /bin/sh -c")
	fs.BoolVar(&c.recampaign, "recampaign", false, "after losing the leadership, campaign again instead of exiting")
	fs.BoolVar(&c.observe, "observe", false, "print the leader and its changes instead of campaigning")
}

func (c *electCmd) run(ctx context.Context, e *env, args []string) error {
	dash := c.fs.ArgsLenAtDash()
	if len(args) == 0 || dash == 0 {
		return usageErr("elect", "elect needs NAME")
	}
	name := args[0]
	if c.observe {
		if len(args) > 1 {
			return usageErr("elect", "--observe runs no COMMAND")
		}
		return c.watchLeader(ctx, e, name)
	}
	switch {
	case dash > 1:
		return usageErr("elect", fmt.Sprintf("only NAME goes before --, got %q", args[:dash]))
	case len(args) < 2:
		return usageErr("elect", "elect needs a COMMAND after NAME -- (or --observe)")
	case len(c.value) > client.MaxValueLen:
		return usageErr("elect", fmt.Sprintf("--value is longer than %d bytes", client.MaxValueLen))
	}
	argv := args[1:]
	t, err := newLockTiming(c.ttl, c.grace, c.margin)
	if err != nil {
		return usageErr("elect", err.Error())
	}
	if err := checkTTLWait(c.ttl, 0); err != nil {
		return usageErr("elect", err.Error())
	}
	argv, holder, sigs, stop := prepareSession(c.shell, argv, c.holder)
	defer stop()
	s := &lockSession{e: e, c: e.waitingClient(), key: name, holder: holder, t: t, wait: client.MaxWait, sigs: sigs, value: c.value, election: true}
	return c.campaign(ctx, s, argv)
}

// campaign runs the lock session until COMMAND exits by itself: a wait that
// ran out (someone else leads) is a campaign that goes on, and a lost
// leadership is one too with --recampaign.
func (c *electCmd) campaign(ctx context.Context, s *lockSession, argv []string) error {
	for {
		err := s.run(ctx, argv)
		var xe *exitError
		switch {
		case errors.Is(err, client.ErrHeld), errors.Is(err, client.ErrLockDelay), errors.Is(err, client.ErrUnavailable):
			if err := sleepOrSignal(s.sigs, time.Second, s.waitingFor()); err != nil {
				return err
			}
			continue
		case c.recampaign && errors.As(err, &xe) && xe.code == exitLockLost:
			fmt.Fprintf(s.e.stderr, "fencectl: campaigning again in election %s\n", s.key)
			continue
		}
		return err
	}
}

// sleepOrSignal waits d, or ends the campaign for what on a signal.
func sleepOrSignal(sigs <-chan os.Signal, d time.Duration, what string) error {
	select {
	case <-time.After(d):
		return nil
	case sig := <-sigs:
		return interrupted(sig, what)
	}
}

// watchLeader prints the leader and its changes.
func (c *electCmd) watchLeader(ctx context.Context, e *env, name string) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	for l := range e.waitingClient().NewElection(name, "", client.ElectionOptions{}).Observe(ctx) {
		if err := printLeader(e, l); err != nil {
			return err
		}
	}
	return nil
}

// leaderLine is a leader change as -o json prints it.
type leaderLine struct {
	Name   string `json:"name"`
	Leader string `json:"leader"`
	Token  string `json:"token"`
	Value  string `json:"value,omitempty"`
	Index  uint64 `json:"index"`
}

func printLeader(e *env, l client.Leader) error {
	if e.jsonOutput() {
		return printJSONLine(e.stdout, leaderLine{Name: l.Name, Leader: l.Holder, Token: l.Token.String(), Value: l.Value, Index: l.Index})
	}
	if l.Holder == "" {
		_, err := fmt.Fprintf(e.stdout, "%d no leader (last token %s)\n", l.Index, l.Token)
		return err
	}
	_, err := fmt.Fprintf(e.stdout, "%d leader %s token=%s value=%s\n", l.Index, l.Holder, l.Token, quoteValue(l.Value))
	return err
}
