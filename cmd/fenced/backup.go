package main

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/fenced/fenced/api"
	"github.com/fenced/fenced/cluster"
)

// backupOptions are the flags of authenticated backups.
type backupOptions struct {
	keyFile string
	require bool
}

func (b *backupOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&b.keyFile, "backup-key-file", "", fmt.Sprintf("file holding the secret (at least %d bytes) that authenticates backups with an HMAC-SHA256; the same on every node", cluster.MinBackupKeyLen))
	fs.BoolVar(&b.require, "require-backup-auth", false, "refuse to restore a backup without a valid HMAC under --backup-key-file")
}

func (b *backupOptions) check() error {
	if b.require && b.keyFile == "" {
		return errors.New("--require-backup-auth needs --backup-key-file to check backups with")
	}
	return nil
}

// load reads the key; without --backup-key-file backups stay plain.
func (b *backupOptions) load(log hclog.Logger) (api.BackupAuth, error) {
	if b.keyFile == "" {
		return api.BackupAuth{}, nil
	}
	k, err := cluster.LoadBackupKey(b.keyFile)
	if err != nil {
		return api.BackupAuth{}, fmt.Errorf("--backup-key-file: %w", err)
	}
	log.Info("backups are authenticated", "key_id", k.ID(), "required_for_restore", b.require)
	return api.BackupAuth{Key: k, Require: b.require}, nil
}
