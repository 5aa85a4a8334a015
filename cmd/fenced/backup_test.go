package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestBackupFlags(t *testing.T) {
	if _, err := parseFlags([]string{"--require-backup-auth"}); err == nil || !strings.Contains(err.Error(), "--backup-key-file") {
		t.Fatalf("--require-backup-auth without a key: %v", err)
	}
	dir := t.TempDir()
	short, good := filepath.Join(dir, "short"), filepath.Join(dir, "good")
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte(strings.Repeat("s", 44)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--backup-key-file", short})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.backup.load(hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "at least 32 bytes") {
		t.Fatalf("short key: %v", err)
	}
	o, err = parseFlags([]string{"--backup-key-file", good, "--require-backup-auth"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := o.backup.load(hclog.NewNullLogger())
	if err != nil || a.Key == nil || !a.Require {
		t.Fatalf("key and require: %+v %v", a, err)
	}
	if o, err := parseFlags(nil); err != nil {
		t.Fatal(err)
	} else if a, err := o.backup.load(hclog.NewNullLogger()); err != nil || a.Key != nil || a.Require {
		t.Fatalf("default: %+v %v", a, err)
	}
}
