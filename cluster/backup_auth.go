package cluster

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// An authenticated backup is a plain backup in an envelope: a magic, the
// plain backup unchanged (its own SHA-256 still checks it without the key),
// the id of the key, and an HMAC-SHA256 under that key of everything before
// it. The magic differs from a plain backup's, so neither can be taken for
// the other, and a version of fenced that knows no envelope refuses it.
const (
	backupAuthMagic = "FENCEDA1"
	backupKeyIDLen  = 8
	backupAuthTail  = backupKeyIDLen + sha256.Size
	// MinBackupKeyLen is the shortest backup key accepted: 256 bits.
	MinBackupKeyLen = 32
)

var (
	// ErrBackupUnauthenticated: a backup without an HMAC where one is
	// required.
	ErrBackupUnauthenticated = errors.New("backup is not authenticated")
	// ErrBackupForged: a backup whose HMAC does not verify under the key
	// given: made with another key, or altered after it was made.
	ErrBackupForged = errors.New("backup authentication failed")
)

// BackupKey is the secret that authenticates backups. Every node of a
// cluster and every fencectl that checks its backups holds the same one.
type BackupKey struct {
	secret []byte
	id     [backupKeyIDLen]byte
}

// NewBackupKey returns a key from a secret of at least MinBackupKeyLen bytes.
func NewBackupKey(secret []byte) (*BackupKey, error) {
	if len(secret) < MinBackupKeyLen {
		return nil, fmt.Errorf("a backup key needs at least %d bytes, got %d", MinBackupKeyLen, len(secret))
	}
	k := &BackupKey{secret: append([]byte(nil), secret...)}
	// The id names the key without revealing it: an HMAC of a fixed label.
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte("fenced backup key id"))
	copy(k.id[:], m.Sum(nil))
	return k, nil
}

// LoadBackupKey reads a key file: its bytes, without a trailing newline
// (a file written with `head -c 32 /dev/urandom | base64 > FILE` works).
func LoadBackupKey(path string) (*BackupKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := NewBackupKey(bytes.TrimRight(b, "\r\n"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ID returns the key's public id, in hex.
func (k *BackupKey) ID() string { return hex.EncodeToString(k.id[:]) }

func (k *BackupKey) mac(b []byte) []byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write(b)
	return m.Sum(nil)
}

// SignBackup wraps a plain backup in an authenticated envelope under k.
func SignBackup(plain []byte, k *BackupKey) ([]byte, error) {
	if bytes.HasPrefix(plain, []byte(backupAuthMagic)) || !bytes.HasPrefix(plain, []byte(backupMagic)) {
		return nil, fmt.Errorf("%w: not a plain fenced backup", ErrBadBackup)
	}
	out := make([]byte, 0, len(backupAuthMagic)+len(plain)+backupAuthTail)
	out = append(out, backupAuthMagic...)
	out = append(out, plain...)
	out = append(out, k.id[:]...)
	return append(out, k.mac(out)...), nil
}

// BackupAuth says how a backup is authenticated.
type BackupAuth struct {
	// Authenticated is true when the backup carries an HMAC.
	Authenticated bool `json:"authenticated"`
	// KeyID is the id of the key that HMAC claims to be made with.
	KeyID string `json:"key_id,omitempty"`
	// Verified is true when the HMAC was checked, and held, under a key.
	Verified bool `json:"verified"`
}

// unwrap splits an authenticated envelope; plain backups come back as they
// are, with ok false.
func unwrap(data []byte) (plain, keyID, sum []byte, ok bool, err error) {
	if !bytes.HasPrefix(data, []byte(backupAuthMagic)) {
		return data, nil, nil, false, nil
	}
	if len(data) < len(backupAuthMagic)+backupAuthTail {
		return nil, nil, nil, true, fmt.Errorf("%w: truncated authenticated backup", ErrBadBackup)
	}
	tail := data[len(data)-backupAuthTail:]
	return data[len(backupAuthMagic) : len(data)-backupAuthTail], tail[:backupKeyIDLen], tail[backupKeyIDLen:], true, nil
}

// CheckBackupAuth checks a backup's authenticity. With a key, an HMAC that
// does not verify is ErrBackupForged; with require, a backup without one is
// ErrBackupUnauthenticated (and so is every backup when there is no key to
// check it with). It returns the plain backup inside.
func CheckBackupAuth(data []byte, k *BackupKey, require bool) ([]byte, BackupAuth, error) {
	plain, keyID, sum, authed, err := unwrap(data)
	if err != nil {
		return nil, BackupAuth{}, err
	}
	a := BackupAuth{Authenticated: authed}
	if authed {
		a.KeyID = hex.EncodeToString(keyID)
	}
	switch {
	case authed && k != nil:
		if !hmac.Equal(k.mac(data[:len(data)-sha256.Size]), sum) {
			if a.KeyID != k.ID() {
				return nil, a, fmt.Errorf("%w: made with key %s, not with key %s", ErrBackupForged, a.KeyID, k.ID())
			}
			return nil, a, fmt.Errorf("%w: the HMAC does not match: the backup was altered", ErrBackupForged)
		}
		a.Verified = true
	case require && !authed:
		return nil, a, fmt.Errorf("%w: authenticated backups are required", ErrBackupUnauthenticated)
	case require:
		return nil, a, fmt.Errorf("%w: no backup key to check it with", ErrBackupUnauthenticated)
	}
	return plain, a, nil
}
