package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenced/fenced/fence/proof"
)

// TestSigningKeyFile: a node makes its key on first start (0600) and keeps
// it across restarts; a supplied key is used as is; a malformed or missing
// supplied file refuses to start, naming the file.
func TestSigningKeyFile(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir}
	s1, err := loadSigner(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, SigningKeyFileName)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", st.Mode().Perm())
	}
	s2, err := loadSigner(&cfg)
	if err != nil || s2.ID != s1.ID {
		t.Fatalf("the key changed across a restart: %v, %s vs %s", err, s1.ID, s2.ID)
	}

	supplied, _ := proof.NewSigner()
	pemBytes, _ := supplied.MarshalPrivatePEM()
	own := filepath.Join(t.TempDir(), "k.pem")
	if err := os.WriteFile(own, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := loadSigner(&Config{DataDir: dir, SigningKeyFile: own})
	if err != nil || got.ID != supplied.ID {
		t.Fatalf("the supplied key: %v, %s vs %s", err, got.ID, supplied.ID)
	}

	bad := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(bad, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600)
	for _, p := range []string{bad, filepath.Join(t.TempDir(), "missing.pem")} {
		if _, err := loadSigner(&Config{DataDir: dir, SigningKeyFile: p}); err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("%s: %v, want an error naming the file", p, err)
		}
	}
	// A damaged key in the data dir is never replaced silently.
	os.WriteFile(path, []byte("garbage"), 0o600)
	if _, err := loadSigner(&cfg); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a damaged data-dir key: %v", err)
	}
	// And New refuses to start with it.
	if _, err := New(Config{ID: "n1", DataDir: dir, RaftBind: "127.0.0.1:0", Bootstrap: true}); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("New with a damaged key: %v", err)
	}
}
