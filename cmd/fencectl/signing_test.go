package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
)

// TestProofOfflineEndToEnd acquires from a real cluster, pins the keys
// its members published (each follower announces its own with its join),
// stops every node, and checks the proof offline: the genuine one is
// allowed, and each hostile variant is refused with exit 3 and its reason.
func TestProofOfflineEndToEnd(t *testing.T) {
	c := startCluster(t, 3)
	ep := endpoints(c)
	key := testKey(t)
	code, stdout, stderr := runCtl(t, nil, "--endpoints", ep, "-o", "json", "acquire", key, "--holder", "alice", "--ttl", "30s")
	if code != exitOK {
		t.Fatalf("acquire: %d %s %s", code, stdout, stderr)
	}
	var g client.Grant
	if err := json.Unmarshal([]byte(stdout), &g); err != nil || g.Proof == "" {
		t.Fatalf("grant %s: %v (a proof is required)", stdout, err)
	}
	keys := filepath.Join(t.TempDir(), "keys.json")
	testutil.Eventually(t, 30*time.Second, func() error {
		code, stdout, stderr := runCtl(t, nil, "--endpoints", ep, "-o", "json", "signing-keys", "list")
		if code != exitOK {
			return fmt.Errorf("signing-keys list: %d %s", code, stderr)
		}
		var ks client.SigningKeys
		if err := json.Unmarshal([]byte(stdout), &ks); err != nil {
			return err
		}
		if len(ks.Keys) != 3 || ks.Cluster == "" {
			return fmt.Errorf("%d keys published, cluster %q", len(ks.Keys), ks.Cluster)
		}
		return os.WriteFile(keys, []byte(stdout), 0o600)
	})
	c.Stop() // every check below is offline

	tok := g.Token.String()
	parts := strings.Split(g.Proof, ".")
	forgedNone := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"fenced-grant+jwt"}`)) + "." + parts[1] + "."
	higher := (g.Token + 1<<32).String()
	swapped := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(mustDecode(t, parts[1]), `"`+tok+`"`, `"`+higher+`"`, 1))) + "." + parts[2]
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		reason string
	}{
		{"genuine", []string{key, tok, g.Proof}, exitOK, ""},
		{"genuine, holder", []string{"--holder", "alice", key, tok, g.Proof}, exitOK, ""},
		{"other holder", []string{"--holder", "mallory", key, tok, g.Proof}, exitRefused, "proof_wrong_holder"},
		{"higher token, genuine proof", []string{key, higher, g.Proof}, exitRefused, "proof_wrong_token"},
		{"higher token swapped into the proof", []string{key, higher, swapped}, exitRefused, "proof_signature"},
		{"other key", []string{key + "-other", tok, g.Proof}, exitRefused, "proof_wrong_key"},
		{"alg none", []string{key, tok, forgedNone}, exitRefused, "proof_algorithm"},
		{"truncated", []string{key, tok, g.Proof[:len(g.Proof)-10]}, exitRefused, "proof_malformed"},
		{"too long", []string{key, tok, g.Proof + strings.Repeat("A", 2048)}, exitRefused, "proof_malformed"},
		{"missing", []string{key, tok, ""}, exitRefused, "proof_missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"verify", "--offline", "--keys", keys}, tc.args...)
			code, stdout, stderr := runCtl(t, nil, args...)
			if code != tc.code || !strings.Contains(stderr, tc.reason) {
				t.Fatalf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, tc.code, stdout, stderr, tc.reason)
			}
		})
	}
	code, stdout, _ = runCtl(t, nil, "-o", "json", "verify", "--offline", "--keys", keys, key, tok, g.Proof)
	var r offlineResult
	if err := json.Unmarshal([]byte(stdout), &r); code != exitOK || err != nil || !r.Allow || r.Kid == "" {
		t.Fatalf("json: %d %s %v", code, stdout, err)
	}
	// Another cluster's keys: the proof names a signer they do not hold.
	other := filepath.Join(t.TempDir(), "other.json")
	os.WriteFile(other, []byte(`{"keys":[],"cluster_id":"elsewhere"}`), 0o600)
	if code, _, stderr := runCtl(t, nil, "verify", "--offline", "--keys", other, key, tok, g.Proof); code != exitRefused || !strings.Contains(stderr, "proof_unknown_signer") {
		t.Fatalf("another cluster's keys: %d %s", code, stderr)
	}
	// A key file that is not a key set refuses, never allows.
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"keys":[{"kty":"RSA"}]}`), 0o600)
	for _, f := range []string{bad, filepath.Join(t.TempDir(), "absent.json")} {
		if code, _, stderr := runCtl(t, nil, "verify", "--offline", "--keys", f, key, tok, g.Proof); code != exitRefused || !strings.Contains(stderr, "keys_unusable") {
			t.Fatalf("%s: %d %s", f, code, stderr)
		}
	}
	if code, _, _ := runCtl(t, nil, "verify", "--offline", key, tok, g.Proof); code != exitUsage {
		t.Fatalf("--offline without --keys: %d, want usage", code)
	}
}

func mustDecode(t *testing.T, s string) string {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
