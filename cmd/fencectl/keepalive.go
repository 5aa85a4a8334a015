package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
)

var keepaliveCommand = command{
	name:    "keepalive",
	summary: "renew every grant of a holder, once or every interval",
	help: `
Renews the lease of every live grant of --holder, each by its own TTL, and
lists them. Without --every it renews once and fails (exit 1) when the holder
has no live grant. With --every it renews at that interval until interrupted
(Ctrl-C or SIGTERM end it with exit 0); a round that fails is reported on
stderr and retried at the next interval. Pick an interval well below the
shortest TTL, a third of it for example, so one lost round does not end a lease.

With -o json and --every, each round is one JSON document on its own line.`,
	examples: `
fencectl keepalive --holder alice
fencectl keepalive --holder alice --every 3s`,
	new: func() runner { return &keepaliveCmd{} },
}

type keepaliveCmd struct {
	holder string
	every  time.Duration
}

func (k *keepaliveCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&k.holder, "holder", "", "holder whose grants to renew (required)")
	fs.DurationVar(&k.every, "every", 0, "renew at this interval until interrupted (default: once)")
}

func (k *keepaliveCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 0 {
		return usageErr("keepalive", "keepalive takes no arguments")
	}
	if k.holder == "" {
		return usageErr("keepalive", "--holder is required")
	}
	if k.every < 0 {
		return usageErr("keepalive", "--every must not be negative")
	}
	if k.every > 0 {
		return k.loop(ctx, e, e.waitingClient())
	}
	out, err := k.once(ctx, e, e.client())
	if err != nil {
		return err
	}
	// Nothing renewed is an error, said once, on stderr (a JSON document
	// still goes to stdout for -o json).
	if len(out.Renewed) > 0 || e.jsonOutput() {
		if err := k.print(e, out, false); err != nil {
			return err
		}
	}
	if len(out.Renewed) == 0 {
		return fmt.Errorf("holder %s has no live grant to renew", k.holder)
	}
	return nil
}

// loop renews every interval until SIGINT or SIGTERM, which end it cleanly:
// stopping the renewals is what the operator asked for.
func (k *keepaliveCmd) loop(ctx context.Context, e *env, c *client.Client) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tick := time.NewTicker(k.every)
	defer tick.Stop()
	for {
		out, err := k.once(ctx, e, c)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			fmt.Fprintf(e.stderr, "fencectl: %s\n", oneLine(err.Error()))
		default:
			if err := k.print(e, out, true); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (k *keepaliveCmd) once(ctx context.Context, e *env, c *client.Client) (*client.KeepaliveResponse, error) {
	rctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	out, err := c.Keepalive(rctx, k.holder)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return nil, explain(err, subject{holder: k.holder}, e)
	}
	sort.Slice(out.Renewed, func(i, j int) bool { return out.Renewed[i].Key < out.Renewed[j].Key })
	if out.Renewed == nil {
		out.Renewed = []client.RenewResponse{}
	}
	return out, nil
}

func (k *keepaliveCmd) print(e *env, out *client.KeepaliveResponse, stream bool) error {
	if e.jsonOutput() {
		if stream {
			return printJSONLine(e.stdout, out)
		}
		return printJSON(e.stdout, out)
	}
	if len(out.Renewed) == 0 {
		_, err := fmt.Fprintf(e.stdout, "%s no live grant of holder %s\n", time.Now().Format(time.TimeOnly), k.holder)
		return err
	}
	t := newTable(e.stdout, "KEY", "TOKEN", "TTL", "RENEWED AT")
	now := time.Now().Format(time.TimeOnly)
	for _, r := range out.Renewed {
		t.row(r.Key, r.Token.String(), r.TTL, now)
	}
	return t.flush()
}
