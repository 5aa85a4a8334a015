package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
)

// defaultEndpoint is the HTTP address of a development node started with no flags.
const defaultEndpoint = "127.0.0.1:7700"

// defaultDialTimeout is --dial-timeout's default, etcdctl's: a node that
// is up accepts a connection well within it.
const defaultDialTimeout = 2 * time.Second

// envPrefix starts the environment variable of every global flag:
// --endpoints is FENCE_ENDPOINTS, --timeout is FENCE_TIMEOUT.
const envPrefix = "FENCE_"

// Output formats.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// globals are the flags every command takes.
type globals struct {
	endpoints []string
	output    string
	timeout   time.Duration
	// attemptTimeout bounds each attempt on one node (client.WithAttemptTimeout).
	attemptTimeout time.Duration
	// dialTimeout ends a one-shot command no endpoint accepted a
	// connection for (client.WithConnectTimeout).
	dialTimeout time.Duration
	tls         tlsGlobals
}

// flagSet returns the global flags, bound to g.
func (g *globals) flagSet() *pflag.FlagSet {
	fs := newFlagSet("fencectl")
	fs.StringSliceVar(&g.endpoints, "endpoints", []string{defaultEndpoint},
		"comma-separated HTTP addresses of fenced nodes (env FENCE_ENDPOINTS)")
	fs.StringVarP(&g.output, "output", "o", outputTable, "output format: table or json (env FENCE_OUTPUT)")
	completeFlag(fs, "output", outputTable, outputJSON)
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "how long a request may take, retries included (env FENCE_TIMEOUT)")
	fs.DurationVar(&g.attemptTimeout, "attempt-timeout", client.DefaultAttemptTimeout,
		"how long one attempt on one node may take before the next node is tried; raise it with long election timeouts (env FENCE_ATTEMPT_TIMEOUT)")
	fs.DurationVar(&g.dialTimeout, "dial-timeout", defaultDialTimeout,
		"how long a command waits for any endpoint to accept a connection before it fails; lock, elect, watch, keepalive --every, status --wait and bench keep trying (env FENCE_DIAL_TIMEOUT)")
	g.tls.register(fs)
	return fs
}

// finish fills every global flag not given on the command line from its
// environment variable, then checks the values. The command line wins over the
// environment, which wins over the defaults.
func (g *globals) finish(fs *pflag.FlagSet, getenv func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || err != nil {
			return
		}
		name := envName(f.Name)
		if v, ok := getenv(name); ok && v != "" {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, serr)
			}
		}
	})
	if err != nil {
		return err
	}
	return g.check()
}

func (g *globals) check() error {
	var eps []string
	for _, ep := range g.endpoints {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return fmt.Errorf("--endpoints: no endpoint given")
	}
	// A typo in an endpoint is a usage error, found before any request.
	if _, err := client.ParseEndpoints(eps); err != nil {
		return fmt.Errorf("--endpoints: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	g.endpoints = eps
	if g.output != outputTable && g.output != outputJSON {
		return fmt.Errorf("--output must be %s or %s, not %q", outputTable, outputJSON, g.output)
	}
	if g.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, not %v", g.timeout)
	}
	if g.attemptTimeout <= 0 {
		return fmt.Errorf("--attempt-timeout must be positive, not %v", g.attemptTimeout)
	}
	if g.dialTimeout <= 0 {
		return fmt.Errorf("--dial-timeout must be positive, not %v", g.dialTimeout)
	}
	return g.tls.check()
}

// client returns a client of the endpoints for a one-shot command: a request
// no endpoint accepted a connection for within --dial-timeout fails then, not
// at --timeout (a typo'd endpoint, a cluster that is down).
func (e *env) client(opts ...client.Option) *client.Client {
	return e.waitingClient(append([]client.Option{client.WithConnectTimeout(e.g.dialTimeout)}, opts...)...)
}

// waitingClient returns a client of the endpoints for a command that waits
// for the cluster (lock, elect, watch, keepalive --every, status --wait,
// bench): it retries refused connections until --timeout, as a node that is
// starting refuses them for a moment.
func (e *env) waitingClient(opts ...client.Option) *client.Client {
	base := append(e.g.tls.clientOptions(), client.WithAttemptTimeout(e.g.attemptTimeout))
	return client.New(e.g.endpoints, append(base, opts...)...)
}

// withTimeout bounds one request, retries included, by --timeout plus extra
// (the --wait of an acquire, which the server may spend queueing).
func (e *env) withTimeout(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.g.timeout+extra)
}

func (e *env) jsonOutput() bool { return e.g.output == outputJSON }
