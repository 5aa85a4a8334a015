package api

import (
	"fmt"
	"sync/atomic"

	"github.com/fenced/fenced/cluster"
)

// BackupAuth configures authenticated backups: with a Key, every backup the
// server hands out carries an HMAC-SHA256 under it, and a restore checks the
// HMAC of a backup that carries one; with Require, a restore also refuses
// every backup without a valid HMAC under Key. Every node of a cluster needs
// the same settings: a follower checks a restore before it forwards it, and
// the leader checks it again.
type BackupAuth struct {
	Key     *cluster.BackupKey
	Require bool
}

// backupAuth holds a server's BackupAuth; the zero value is plain backups.
type backupAuth struct{ p atomic.Pointer[BackupAuth] }

// SetBackupAuth sets how the server authenticates backups. Require without
// a Key refuses every restore.
func (s *Server) SetBackupAuth(a BackupAuth) { s.backups.p.Store(&a) }

func (b *backupAuth) get() BackupAuth {
	if a := b.p.Load(); a != nil {
		return *a
	}
	return BackupAuth{}
}

// sign wraps a backup in an authenticated envelope when a key is set.
func (b *backupAuth) sign(data []byte) ([]byte, error) {
	a := b.get()
	if a.Key == nil {
		return data, nil
	}
	return cluster.SignBackup(data, a.Key)
}

// check refuses, before anything changes, a restore of a backup that is not
// authentic enough for the server's settings. The refusal is a bad request:
// retrying the same backup is pointless.
func (b *backupAuth) check(data []byte) error {
	a := b.get()
	if _, _, err := cluster.CheckBackupAuth(data, a.Key, a.Require); err != nil {
		return fmt.Errorf("%w: %w", cluster.ErrBadRequest, err)
	}
	return nil
}
