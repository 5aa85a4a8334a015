package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
)

var healthCommand = command{
	name:    "health",
	summary: "check one node, for health checks and probes",
	help: `
Asks only the first endpoint, with no retry on another node: exit 0 when it
is ready to serve (it leads, or knows a leader to forward to: GET /readyz), 1
otherwise. With --live it only checks that the process answers (GET
/healthz). Meant for container health checks and load-balancer probes, where
the answer must be about this node alone.`,
	examples: `
fencectl health --endpoints 127.0.0.1:7700
fencectl health --live --endpoints 127.0.0.1:7700 --timeout 2s`,
	new: func() runner { return &healthCmd{} },
}

type healthCmd struct{ live bool }

func (h *healthCmd) flags(fs *pflag.FlagSet) {
	fs.BoolVar(&h.live, "live", false, "check liveness (the process answers) instead of readiness")
}

func (h *healthCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 0 {
		return usageErr("health", "health takes no arguments")
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	c := e.client()
	ep := c.Endpoints()[0]
	var err error
	if h.live {
		err = c.NodeLive(ctx, ep)
	} else {
		err = c.NodeReady(ctx, ep)
	}
	what := "ready"
	if h.live {
		what = "live"
	}
	if e.jsonOutput() {
		out := map[string]any{"endpoint": ep, what: err == nil}
		if err != nil {
			out["error"] = err.Error()
		}
		if perr := printJSON(e.stdout, out); perr != nil {
			return perr
		}
	} else if err == nil {
		fmt.Fprintf(e.stdout, "%s is %s\n", ep, what)
	}
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("%s is not %s: %s", ep, what, oneLine(err.Error()))}
	}
	return nil
}
