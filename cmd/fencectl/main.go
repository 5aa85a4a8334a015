// Command fencectl is the admin and scripting CLI of fenced: it shows the
// cluster and its keys, acquires, renews and releases grants, verifies fencing
// tokens with exit codes a shell script can trust, runs a command under a lock
// that kills the command when the lock is lost, checks a live cluster with a
// self-test, and runs the cluster: membership, leadership, backups and
// restores, and the audit trail of a stopped node's log.
package main

import (
	"context"
	"io"
	"os"
	"time"
)

func main() {
	e := &env{
		stdout:         os.Stdout,
		stderr:         os.Stderr,
		getenv:         os.LookupEnv,
		stdin:          os.Stdin,
		terminal:       func() bool { return isTerminal(os.Stdin) },
		stderrTerminal: func() bool { return isTerminal(os.Stderr) },
	}
	os.Exit(run(context.Background(), e, os.Args[1:]))
}

// env is everything a command reads from or writes to outside its flags and
// arguments. Tests build their own, so no command touches process-wide state
// except lock, which must own the process's signals.
type env struct {
	stdout io.Writer
	stderr io.Writer
	getenv func(string) (string, bool)
	// stdin is where a confirmation is read from; terminal reports whether
	// it is a terminal a person types into. Nil means no stdin: commands
	// that need a confirmation then require their --yes flag.
	stdin    io.Reader
	terminal func() bool
	// stderrTerminal reports whether stderr is a terminal a person reads:
	// long waits then say they are still waiting. Nil means no.
	stderrTerminal func() bool
	// ticker makes the clock of progress lines; nil means time.NewTicker.
	ticker func(time.Duration) (<-chan time.Time, func())
	// g holds the global flags once parsed.
	g globals
}
