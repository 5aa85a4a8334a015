package main

import (
	"context"
	"strings"
	"testing"
)

// TestVersionFlag: fencectl --version prints what fencectl version prints,
// in either output format; it is not a flag of the commands.
func TestVersionFlag(t *testing.T) {
	for _, format := range []string{"table", "json"} {
		e, want, _ := testEnv(nil)
		if code := run(context.Background(), e, []string{"-o", format, "version"}); code != 0 {
			t.Fatalf("version -o %s: exit %d", format, code)
		}
		e, got, stderr := testEnv(nil)
		if code := run(context.Background(), e, []string{"-o", format, "--version"}); code != 0 || got.String() != want.String() {
			t.Fatalf("--version -o %s: exit %d, printed %q (stderr %q), want %q", format, code, got, stderr, want)
		}
	}
	for _, args := range [][]string{{"--version", "status"}, {"status", "--version"}} {
		e, stdout, stderr := testEnv(nil)
		if code := run(context.Background(), e, args); code != exitUsage || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want a usage error", args, code, stdout, stderr)
		}
	}
}

// TestDidYouMean: a misspelt command, sub-command or flag is a usage error
// that names the nearest ones; a word near nothing gets no guess.
func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stauts"}, `did you mean "status"?`},
		{[]string{"relase", "k", "1"}, `did you mean "release"?`},
		{[]string{"kye", "k"}, `did you mean "key"?`},
		{[]string{"wach"}, `did you mean "watch"?`},
		{[]string{"stat"}, `did you mean "status"?`},
		{[]string{"snapshot", "sav", "f"}, `did you mean "snapshot save"?`},
		{[]string{"members", "lsit"}, `did you mean "members list"?`},
		{[]string{"help", "verfiy"}, `did you mean "verify"?`},
		{[]string{"help", "snapshot", "restroe"}, `did you mean "snapshot restore"?`},
		{[]string{"members", "a"}, `members takes list, add or remove`},
		{[]string{"status", "--endpoint", "a:1"}, `did you mean --endpoints?`},
		{[]string{"acquire", "k", "--hodler", "h"}, `did you mean --holder?`},
		{[]string{"--timout", "1s", "status"}, `did you mean --timeout?`},
		{[]string{"xyzzy"}, `unknown command "xyzzy"`},
		{[]string{"status", "--frobnicate"}, `unknown flag: --frobnicate`},
	} {
		e, stdout, stderr := testEnv(nil)
		code := run(context.Background(), e, tc.args)
		if code != exitUsage || stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
		if !strings.Contains(tc.want, "did you mean") && strings.Contains(stderr.String(), "did you mean") {
			t.Errorf("%q: a guess for a word near nothing: %q", tc.args, stderr)
		}
	}
}

// TestEditDistance: transpositions count as one edit, as people make them.
func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"status", "status", 0}, {"stauts", "status", 1}, {"stat", "status", 2}, {"", "key", 3},
		{"kye", "key", 1}, {"relase", "release", 1}, {"abc", "xyz", 3}, {"ca", "abc", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
