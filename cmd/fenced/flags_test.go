package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/api"
	"github.com/fenced/fenced/cluster"
)

// TestVersionFlag: --version needs no other flag and skips their checks.
func TestVersionFlag(t *testing.T) {
	o, err := parseFlags([]string{"--version", "--peers", "n1=127.0.0.1:1"})
	if err != nil || !o.version {
		t.Fatalf("--version: %+v, %v", o, err)
	}
}

// TestHelpListsEnvironment: --help names the environment variable of every
// flag, as the README says it does.
func TestHelpListsEnvironment(t *testing.T) {
	fs := pflag.NewFlagSet("fenced", pflag.ContinueOnError)
	fs.String("http-addr", "", "")
	fs.String("peer-tls-ca", "", "")
	var b bytes.Buffer
	printEnvUsage(&b, fs)
	for _, want := range []string{"FENCED_HTTP_ADDR", "FENCED_PEER_TLS_CA"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("environment usage %q lacks %s", b.String(), want)
		}
	}
}

// TestWatchWriteTimeoutFlag: the watch write timeout defaults to the API's,
// and a value that would never end a stuck stream is refused.
func TestWatchWriteTimeoutFlag(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || o.watchWriteTimeout != api.DefaultWatchWriteTimeout {
		t.Fatalf("default: %v, %v", o, err)
	}
	if o, err := parseFlags([]string{"--watch-write-timeout", "3s"}); err != nil || o.watchWriteTimeout != 3*time.Second {
		t.Fatalf("3s: %v, %v", o, err)
	}
	for _, bad := range []string{"0", "-1s"} {
		if _, err := parseFlags([]string{"--watch-write-timeout", bad}); err == nil || !strings.Contains(err.Error(), "watch-write-timeout") {
			t.Fatalf("--watch-write-timeout %s: %v", bad, err)
		}
	}
}

// TestVerifyConfirmFlag: verifies rest on a recent quorum contact by
// default; round is the other choice and anything else is refused at
// startup.
func TestVerifyConfirmFlag(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || o.verifyConfirm != cluster.VerifyByContact {
		t.Fatalf("default: %q, %v", o.verifyConfirm, err)
	}
	if o, err := parseFlags([]string{"--verify-confirm", "round"}); err != nil || o.verifyConfirm != cluster.VerifyByRound {
		t.Fatalf("round: %q, %v", o.verifyConfirm, err)
	}
	for _, bad := range []string{"", "lease", "Round"} {
		if _, err := parseFlags([]string{"--verify-confirm", bad}); err == nil || !strings.Contains(err.Error(), "--verify-confirm") {
			t.Fatalf("--verify-confirm %q: %v", bad, err)
		}
	}
}

// TestCORSOriginsFlag: --cors-origins is a list of origins, none by
// default; an entry that is not an origin is refused at startup.
func TestCORSOriginsFlag(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || len(o.cors) != 0 {
		t.Fatalf("default: %v, %v", o.cors, err)
	}
	o, err = parseFlags([]string{"--cors-origins", "https://console.example.com, http://127.0.0.1:8080"})
	if err != nil || strings.Join(o.cors, " ") != "https://console.example.com http://127.0.0.1:8080" {
		t.Fatalf("two origins: %v, %v", o.cors, err)
	}
	if _, err := parseFlags([]string{"--cors-origins", "https://console.example.com/app"}); err == nil || !strings.Contains(err.Error(), "cors-origins") {
		t.Fatalf("an origin with a path: %v", err)
	}
}

// TestUIFlag: the console is served unless --ui=false.
func TestUIFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, true}, {[]string{"--ui=false"}, false}, {[]string{"--ui"}, true}} {
		o, err := parseFlags(tc.args)
		if err != nil || o.ui != tc.want {
			t.Errorf("%v: ui %v, %v; want %v", tc.args, o.ui, err, tc.want)
		}
	}
}
