package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenced/fenced/cluster"
)

// snapshot inspect --backup-key-file verifies a backup's HMAC offline: an
// authentic backup passes, a plain one or one made with another key is
// refused with exit 1; without the key, the claimed key id is shown
// unchecked.
func TestSnapshotInspectChecksHMAC(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret, otherSecret := bytes.Repeat([]byte("k"), 32), bytes.Repeat([]byte("o"), 32)
	keyFile, otherFile := write("backup.key", append(secret, '\n')), write("other.key", otherSecret)
	key, _ := cluster.NewBackupKey(secret)
	other, _ := cluster.NewBackupKey(otherSecret)
	plainData := testBackup(t)
	signedData, err := cluster.SignBackup(plainData, key)
	if err != nil {
		t.Fatal(err)
	}
	forgedData, _ := cluster.SignBackup(plainData, other)
	plain, signed, forged := write("plain", plainData), write("signed", signedData), write("forged", forgedData)

	inspect := func(args ...string) (int, string, string) {
		e, stdout, stderr := testEnv(nil)
		code := run(context.Background(), e, append([]string{"snapshot", "inspect"}, args...))
		return code, stdout.String(), stderr.String()
	}
	if code, out, errs := inspect(signed, "--backup-key-file", keyFile); code != 0 || !strings.Contains(out, "yes, HMAC verified under key "+key.ID()) {
		t.Fatalf("authentic backup: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := inspect(signed); code != 0 || !strings.Contains(out, "not checked") {
		t.Fatalf("authentic backup without the key: exit %d\n%s", code, out)
	}
	if code, out, _ := inspect(plain); code != 0 || !strings.Contains(out, "no (checksum only)") {
		t.Fatalf("plain backup without a key: exit %d\n%s", code, out)
	}
	for name, args := range map[string][]string{
		"plain":     {plain, "--backup-key-file", keyFile},
		"forged":    {forged, "--backup-key-file", keyFile},
		"other key": {signed, "--backup-key-file", otherFile},
	} {
		if code, out, errs := inspect(args...); code != exitErr || out != "" || !strings.Contains(errs, "is not an authentic fenced backup") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, code, out, errs)
		}
	}
	// A key file too short to be a key is a clear error.
	if code, _, errs := inspect(signed, "--backup-key-file", write("short", []byte("short"))); code == 0 || !strings.Contains(errs, "at least 32 bytes") {
		t.Errorf("short key: exit %d, %s", code, errs)
	}
}
