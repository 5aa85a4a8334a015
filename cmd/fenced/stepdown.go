package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// stepDownCommand is the one subcommand of fenced: `fenced step-down` asks
// the node it is configured as (the same flags and FENCED_* environment as
// the daemon) to hand leadership to another member if it leads, and does
// nothing otherwise. It is a Kubernetes preStop hook: the image has no
// shell, and a leaving leader should hand over while it still serves, not
// only when SIGTERM reaches it.
const stepDownCommand = "step-down"

// stepDownTimeout bounds the whole step-down.
const stepDownTimeout = 15 * time.Second

// stepDownMain runs `fenced step-down ARGS` and returns the exit code.
func stepDownMain(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args)
	if err != nil {
		fmt.Fprintln(stderr, "fenced step-down:", err)
		return 2
	}
	sec, err := loadSecurity(&o.sec)
	if err != nil {
		fmt.Fprintln(stderr, "fenced step-down:", err)
		return 1
	}
	o.loaded = sec
	self := o.httpAdvertise
	if self == "" {
		self = o.httpAddr
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepDownTimeout)
	defer cancel()
	msg, err := stepDown(ctx, o, self)
	if err != nil {
		// A preStop hook that fails only delays the stop; SIGTERM still hands
		// leadership over. Say why, and exit non-zero for the events log.
		fmt.Fprintln(stderr, "fenced step-down:", err)
		return 1
	}
	fmt.Fprintln(stdout, msg)
	return 0
}

// stepDown hands leadership over when the node at endpoint self leads.
func stepDown(ctx context.Context, o *options, self string) (string, error) {
	c := o.loaded.apiClient([]string{self})
	st, err := c.NodeStatus(ctx, c.Endpoints()[0])
	if err != nil {
		return "", fmt.Errorf("status of %s: %w", self, err)
	}
	if st.LeaderID != st.ID {
		return fmt.Sprintf("%s does not lead (leader %q): nothing to hand over", st.ID, st.LeaderID), nil
	}
	voters := 0
	for _, m := range st.Members {
		if m.Voter {
			voters++
		}
	}
	if voters < 2 {
		return fmt.Sprintf("%s is the only voter: nothing to hand over to", st.ID), nil
	}
	leader, err := c.Transfer(ctx, "")
	if err != nil {
		return "", fmt.Errorf("leadership transfer: %w", err)
	}
	return fmt.Sprintf("%s handed leadership to %s", st.ID, leader), nil
}

// runSubcommand runs a subcommand named by args[0], if it is one, and
// reports whether it did.
func runSubcommand(args []string) (code int, ran bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case stepDownCommand:
		return stepDownMain(args[1:], os.Stdout, os.Stderr), true
	case preStopCommand:
		return preStopMain(args[1:], os.Stdout, os.Stderr), true
	}
	return 0, false
}
