package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// runner is one invocation of a command: flags registers the command's own
// flags on a fresh FlagSet, run does the work with the arguments left over.
// A runner is built anew for every invocation, so flag values never leak from
// one run to the next.
type runner interface {
	flags(fs *pflag.FlagSet)
	run(ctx context.Context, e *env, args []string) error
}

// command is one entry of the command table.
type command struct {
	name     string
	args     string // the synopsis after the flags, e.g. "KEY TOKEN"
	summary  string // one line for the command list
	help     string // what the command does, in a few paragraphs
	examples string
	// complete completes the arguments in shells (fencectl completion):
	// completeFiles, completeDirs, or the words they may be.
	complete []string
	new      func() runner
	// subs makes the command a group of commands ("members", "snapshot"):
	// its first argument names one of them. A sub-command's name is the full
	// "group sub", so its usage, help and errors read as typed.
	subs []command
}

// commands is the command table, in the order the help lists them.
var commands = []command{
	statusCommand,
	healthCommand,
	keysCommand,
	keyCommand,
	acquireCommand,
	renewCommand,
	releaseCommand,
	keepaliveCommand,
	verifyCommand,
	aclCommand,
	lockCommand,
	watchCommand,
	electCommand,
	selftestCommand,
	membersCommand,
	signingKeysCommand,
	leaderCommand,
	snapshotCommand,
	debugCommand,
	benchCommand,
	tlsCommand,
	completionCommand,
	versionCommand,
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// run parses the command line, runs the command and returns the process exit
// code.
func run(ctx context.Context, e *env, args []string) int {
	inv, err := parse(e, args)
	if err != nil || inv.r == nil {
		return report(e, err)
	}
	return report(e, inv.r.run(ctx, e, inv.args))
}

// invocation is a parsed command line. A nil runner means there is nothing
// left to do (help was printed).
type invocation struct {
	cmd  command
	r    runner
	args []string
}

// parse reads global flags, the command name, the command's flags (global
// flags may come before or after the command name) and the environment
// fallbacks of the global flags into e.g.
func parse(e *env, args []string) (invocation, error) {
	gfs := e.g.flagSet()
	// --version is taken before the command name only: it is no flag of
	// the commands, and no FENCE_ variable sets it.
	top := newFlagSet("fencectl")
	top.AddFlagSet(gfs)
	version := top.Bool("version", false, "print fencectl's version, as 'fencectl version' does")
	top.SetInterspersed(false)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printTopHelp(e.stdout)
			return invocation{}, nil
		}
		return invocation{}, flagError("", top, err)
	}
	rest := top.Args()
	if *version {
		return versionInvocation(e, gfs, rest)
	}
	if len(rest) == 0 {
		printTopHelp(e.stderr)
		return invocation{}, &exitError{code: exitUsage}
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		return invocation{}, helpCommand(e, rest)
	}
	c, ok := lookup(name)
	if !ok {
		return invocation{}, unknownCommand(name)
	}
	if len(c.subs) > 0 {
		sub, done, err := pickSub(e, c, rest)
		if err != nil || done {
			return invocation{}, err
		}
		c, rest = sub, rest[1:]
	}
	r := c.new()
	fs := newFlagSet(c.name)
	r.flags(fs)
	fs.AddFlagSet(gfs)
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printCommandHelp(e.stdout, c)
			return invocation{}, nil
		}
		return invocation{}, flagError(c.name, fs, err)
	}
	if err := e.g.finish(gfs, e.getenv); err != nil {
		return invocation{}, usageErr(c.name, err.Error())
	}
	return invocation{cmd: c, r: r, args: fs.Args()}, nil
}

// versionInvocation serves "fencectl --version": the version command, with
// the global flags given (-o json).
func versionInvocation(e *env, gfs *pflag.FlagSet, rest []string) (invocation, error) {
	if len(rest) > 0 {
		return invocation{}, usageErr("", fmt.Sprintf("--version takes no command, got %q", rest))
	}
	if err := e.g.finish(gfs, e.getenv); err != nil {
		return invocation{}, usageErr("", err.Error())
	}
	return invocation{cmd: versionCommand, r: versionCommand.new()}, nil
}

// newFlagSet returns a FlagSet that reports errors to its caller instead of
// printing usage itself, so every error comes out as one "fencectl:" line.
func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	return fs
}

// helpCommand serves "fencectl help [COMMAND [SUBCOMMAND]]".
func helpCommand(e *env, args []string) error {
	if len(args) == 0 {
		printTopHelp(e.stdout)
		return nil
	}
	c, ok := lookup(args[0])
	if !ok {
		return unknownCommand(args[0])
	}
	switch {
	case len(args) == 1:
	case len(args) == 2 && len(c.subs) > 0:
		sc, ok := c.sub(args[1])
		if !ok {
			return c.unknownSub(args[1])
		}
		c = sc
	default:
		return usageErr("", "help takes at most one command name")
	}
	printCommandHelp(e.stdout, c)
	return nil
}

func printTopHelp(w io.Writer) {
	var b strings.Builder
	b.WriteString(`fencectl is the command-line client of fenced, a fencing-token coordinator.

Usage:
  fencectl [global flags] COMMAND [flags] [arguments]
  fencectl --version

Commands:
`)
	for _, c := range commands {
		if len(c.subs) == 0 {
			fmt.Fprintf(&b, "  %-18s %s\n", c.name, c.summary)
		}
		for _, sc := range c.subs {
			fmt.Fprintf(&b, "  %-18s %s\n", sc.name, sc.summary)
		}
	}
	fmt.Fprintf(&b, "  %-18s %s\n", "help", "show the help of a command")
	b.WriteString("\nGlobal flags (also accepted after the command name):\n")
	b.WriteString(globalsUsage())
	b.WriteString("\n" + exitCodesHelp)
	b.WriteString("\nRun 'fencectl help COMMAND' for a command's flags and examples.\n")
	fmt.Fprint(w, b.String())
}

const exitCodesHelp = `Exit codes:
  0    success; for verify: ALLOW
  1    error (the message on stderr says what failed)
  2    wrong usage: unknown command or flag, missing or extra arguments
  3    verify: REFUSE (the reason on stderr), including anything fenced could not prove
  4    lock: the lock was lost and the command was terminated
  129+ fencectl was interrupted by a signal (130 SIGINT, 143 SIGTERM);
       lock returns the command's own exit code, 128+N when a signal N ended it
`

func printCommandHelp(w io.Writer, c command) {
	if len(c.subs) > 0 {
		printGroupHelp(w, c)
		return
	}
	fs := newFlagSet(c.name)
	c.new().flags(fs)
	fmt.Fprintf(w, "Usage:\n  fencectl %s", c.name)
	if fs.HasFlags() {
		fmt.Fprint(w, " [flags]")
	}
	if c.args != "" {
		fmt.Fprintf(w, " %s", c.args)
	}
	fmt.Fprintf(w, "\n\n%s\n", strings.TrimSpace(c.help))
	if fs.HasFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", fs.FlagUsages())
	}
	fmt.Fprintf(w, "\nGlobal flags:\n%s", globalsUsage())
	fmt.Fprintf(w, "\nExamples:\n%s\n", indent(strings.TrimSpace(c.examples), "  "))
}

func globalsUsage() string {
	var g globals
	return g.flagSet().FlagUsages()
}

func indent(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n")
}
