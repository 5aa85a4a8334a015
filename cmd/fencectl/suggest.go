package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// editDistance is the optimal string alignment distance of a and b: the
// insertions, deletions, substitutions and swaps of two neighbouring
// letters that turn one into the other. A swap counts as one edit, as it is
// one slip of the fingers ("stauts").
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// suggest returns the candidates word most likely misspells: those nearest
// to it within reach (two edits, one for words of three letters or fewer,
// where two edits make anything of anything), and those it begins when it
// has three letters or more ("stat" for status). Nil when none is near.
func suggest(word string, candidates []string) []string {
	reach := 2
	if len([]rune(word)) <= 3 {
		reach = 1
	}
	best, out := reach+1, []string(nil)
	for _, c := range candidates {
		d := editDistance(word, c)
		if len([]rune(word)) >= 3 && strings.HasPrefix(c, word) {
			d = min(d, reach)
		}
		switch {
		case d == 0 || d > reach || d > best:
		case d < best:
			best, out = d, []string{c}
		default:
			out = append(out, c)
		}
	}
	return out
}

// didYouMean words suggestions as the end of an error: `; did you mean
// "status"?`, or nothing.
func didYouMean(word string, candidates []string, quote func(string) string) string {
	s := suggest(word, candidates)
	if len(s) == 0 {
		return ""
	}
	for i := range s {
		s[i] = quote(s[i])
	}
	if len(s) > 1 {
		s = []string{strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]}
	}
	return "; did you mean " + s[0] + "?"
}

func quoted(s string) string { return fmt.Sprintf("%q", s) }

func dashed(s string) string { return "--" + s }

// commandNames are the words fencectl takes as a command.
func commandNames() []string {
	names := []string{"help"}
	for _, c := range commands {
		names = append(names, c.name)
	}
	return names
}

// unknownCommand is the usage error of a word that names no command.
func unknownCommand(word string) error {
	return usageErr("", fmt.Sprintf("unknown command %q", word)+didYouMean(word, commandNames(), quoted))
}

// flagError is the usage error of a flag fs could not parse: for an unknown
// long flag, with the flags of fs it may misspell.
func flagError(cmd string, fs *pflag.FlagSet, err error) error {
	msg := err.Error()
	var ne *pflag.NotExistError
	if errors.As(err, &ne) && strings.HasPrefix(msg, "unknown flag: --") {
		var names []string
		fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
		msg += didYouMean(ne.GetSpecifiedName(), names, dashed)
	}
	return usageErr(cmd, msg)
}
