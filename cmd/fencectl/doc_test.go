package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestCLIDocCoversTheTable: docs/CLI.md has a section for every command of
// the table, lists every global flag, and every exit code fencectl defines.
func TestCLIDocCoversTheTable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "CLI.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, c := range commands {
		names := []string{c.name}
		if len(c.subs) > 0 {
			names = nil
			for _, sc := range c.subs {
				names = append(names, sc.name)
			}
		}
		for _, name := range names {
			if !strings.Contains(doc, "\n### "+name+"\n") {
				t.Errorf("docs/CLI.md has no section ### %s", name)
			}
		}
	}
	var g globals
	g.flagSet().VisitAll(func(f *pflag.Flag) {
		if !regexp.MustCompile("\n\\| [^|\n]*`--" + regexp.QuoteMeta(f.Name) + "`").MatchString(doc) {
			t.Errorf("docs/CLI.md's table of global flags lacks --%s", f.Name)
		}
	})
	for _, code := range []int{exitOK, exitErr, exitUsage, exitRefused, exitLockLost} {
		if !regexp.MustCompile(`\n\| ` + regexp.QuoteMeta(string(rune('0'+code))) + ` \|`).MatchString(doc) {
			t.Errorf("docs/CLI.md's exit codes lack %d", code)
		}
	}
}
