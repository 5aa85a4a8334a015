package backend

import (
	"strings"
	"testing"
)

func TestKnownFlags(t *testing.T) {
	help := `Flags:
      --dev[=true|false]                    run a single-node cluster
      --election-timeout duration           Raft election timeout (default 1s)
      --snapshot-threshold uint             log entries between snapshots (default 8192)
      --snapshot-interval duration          how often to check whether to snapshot (default 30s)
`
	kept, dropped := KnownFlags(help, []string{"--election-timeout", "500ms", "--snapshot", "1", "--trailing-logs", "64",
		"--snapshot-threshold=32", "--dev", "--snapshot-interval", "1s"})
	if got := strings.Join(kept, " "); got != "--election-timeout 500ms --snapshot-threshold=32 --dev --snapshot-interval 1s" {
		t.Fatalf("kept %q", got)
	}
	if got := strings.Join(dropped, " "); got != "--snapshot --trailing-logs" {
		t.Fatalf("dropped %q", got)
	}
	// No help at all (fenced did not run): pass everything.
	if kept, dropped := KnownFlags("", []string{"--x", "1"}); len(kept) != 2 || dropped != nil {
		t.Fatalf("kept %v dropped %v", kept, dropped)
	}
}

func TestComposeOverride(t *testing.T) {
	y := composeOverride([]string{"n1", "n2"}, []string{"--log-level", "debug", "--x", `a"b`})
	for _, want := range []string{
		"services:\n  fenced1:\n    restart: \"no\"\n    command: [\"--log-level\",\"debug\",\"--x\",\"a\\\"b\"]\n",
		"  fenced2:\n    restart: \"no\"\n",
	} {
		if !strings.Contains(y, want) {
			t.Fatalf("override lacks %q:\n%s", want, y)
		}
	}
}
