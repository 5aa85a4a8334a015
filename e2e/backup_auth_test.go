package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/internal/testutil"
)

// TestBackupAuthRequired runs real fenced processes with a backup key and
// --require-backup-auth: their backups carry an HMAC that fencectl verifies
// offline with the same key file; a backup without a valid HMAC (a plain one,
// whose SHA-256 anyone can recompute, or one made with another key) is
// refused by the cluster, through any node, and changes nothing; the
// authentic backup restores.
func TestBackupAuthRequired(t *testing.T) {
	dir := t.TempDir()
	secret := bytes.Repeat([]byte("0123456789abcdef"), 3)
	keyFile := filepath.Join(dir, "backup.key")
	if err := os.WriteFile(keyFile, append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startOpsCluster(t, 3, "--backup-key-file", keyFile, "--require-backup-auth")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eps := c.Endpoints()
	cl := client.New(eps)
	if _, err := cl.Acquire(ctx, client.AcquireRequest{Key: "auth/k", Holder: "h", TTL: "1m"}); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(dir, "cluster.fenced")
	if code, stdout, stderr := fencectl(t, eps, "snapshot", "save", file, "--backup-key-file", keyFile); code != 0 || !strings.Contains(stdout, "HMAC verified") {
		t.Fatalf("snapshot save: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := fencectl(t, nil, "snapshot", "inspect", file, "--backup-key-file", keyFile); code != 0 || !strings.Contains(stdout, "HMAC verified") {
		t.Fatalf("snapshot inspect: exit %d\n%s%s", code, stdout, stderr)
	}
	authentic, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	key, err := cluster.NewBackupKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := cluster.CheckBackupAuth(authentic, key, true)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := cluster.NewBackupKey(bytes.Repeat([]byte("x"), 32))
	otherSigned, _ := cluster.SignBackup(plain, otherKey)

	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"plain": plain, "another key": otherSigned} {
		bad := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(bad, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// fencectl without the key sends it; the cluster refuses it.
		for _, ep := range eps {
			code, _, stderr := fencectl(t, []string{ep}, "snapshot", "restore", bad, "--yes")
			if code != 1 || !strings.Contains(stderr, "nothing was changed") || !strings.Contains(stderr, "backup") {
				t.Fatalf("%s backup through %s: exit %d: %s", name, ep, code, stderr)
			}
		}
		// With the key, fencectl refuses it before sending anything.
		if code, _, stderr := fencectl(t, eps, "snapshot", "restore", bad, "--yes", "--backup-key-file", keyFile); code != 1 ||
			!strings.Contains(stderr, "not an authentic fenced backup") {
			t.Fatalf("%s backup with the key: exit %d: %s", name, code, stderr)
		}
	}
	if after, err := cl.Status(ctx); err != nil || after.EpochFloor != st.EpochFloor {
		t.Fatalf("refused restores moved the epoch floor %d -> %+v (%v)", st.EpochFloor, after, err)
	}
	// A restore is sent to one node and not retried: wait until the first
	// endpoint can forward a write to the leader.
	first := client.New(eps[:1])
	testutil.Eventually(t, 30*time.Second, func() error {
		_, err := first.Acquire(ctx, client.AcquireRequest{Key: "auth/probe", Holder: "probe", TTL: "1s"})
		return err
	})
	if code, stdout, stderr := fencectl(t, eps, "snapshot", "restore", file, "--yes", "--backup-key-file", keyFile); code != 0 {
		t.Fatalf("authentic restore: exit %d\n%s%s", code, stdout, stderr)
	}
}
