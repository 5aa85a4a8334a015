package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestACLFileFlag: an ACL file needs authentication (without it every
// client is anonymous, and no rule could name it); a malformed file
// refuses to start, naming the file and the line.
func TestACLFileFlag(t *testing.T) {
	dir := t.TempDir()
	good, bad, tokens := filepath.Join(dir, "acl"), filepath.Join(dir, "bad"), filepath.Join(dir, "tokens")
	for path, content := range map[string]string{
		good:   "billing lock,read,verify billing/\n* verify \"\"\n",
		bad:    "billing lock,read,verify billing/\nbob write x/\n",
		tokens: "tok-0123456789abcdef client billing\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := parseFlags([]string{"--acl-file", good}); err == nil || !strings.Contains(err.Error(), "needs authentication") {
		t.Fatalf("--acl-file without authentication: %v", err)
	}
	o, err := parseFlags([]string{"--acl-file", bad, "--auth-tokens", tokens})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadSecurity(&o.sec); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a malformed ACL file: %v; want an error naming the file and line 2", err)
	}
	o, err = parseFlags([]string{"--acl-file", good, "--auth-tokens", tokens})
	if err != nil {
		t.Fatal(err)
	}
	s, err := loadSecurity(&o.sec)
	if err != nil {
		t.Fatal(err)
	}
	if s.apiOptions().ACL == nil || s.credentials().ACLDigest == "" {
		t.Fatalf("the ACL is not in use: %+v", s.credentials())
	}
}
