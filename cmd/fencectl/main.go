// Command fencectl is the admin and scripting CLI of fenced: it shows the
// cluster and its keys, acquires, renews and releases grants, verifies fencing
// tokens with exit codes a shell script can trust, runs a command under a lock
// that kills the command when the lock is lost, and checks a live cluster with
// a self-test.
package main

import (
	"context"
	"io"
	"os"
)

func main() {
	e := &env{
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.LookupEnv,
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
	// g holds the global flags once parsed.
	g globals
}
