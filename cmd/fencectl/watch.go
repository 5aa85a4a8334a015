package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
)

var watchCommand = command{
	name:    "watch",
	args:    "[PREFIX]",
	summary: "print every change of the keys with a prefix as it is committed",
	help: `
Follows the keys whose names start with PREFIX (every key without one; --key
follows one key alone) and prints a line per change, in log order, until
interrupted: granted, renewed, released, force_released, expired (with the
lock-delay that starts, if any), lock_delay_ended (the key may be granted
again) and handed_off (with the grant that ended).
Without --from it first prints the current state of the keys (state lines)
and a sync line; with --from it resumes after that log index.

Any node serves a watch, once it applied what a linearizable read would see;
fencectl reconnects by itself, to any endpoint, resuming after the last index
it printed. When fenced cannot resume (its history no longer reaches back, or
the watcher fell too far behind) fencectl prints a reset line and the current
state again: nothing is skipped silently.

With -o json every event is one JSON object on its own line.`,
	examples: `
fencectl watch
fencectl watch deploy/
fencectl watch --key svc/leader -o json | jq -c 'select(.type == "granted")'`,
	new: func() runner { return &watchCmd{} },
}

type watchCmd struct {
	key  string
	from uint64
}

func (w *watchCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&w.key, "key", "", "follow this key alone")
	fs.Uint64Var(&w.from, "from", 0, "resume after this log index (default: start with the current state)")
}

func (w *watchCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) > 1 {
		return usageErr("watch", "watch takes at most one PREFIX")
	}
	o := client.WatchOptions{Key: w.key, From: w.from}
	if len(args) == 1 {
		if w.key != "" {
			return usageErr("watch", "give PREFIX or --key, not both")
		}
		o.Prefix = args[0]
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	for ev := range e.waitingClient().Watch(ctx, o) {
		if ev.Type == client.WatchError {
			return fmt.Errorf("watch refused: %s", ev.Reason)
		}
		if err := printEvent(e, ev); err != nil {
			return err
		}
	}
	return nil
}

// printEvent writes one event: a JSON line, or INDEX TYPE KEY and fields.
func printEvent(e *env, ev client.WatchEvent) error {
	if e.jsonOutput() {
		return printJSONLine(e.stdout, ev)
	}
	_, err := fmt.Fprintln(e.stdout, eventLine(ev))
	return err
}

func eventLine(ev client.WatchEvent) string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(ev.Index, 10) + " " + ev.Type)
	if ev.Key != "" {
		b.WriteString(" " + ev.Key)
	}
	for _, f := range []struct{ name, value string }{
		{"holder", ev.Holder}, {"token", tokenOrEmpty(ev.Token.String(), ev.Token != 0)}, {"state", ev.State},
		{"ttl", ev.TTL}, {"lock_delay", ev.LockDelay}, {"prev_holder", ev.PrevHolder},
		{"prev_token", tokenOrEmpty(ev.PrevToken.String(), ev.PrevToken != 0)}, {"ended", ev.Ended},
		{"value", quoteValue(ev.Value)}, {"reason", ev.Reason},
	} {
		if f.value != "" {
			b.WriteString(" " + f.name + "=" + f.value)
		}
	}
	return b.String()
}

func tokenOrEmpty(s string, ok bool) string {
	if ok {
		return s
	}
	return ""
}

// quoteValue quotes a value with spaces or quotes, so a line stays one
// record per field.
func quoteValue(v string) string {
	if v == "" || !strings.ContainsAny(v, " \t\"=") {
		return v
	}
	return strconv.Quote(v)
}
