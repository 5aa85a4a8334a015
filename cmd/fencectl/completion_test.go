package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// completionScript is what 'fencectl completion SHELL' prints, written to a
// file of the test's.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	e, stdout, stderr := testEnv(nil)
	if code := run(context.Background(), e, []string{"completion", shell}); code != 0 || stdout.Len() == 0 {
		t.Fatalf("completion %s: exit %d, %d bytes, stderr %q", shell, code, stdout.Len(), stderr)
	}
	file := filepath.Join(t.TempDir(), "fencectl."+shell)
	if err := os.WriteFile(file, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// completionCase is a command line typed up to the cursor and the
// completions a shell must offer there: exactly these, or at least these.
type completionCase struct {
	line  string
	want  []string
	exact bool
}

// completionCases are the cases every shell's completion must pass: command
// names, sub-commands, each command's flags as the table has them, flag
// values and files. dir holds ca.pem, backup.fenced and the directory sub.
func completionCases(dir string) []completionCase {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	cases := []completionCase{
		{"fencectl ", append(names, "help"), true},
		{"fencectl sta", []string{"status"}, true},
		{"fencectl s", []string{"selftest", "signing-keys", "snapshot", "status"}, true},
		{"fencectl --endpoints 127.0.0.1:7700 --timeout 3s sta", []string{"status"}, true},
		{"fencectl snapshot ", []string{"save", "inspect", "restore"}, true},
		{"fencectl snapshot s", []string{"save"}, true},
		{"fencectl status --wa", []string{"--wait"}, true},
		{"fencectl --ver", []string{"--version"}, true},
		{"fencectl -o ", []string{"table", "json"}, true},
		{"fencectl status --output ", []string{"table", "json"}, true},
		{"fencectl keys --state e", []string{"expired"}, true},
		{"fencectl completion ", []string{"bash", "zsh", "fish"}, true},
		{"fencectl help mem", []string{"members"}, true},
		{"fencectl selftest --key ", nil, true},
		{"fencectl --cacert " + dir + "/c", []string{dir + "/ca.pem"}, true},
		{"fencectl key k --key " + dir + "/c", []string{dir + "/ca.pem"}, true},
		{"fencectl snapshot save " + dir + "/b", []string{dir + "/backup.fenced"}, true},
		{"fencectl debug log --data-dir " + dir + "/s", []string{dir + "/sub"}, false},
	}
	// Every command's flags, as parse takes them, straight from the table.
	var leaves []command
	for _, c := range commands {
		if len(c.subs) == 0 {
			leaves = append(leaves, c)
		}
		leaves = append(leaves, c.subs...)
	}
	for _, c := range leaves {
		var g globals
		fs := newFlagSet(c.name)
		c.new().flags(fs)
		fs.AddFlagSet(g.flagSet())
		flags := []string{"--help"}
		fs.VisitAll(func(f *pflag.Flag) { flags = append(flags, "--"+f.Name) })
		cases = append(cases, completionCase{"fencectl " + c.name + " --", flags, true})
	}
	return cases
}

func completionDir(t *testing.T) string {
	dir := t.TempDir()
	for _, f := range []string{"ca.pem", "backup.fenced"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkCompletions compares what a shell offered for each case, got[i], with
// the case.
func checkCompletions(t *testing.T, shell string, cases []completionCase, got [][]string) {
	t.Helper()
	if len(got) != len(cases) {
		t.Fatalf("%s answered %d cases of %d", shell, len(got), len(cases))
	}
	for i, tc := range cases {
		g := slices.Clone(got[i])
		for j := range g {
			g[j] = strings.TrimSuffix(g[j], "/")
		}
		slices.Sort(g)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		ok := slices.Equal(g, want)
		if !tc.exact {
			ok = true
			for _, w := range want {
				ok = ok && slices.Contains(g, w)
			}
		}
		if !ok {
			t.Errorf("%s: %q offers %q, want %q", shell, tc.line, g, want)
		}
	}
}

// TestCompletionBash: the bash script is valid bash (bash -n), registers
// _fencectl for fencectl, and completes every case, in plain bash and under
// bash-completion when it is installed.
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	file := completionScript(t, "bash")
	if out, err := exec.Command(bash, "-n", file).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	dir := completionDir(t)
	cases := completionCases(dir)
	var driver strings.Builder
	fmt.Fprintf(&driver, "source %q || exit 1\ncomplete -p fencectl | grep -q -- '-F _fencectl' || { echo not registered; exit 1; }\n", file)
	for _, tc := range cases {
		fmt.Fprintf(&driver, "COMP_LINE=%q; COMP_POINT=${#COMP_LINE}; read -r -a COMP_WORDS <<<\"$COMP_LINE\"\n", tc.line)
		driver.WriteString(`[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
_fencectl fencectl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}" "--end--"
`)
	}
	for _, withLib := range []bool{false, true} {
		lib := "/usr/share/bash-completion/bash_completion"
		name := "plain bash"
		prelude := ""
		if withLib {
			if _, err := os.Stat(lib); err != nil {
				t.Logf("bash-completion is not installed (%s): completing under it is skipped", lib)
				continue
			}
			name, prelude = "bash-completion", fmt.Sprintf("source %q\n", lib)
		}
		out, err := exec.Command(bash, "-c", prelude+driver.String()).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		checkCompletions(t, name, cases, splitAnswers(string(out), "--end--"))
	}
}

// TestCompletionFish: the fish script parses (fish --no-execute) and fish
// itself completes every case (complete -C).
func TestCompletionFish(t *testing.T) {
	fish, err := exec.LookPath("fish")
	if err != nil {
		t.Skip("no fish")
	}
	file := completionScript(t, "fish")
	if out, err := exec.Command(fish, "--no-execute", file).CombinedOutput(); err != nil {
		t.Fatalf("fish --no-execute: %v\n%s", err, out)
	}
	dir := completionDir(t)
	cases := completionCases(dir)
	var driver strings.Builder
	fmt.Fprintf(&driver, "source %q; or exit 1\n", file)
	for _, tc := range cases {
		fmt.Fprintf(&driver, "complete -C %s | string replace -r '\\t.*' ''; echo -- --end--\n", fishQuote(tc.line))
	}
	cmd := exec.Command(fish, "--no-config", "-c", driver.String())
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fish: %v\n%s", err, out)
	}
	checkCompletions(t, "fish", cases, splitAnswers(string(out), "--end--"))
}

// TestCompletionZsh: the zsh script parses (zsh -n), and its _fencectl
// completes every case in zsh. zsh's completion system needs a terminal,
// so the functions _fencectl calls to offer completions (_describe,
// compadd, _files, compset) are stand-ins that print what they are given.
func TestCompletionZsh(t *testing.T) {
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh")
	}
	file := completionScript(t, "zsh")
	if out, err := exec.Command(zsh, "-n", file).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	dir := completionDir(t)
	cases := completionCases(dir)
	var driver strings.Builder
	driver.WriteString(`compdef() { :; }
compset() { :; }
_describe() { local -a all; all=("${(@P)4}"); print -rl -- ${(M)${all%%:*}:#${words[CURRENT]}*}; }
compadd() { local -a all; all=("${(@P)2}"); print -rl -- ${(M)all:#${words[CURRENT]}*}; }
_files() { if [[ $1 == -/ ]]; then print -rl -- ${words[CURRENT]}*(N/); else print -rl -- ${words[CURRENT]}*(N); fi; }
`)
	fmt.Fprintf(&driver, "source %q || exit 1\n", file)
	for _, tc := range cases {
		fmt.Fprintf(&driver, "line=%s; words=(${(z)line}); [[ $line == *' ' ]] && words+=('')\nCURRENT=${#words}; _fencectl; print -r -- --end--\n", shQuote(tc.line))
	}
	out, err := exec.Command(zsh, "-f", "-c", driver.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("zsh: %v\n%s", err, out)
	}
	checkCompletions(t, "zsh", cases, splitAnswers(string(out), "--end--"))
}

// TestCompletionUsage: completion takes one known shell.
func TestCompletionUsage(t *testing.T) {
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		e, stdout, stderr := testEnv(nil)
		if code := run(context.Background(), e, args); code != exitUsage || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %d bytes, stderr %q", args, code, stdout.Len(), stderr)
		}
	}
}

func splitAnswers(out, end string) [][]string {
	var all [][]string
	var cur []string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case line == end:
			all, cur = append(all, cur), nil
		case line != "":
			cur = append(cur, line)
		}
	}
	return all
}
