package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

var completionCommand = command{
	name:    "completion",
	args:    "bash|zsh|fish",
	summary: "print the shell completion script of fencectl for bash, zsh or fish",
	help: `
Prints a script that completes fencectl's commands, sub-commands and flags in
the shell named, and the values of flags that take a known set (-o table or
json, keys --state) or a file (--cacert, --cert, --key, --backup-key-file,
acl check --file, the FILE of snapshot commands) or a directory. The script is generated from
fencectl's own command table, so it is always that of the fencectl that
printed it. After -- (the COMMAND of lock and elect), the shell's own
completion applies.

bash needs version 4.1 or later (macOS's /bin/bash 3.2 is too old); it works
with or without the bash-completion package.`,
	examples: `
fencectl completion bash > /etc/bash_completion.d/fencectl
source <(fencectl completion bash)             # in ~/.bashrc
fencectl completion zsh > "${fpath[1]}/_fencectl"   # then compinit
fencectl completion fish > ~/.config/fish/completions/fencectl.fish`,
	complete: []string{"bash", "zsh", "fish"},
	new:      func() runner { return &completionCmd{} },
}

type completionCmd struct{}

func (*completionCmd) flags(*pflag.FlagSet) {}

// completionWriters print the script of each shell.
var completionWriters = map[string]func(io.Writer, []compNode) error{
	"bash": writeBashCompletion,
	"zsh":  writeZshCompletion,
	"fish": writeFishCompletion,
}

func (*completionCmd) run(_ context.Context, e *env, args []string) error {
	if len(args) != 1 {
		return usageErr("completion", "completion takes one shell: bash, zsh or fish")
	}
	write, ok := completionWriters[args[0]]
	if !ok {
		return usageErr("completion", fmt.Sprintf("no completion for shell %q: bash, zsh or fish", args[0]))
	}
	return write(e.stdout, completionNodes())
}

// Completions of flag values and arguments, besides a fixed set of words.
const (
	completeFiles = "@files"
	completeDirs  = "@dirs"
	// completeAnnotation is the pflag annotation that carries a flag's
	// completion: completeFiles, completeDirs or the words it takes.
	completeAnnotation = "fencectl_complete"
)

// completeFlag records how the value of flag name of fs is completed.
func completeFlag(fs *pflag.FlagSet, name string, values ...string) {
	if err := fs.SetAnnotation(name, completeAnnotation, values); err != nil {
		panic(err) // a flag of the command table that does not exist
	}
}

// compNode is what may follow a command path: the top level (""), a command
// ("status", "members add") or a group ("members").
type compNode struct {
	path string
	// words are the commands that may come next: at the top level and in
	// a group.
	words []compWord
	flags []compFlag
	// args completes the arguments: completeFiles, completeDirs or words.
	args []string
}

type compWord struct{ name, desc string }

// compFlag is one flag of a node.
type compFlag struct {
	name, short, desc string
	// value: the flag takes a value; values completes it (nil: free text).
	value  bool
	values []string
	// global: one of the global flags, which every command takes.
	global bool
}

// completionNodes walks the command table: every node, the top level first.
func completionNodes() []compNode {
	var g globals
	gfs := g.flagSet()
	top := compNode{flags: append(flagsOf(gfs, true), compFlag{name: "version", desc: "print fencectl's version"}, helpFlag)}
	for _, c := range commands {
		top.words = append(top.words, compWord{c.name, c.summary})
	}
	top.words = append(top.words, compWord{"help", "show the help of a command"})
	nodes := []compNode{top}
	help := compNode{path: "help", flags: []compFlag{helpFlag}}
	for _, c := range commands {
		help.args = append(help.args, c.name)
		if len(c.subs) == 0 {
			nodes = append(nodes, commandNode(c, gfs))
			continue
		}
		group := compNode{path: c.name, flags: []compFlag{helpFlag}}
		for _, sc := range c.subs {
			group.words = append(group.words, compWord{strings.TrimPrefix(sc.name, c.name+" "), sc.summary})
		}
		nodes = append(nodes, group)
		for _, sc := range c.subs {
			nodes = append(nodes, commandNode(sc, gfs))
		}
	}
	return append(nodes, help)
}

var helpFlag = compFlag{name: "help", short: "h", desc: "show the help of the command"}

// commandNode is a command with its flags as parse gives them: its own,
// then the global ones it does not shadow.
func commandNode(c command, gfs *pflag.FlagSet) compNode {
	fs := newFlagSet(c.name)
	c.new().flags(fs)
	own := flagsOf(fs, false)
	var globals []compFlag
	for _, f := range flagsOf(gfs, true) {
		if fs.Lookup(f.name) == nil {
			globals = append(globals, f)
		}
	}
	return compNode{path: c.name, flags: append(append(own, globals...), helpFlag), args: c.complete}
}

// flagsOf lists the flags of fs; global says they are the global flags.
func flagsOf(fs *pflag.FlagSet, global bool) []compFlag {
	var out []compFlag
	fs.VisitAll(func(f *pflag.Flag) {
		desc, _, _ := strings.Cut(f.Usage, " (env ")
		out = append(out, compFlag{name: f.Name, short: f.Shorthand, desc: desc, global: global,
			value: f.NoOptDefVal == "", values: f.Annotations[completeAnnotation]})
	})
	return out
}

// valueFlags lists every flag, long and short, that takes a value in some
// node, dashes included: a script skips the word after one when it looks
// for the command path. No flag takes a value in one command and none in
// another.
func valueFlags(nodes []compNode) []string {
	seen := map[string]bool{}
	for _, n := range nodes {
		for _, f := range n.flags {
			if !f.value {
				continue
			}
			seen["--"+f.name] = true
			if f.short != "" {
				seen["-"+f.short] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for f := range seen {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// groupNames lists the groups: their sub-command is part of the path.
func groupNames(nodes []compNode) []string {
	var out []string
	for _, n := range nodes {
		if n.path != "" && len(n.words) > 0 {
			out = append(out, n.path)
		}
	}
	return out
}

// flagWords lists a node's flags as typed: --name, and -s for a shorthand.
func (n compNode) flagWords() []string {
	var out []string
	for _, f := range n.flags {
		out = append(out, "--"+f.name)
		if f.short != "" {
			out = append(out, "-"+f.short)
		}
	}
	return out
}

// wordNames lists a node's next command words.
func (n compNode) wordNames() []string {
	out := make([]string, len(n.words))
	for i, w := range n.words {
		out[i] = w.name
	}
	return out
}

// valueCases groups, for a shell's case statement, the flags whose values
// complete alike: the key is the completion (words joined by spaces, or
// completeFiles, completeDirs, "" for free text). own holds the patterns
// PATH|FLAG of the commands' own flags, global the patterns FLAG of the
// global ones: a script tries own first, as a command's own flag shadows a
// global one of its name (selftest --key, watch --key).
func valueCases(nodes []compNode) (own, global map[string][]string) {
	own, global = map[string][]string{}, map[string][]string{}
	for _, n := range nodes {
		for _, f := range n.flags {
			if !f.value || (f.global && n.path != "") {
				continue
			}
			key := strings.Join(f.values, " ")
			pats := []string{"--" + f.name}
			if f.short != "" {
				pats = append(pats, "-"+f.short)
			}
			if f.global {
				global[key] = append(global[key], pats...)
				continue
			}
			for _, p := range pats {
				own[key] = append(own[key], n.path+"|"+p)
			}
		}
	}
	return own, global
}

// sortedKeys returns m's keys in order, so scripts come out the same every
// time.
func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// shQuote quotes s for a POSIX-like shell (bash, zsh): in single quotes.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
