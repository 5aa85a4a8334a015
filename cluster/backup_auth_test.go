package cluster

import (
	"bytes"
	"errors"
	"testing"
)

func testKey(t *testing.T, fill byte) *BackupKey {
	t.Helper()
	k, err := NewBackupKey(bytes.Repeat([]byte{fill}, MinBackupKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestBackupAuth(t *testing.T) {
	plain := sampleBackup(t)
	key, other := testKey(t, 1), testKey(t, 2)
	signed, err := SignBackup(plain, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SignBackup(signed, key); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("signing twice: %v", err)
	}
	if _, err := NewBackupKey(make([]byte, MinBackupKeyLen-1)); err == nil {
		t.Fatal("short key accepted")
	}
	// The envelope decodes like the plain backup.
	pm, _, _ := DecodeBackup(plain)
	sm, _, err := DecodeBackup(signed)
	if err != nil || sm.SHA256 != pm.SHA256 {
		t.Fatalf("decode of an authenticated backup: %+v %v", sm, err)
	}
	cases := []struct {
		name    string
		data    []byte
		key     *BackupKey
		require bool
		want    error
		auth    BackupAuth
	}{
		{"plain, no key", plain, nil, false, nil, BackupAuth{}},
		{"plain, key, not required", plain, key, false, nil, BackupAuth{}},
		{"plain, required", plain, key, true, ErrBackupUnauthenticated, BackupAuth{}},
		{"signed, right key", signed, key, true, nil, BackupAuth{Authenticated: true, KeyID: key.ID(), Verified: true}},
		{"signed, no key, not required", signed, nil, false, nil, BackupAuth{Authenticated: true, KeyID: key.ID()}},
		{"signed, no key, required", signed, nil, true, ErrBackupUnauthenticated, BackupAuth{Authenticated: true, KeyID: key.ID()}},
		{"signed, other key", signed, other, false, ErrBackupForged, BackupAuth{Authenticated: true, KeyID: key.ID()}},
		{"truncated envelope", signed[:20], key, false, ErrBadBackup, BackupAuth{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inner, a, err := CheckBackupAuth(c.data, c.key, c.require)
			if !errors.Is(err, c.want) || a != c.auth {
				t.Fatalf("auth %+v, err %v; want %+v, %v", a, err, c.auth, c.want)
			}
			if err == nil && !bytes.Equal(inner, plain) {
				t.Fatal("the backup inside is not the plain backup")
			}
		})
	}
	// Any change to an authenticated backup, its SHA-256 recomputed or not,
	// fails the HMAC.
	for i := range signed {
		bad := append([]byte(nil), signed...)
		bad[i] ^= 0x20
		if _, _, err := CheckBackupAuth(bad, key, true); err == nil {
			t.Fatalf("flip at %d accepted", i)
		}
	}
}
