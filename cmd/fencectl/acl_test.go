package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
)

// TestACLCheckOfAFile: fencectl acl check --file judges a file locally and
// names the rule that decides, with the verify exit codes (0 allow, 3
// refuse); a right that does not exist is a usage error.
func TestACLCheckOfAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(path, []byte("billing lock,read billing/\n* verify \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"acl", "check", "billing", "lock", "billing/db", "--file", path}, exitOK, `rule (line 1): billing lock,read "billing/"`},
		{[]string{"acl", "check", "bob", "verify", "billing/db", "--file", path}, exitOK, `rule (line 2): * verify ""`},
		{[]string{"acl", "check", "bob", "read", "billing/db", "--file", path}, exitRefused, "REFUSE: bob may read"},
		{[]string{"acl", "check", "bob", "write", "billing/db", "--file", path}, exitUsage, ""},
		{[]string{"acl", "check", "bob", "read", "--file", path}, exitUsage, ""},
	} {
		e, stdout, stderr := testEnv(nil)
		code := run(context.Background(), e, tc.args)
		if code != tc.code || !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, stdout, stderr, tc.code, tc.want)
		}
	}
}

// TestStatusFlagsADifferentACL: a node whose key ACL differs from the one
// another node loaded later is flagged, like one whose tokens differ.
func TestStatusFlagsADifferentACL(t *testing.T) {
	old, now := time.Unix(1000, 0), time.Unix(2000, 0)
	ms := []memberHealth{
		{ID: "n1", Status: &client.Status{Credentials: &client.CredentialStatus{ACLDigest: "aaaa", LoadedAt: now}}},
		{ID: "n2", Status: &client.Status{Credentials: &client.CredentialStatus{ACLDigest: "bbbb", LoadedAt: old}}},
		{ID: "n3", Status: &client.Status{Credentials: &client.CredentialStatus{LoadedAt: old}}},
		{ID: "n4", Status: &client.Status{Credentials: &client.CredentialStatus{ACLDigest: "aaaa", LoadedAt: old}}},
	}
	markStaleCredentials(ms)
	for i, want := range []bool{false, true, true, false} {
		if ms[i].CredentialsStale != want || want && !strings.Contains(ms[i].CredentialsNote, "key ACL") {
			t.Errorf("%s: stale %v (%s), want %v", ms[i].ID, ms[i].CredentialsStale, ms[i].CredentialsNote, want)
		}
	}
}

// TestStatusFlagsMixedAuthentication: a member that authenticates nobody
// while the others do (a rollout half done) is flagged, and the other way.
func TestStatusFlagsMixedAuthentication(t *testing.T) {
	for _, tc := range []struct {
		auth []string
		want []bool
	}{
		{[]string{"on", "on", "off"}, []bool{false, false, true}},
		{[]string{"off", "off", "on"}, []bool{false, false, true}},
		{[]string{"on", "off"}, []bool{false, true}},
		{[]string{"on", "on", "on"}, []bool{false, false, false}},
	} {
		var ms []memberHealth
		for i, a := range tc.auth {
			ms = append(ms, memberHealth{ID: fmt.Sprintf("n%d", i+1), Status: &client.Status{Auth: a}})
		}
		markMixedAuth(ms)
		for i, want := range tc.want {
			if ms[i].CredentialsStale != want || want && !strings.Contains(ms[i].CredentialsNote, "authentication is "+tc.auth[i]) {
				t.Errorf("%v: %s flagged %v (%s), want %v", tc.auth, ms[i].ID, ms[i].CredentialsStale, ms[i].CredentialsNote, want)
			}
		}
	}
}
