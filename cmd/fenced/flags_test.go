package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
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
