package main

import (
	"fmt"
	"io"
	"strings"
)

// sub returns the sub-command of a group by its last word ("add" of
// "members add").
func (c command) sub(word string) (command, bool) {
	for _, sc := range c.subs {
		if sc.name == c.name+" "+word {
			return sc, true
		}
	}
	return command{}, false
}

// subWords lists a group's sub-commands for messages: "list, add or remove".
func (c command) subWords() string {
	var ws []string
	for _, sc := range c.subs {
		ws = append(ws, strings.TrimPrefix(sc.name, c.name+" "))
	}
	if len(ws) < 2 {
		return strings.Join(ws, "")
	}
	return strings.Join(ws[:len(ws)-1], ", ") + " or " + ws[len(ws)-1]
}

// pickSub reads the sub-command of group c from the first of args. The
// sub-command comes right after the group's name, so that flags are parsed
// by the sub-command that owns them. done means the help was printed and
// there is nothing left to do.
func pickSub(e *env, c command, args []string) (sc command, done bool, err error) {
	if len(args) == 0 {
		printGroupHelp(e.stderr, c)
		return command{}, true, &exitError{code: exitUsage}
	}
	switch w := args[0]; {
	case w == "-h" || w == "--help":
		printGroupHelp(e.stdout, c)
		return command{}, true, nil
	case strings.HasPrefix(w, "-"):
		return command{}, false, usageErr(c.name, fmt.Sprintf("%s takes a command first (%s), then flags", c.name, c.subWords()))
	}
	sc, ok := c.sub(args[0])
	if !ok {
		return command{}, false, c.unknownSub(args[0])
	}
	return sc, false, nil
}

// unknownSub is the usage error of a word that names none of the group's
// commands: with the ones it may misspell, or else the list of them.
func (c command) unknownSub(word string) error {
	var words []string
	for _, sc := range c.subs {
		words = append(words, strings.TrimPrefix(sc.name, c.name+" "))
	}
	msg := fmt.Sprintf("unknown command %q", c.name+" "+word)
	guess := didYouMean(word, words, func(w string) string { return quoted(c.name + " " + w) })
	if guess == "" {
		guess = fmt.Sprintf("; %s takes %s", c.name, c.subWords())
	}
	return usageErr(c.name, msg+guess)
}

// printGroupHelp shows a group: what it is for, its sub-commands, and
// examples.
func printGroupHelp(w io.Writer, c command) {
	fmt.Fprintf(w, "Usage:\n  fencectl %s COMMAND [flags] [arguments]\n\n%s\n\nCommands:\n", c.name, strings.TrimSpace(c.help))
	for _, sc := range c.subs {
		synopsis := sc.name
		if sc.args != "" {
			synopsis += " " + sc.args
		}
		fmt.Fprintf(w, "  %-40s %s\n", synopsis, sc.summary)
	}
	fmt.Fprintf(w, "\nGlobal flags:\n%s", globalsUsage())
	fmt.Fprintf(w, "\nExamples:\n%s\n", indent(strings.TrimSpace(c.examples), "  "))
	fmt.Fprintf(w, "\nRun 'fencectl help %s COMMAND' for a command's flags and examples.\n", c.name)
}
