package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

var snapshotCommand = command{
	name:    "snapshot",
	summary: "save, inspect and restore backups of the cluster's state",
	help: `
A backup is a consistent copy of every key: its holder, the token of its last
grant (its high-water mark) and its state, with a header (cluster id, term,
index, number of keys, highest epoch) and a SHA-256 checksum of the whole.

A restore replaces the state of a cluster with a backup's, in the cluster it
came from or in a new one, and raises the cluster's epoch floor so that every
token granted afterwards is higher than every token the old cluster ever
issued, including those issued after the backup was taken.

A checksum only finds damage: anyone who can write a backup can recompute it.
When fenced runs with --backup-key-file, its backups also carry an
HMAC-SHA256 under that key; give the same key file to these commands
(--backup-key-file) to check it offline, and run fenced with
--require-backup-auth to refuse every other backup.`,
	examples: `
fencectl snapshot save /backups/fenced-$(date +%F).fenced
fencectl snapshot inspect /backups/fenced-2026-11-29.fenced
fencectl snapshot inspect /backups/fenced-2026-11-29.fenced --backup-key-file /etc/fenced/backup.key
fencectl snapshot restore /backups/fenced-2026-11-29.fenced --yes`,
	subs: []command{snapshotSaveCommand, snapshotInspectCommand, snapshotRestoreCommand},
}

var snapshotSaveCommand = command{
	name:     "snapshot save",
	args:     "FILE",
	complete: []string{completeFiles},
	summary:  "write a consistent backup of the cluster to FILE",
	help: `
Takes a backup through any node (the leader makes it, after confirming with a
quorum that it leads, so every grant acknowledged before the command started
is in it), checks its checksum, and writes it to FILE atomically: to a
temporary file in the same directory, flushed to disk, then renamed over
FILE. A failed or interrupted save never leaves a partial FILE.

Prints the backup's metadata: the cluster id, the node that made it, the
Raft term and index, the number of keys and of grants live at the time, the
epoch floor, the highest epoch of any grant, the epoch grants had when the
backup was taken, and the SHA-256 checksum.

With --backup-key-file, the backup must be authenticated under that key
(fenced runs with the same --backup-key-file), or nothing is written.

The whole state travels in one answer: raise --timeout for a very large one.
While it waits, a line on stderr every 5s says so, when stderr is a terminal
or with --progress (never with -o json).`,
	examples: `
fencectl snapshot save backup.fenced
fencectl snapshot save /backups/fenced-$(date +%F-%H%M).fenced -o json`,
	new: func() runner { return &snapshotSaveCmd{} },
}

type snapshotSaveCmd struct {
	keyFile  string
	progress progressMode
}

func (s *snapshotSaveCmd) flags(fs *pflag.FlagSet) {
	backupKeyFlag(fs, &s.keyFile)
	progressFlag(fs, &s.progress)
}

// backupKeyFlag registers --backup-key-file: with it, a backup must carry a
// valid HMAC under the key.
func backupKeyFlag(fs *pflag.FlagSet, dst *string) {
	fs.StringVar(dst, "backup-key-file", "", "file of the backup key fenced authenticates backups with: the backup must carry a valid HMAC under it")
	completeFlag(fs, "backup-key-file", completeFiles)
}

// checkAuth checks a backup's HMAC under the key in keyFile; without a key
// file it only reports what the backup claims.
func checkAuth(data []byte, keyFile string) (cluster.BackupAuth, error) {
	var key *cluster.BackupKey
	if keyFile != "" {
		var err error
		if key, err = cluster.LoadBackupKey(keyFile); err != nil {
			return cluster.BackupAuth{}, fmt.Errorf("--backup-key-file: %w", err)
		}
	}
	_, a, err := cluster.CheckBackupAuth(data, key, key != nil)
	return a, err
}

// backupInfo is the JSON document of snapshot save and snapshot inspect: the
// backup's header with what the file holds.
type backupInfo struct {
	File  string `json:"file"`
	Bytes int    `json:"bytes"`
	cluster.BackupMeta
	// Held counts the grants live when the backup was taken; a restore
	// brings them back as expired.
	Held     int                `json:"held"`
	Checksum string             `json:"checksum"`
	Auth     cluster.BackupAuth `json:"auth"`
	KeyList  []client.KeyInfo   `json:"key_list,omitempty"`
}

func (s *snapshotSaveCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 1 {
		return usageErr("snapshot save", "snapshot save takes one FILE")
	}
	file := args[0]
	if fi, err := os.Stat(file); err == nil && fi.IsDir() {
		return usageErr("snapshot save", fmt.Sprintf("%s is a directory", file))
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	stop := e.startProgress(e.progressWanted(s.progress), func(waited time.Duration) string {
		return fmt.Sprintf("snapshot save: waiting for the backup: %v of --timeout %v", waited, e.g.timeout)
	})
	data, meta, err := e.client().Backup(ctx)
	stop()
	if err != nil {
		return explain(err, subject{}, e)
	}
	// Check what arrived before anything is written: the backup is only
	// worth keeping if it decodes and its checksum matches the one the
	// leader computed.
	dmeta, img, err := cluster.DecodeBackup(data)
	if err != nil {
		return fmt.Errorf("the backup received is damaged, nothing was written: %v", err)
	}
	if meta.SHA256 != "" && meta.SHA256 != dmeta.SHA256 {
		return fmt.Errorf("the backup received does not match the checksum the leader sent (%s, got %s); nothing was written", meta.SHA256, dmeta.SHA256)
	}
	auth, err := checkAuth(data, s.keyFile)
	if err != nil {
		return fmt.Errorf("the backup received is not authentic under the key given, nothing was written: %v", err)
	}
	if err := writeFileAtomic(file, data); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return printBackupInfo(e, describeBackup(file, data, dmeta, img, auth, false))
}

var snapshotInspectCommand = command{
	name:     "snapshot inspect",
	args:     "FILE",
	complete: []string{completeFiles},
	summary:  "check a backup's checksum and show its metadata (offline)",
	help: `
Reads FILE without contacting any node, verifies its SHA-256 checksum and its
structure (every key record is decoded and checked), and prints its metadata
as 'snapshot save' does. With --keys it lists every key in the backup with the
token of its last grant.

With --backup-key-file it also checks the backup's HMAC under that key, and a
backup without one, or with one made with another key or altered since, is
refused. Without it, an authenticated backup shows the id of its key,
unchecked.

Exit 0 when FILE is a sound backup, 1 when it is damaged (checksum mismatch,
truncated, not a backup) or not authentic under the key given: such a backup
must not be restored, and 'snapshot restore' refuses it.`,
	examples: `
fencectl snapshot inspect backup.fenced
fencectl snapshot inspect backup.fenced --keys
fencectl snapshot inspect backup.fenced --backup-key-file /etc/fenced/backup.key
fencectl snapshot inspect backup.fenced -o json | jq .max_epoch`,
	new: func() runner { return &snapshotInspectCmd{} },
}

type snapshotInspectCmd struct {
	keys    bool
	keyFile string
}

func (s *snapshotInspectCmd) flags(fs *pflag.FlagSet) {
	fs.BoolVar(&s.keys, "keys", false, "also list every key in the backup")
	backupKeyFlag(fs, &s.keyFile)
}

func (s *snapshotInspectCmd) run(_ context.Context, e *env, args []string) error {
	if len(args) != 1 {
		return usageErr("snapshot inspect", "snapshot inspect takes one FILE")
	}
	data, meta, img, auth, err := readBackup(args[0], s.keyFile)
	if err != nil {
		return err
	}
	return printBackupInfo(e, describeBackup(args[0], data, meta, img, auth, s.keys))
}

var snapshotRestoreCommand = command{
	name:     "snapshot restore",
	args:     "FILE",
	complete: []string{completeFiles},
	summary:  "replace the cluster's state with a backup's, raising the epoch floor",
	help: `
Replaces the state of the cluster behind --endpoints with the backup in FILE:
in the cluster the backup came from, or in a new one. FILE is checked first;
a damaged backup (or, with --backup-key-file, one not authentic under that
key) is refused before anything is sent. A cluster run with
--require-backup-auth refuses, changing nothing, every backup without a valid
HMAC under its key.

Tokens never go backwards across a restore. A token's epoch is the Raft term
of the grant plus the cluster's epoch floor, and the restore raises the floor,
in the same step that installs the state, above the highest epoch anyone can
attest the old cluster issued:

  - the epoch of the backup and of every grant in it;
  - everything the restored cluster itself issued so far;
  - when the backup comes from another cluster, that cluster may have gone on
    granting, and electing leaders, after the backup was taken: the backup's
    epoch plus a margin (--margin, default 1048576 elections) is attested,
    unless --above-epoch is given;
  - --above-epoch N: the operator attests that the old cluster never issued
    an epoch above N (from its last 'fencectl status', or the highest token
    any fenced resource accepted, shifted right by 32). It replaces the
    margin, so give a true upper bound.

Every new token's epoch is then higher than the attested epoch, which the
command prints. Grants live in the backup come back expired (the old cluster
may have superseded them since); keys granted only after the backup are
gone, but their tokens are still lower than every new one. No grant is made
while the restore is in progress.

A restore changes every key at once: it asks for confirmation on a terminal,
and needs --yes otherwise. While it waits for the cluster, a line on stderr
every 5s says so, when stderr is a terminal or with --progress (never with
-o json).`,
	examples: `
fencectl snapshot restore backup.fenced
fencectl snapshot restore backup.fenced --yes
fencectl snapshot restore backup.fenced --yes --above-epoch 42
fencectl --endpoints 10.0.1.1:7700 snapshot restore backup.fenced --yes -o json`,
	new: func() runner { return &snapshotRestoreCmd{} },
}

type snapshotRestoreCmd struct {
	aboveEpoch uint64
	margin     uint64
	yes        bool
	keyFile    string
	progress   progressMode
}

func (s *snapshotRestoreCmd) flags(fs *pflag.FlagSet) {
	fs.Uint64Var(&s.aboveEpoch, "above-epoch", 0, "the highest epoch the old cluster may have issued, attested by the operator")
	fs.Uint64Var(&s.margin, "margin", 0, fmt.Sprintf("epochs added to a backup of another cluster without --above-epoch (default %d)", cluster.DefaultRestoreMargin))
	fs.BoolVar(&s.yes, "yes", false, "restore without asking for confirmation")
	backupKeyFlag(fs, &s.keyFile)
	progressFlag(fs, &s.progress)
}

// restoreInfo is the JSON document of snapshot restore.
type restoreInfo struct {
	File string `json:"file"`
	cluster.RestoreResult
}

func (s *snapshotRestoreCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 1 {
		return usageErr("snapshot restore", "snapshot restore takes one FILE")
	}
	if s.aboveEpoch > fence.MaxEpoch || s.margin > fence.MaxEpoch {
		return usageErr("snapshot restore", fmt.Sprintf("--above-epoch and --margin must be at most %d", uint64(fence.MaxEpoch)))
	}
	if s.aboveEpoch > 0 && s.margin > 0 {
		return usageErr("snapshot restore", "--margin is only used without --above-epoch: give one of them")
	}
	file := args[0]
	data, meta, img, _, err := readBackup(file, s.keyFile)
	if err != nil {
		return err
	}
	if !s.yes {
		if err := confirmRestore(e, file, meta, img); err != nil {
			return err
		}
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	c := e.client()
	before, _ := leaderStatus(ctx, c)
	stop := e.startProgress(e.progressWanted(s.progress), func(waited time.Duration) string {
		return fmt.Sprintf("snapshot restore: waiting for the restore: %v of --timeout %v", waited, e.g.timeout)
	})
	res, err := c.Restore(ctx, data, s.aboveEpoch, s.margin)
	stop()
	if err != nil {
		return explainRestore(ctx, c, before, err, e)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, restoreInfo{File: file, RestoreResult: *res})
	}
	same := "no (another cluster's backup)"
	if res.SameCluster {
		same = "yes"
	}
	return fields(e.stdout,
		"restored", fmt.Sprintf("%s (cluster %s, index %d, %d keys)", file, res.Meta.ClusterID, res.Meta.Index, res.Meta.Keys),
		"same cluster", same,
		"epoch floor", fmt.Sprintf("%d -> %d", res.OldFloor, res.NewFloor),
		"attested epoch", fmt.Sprintf("%d (every new token's epoch is higher)", res.Attested),
		"grants expired", strconv.Itoa(res.Expired),
	)
}

// confirmRestore asks a person at a terminal to confirm; without a terminal
// it refuses, so a script cannot restore by accident.
func confirmRestore(e *env, file string, meta cluster.BackupMeta, img *fsm.Image) error {
	if e.stdin == nil || e.terminal == nil || !e.terminal() {
		return usageErr("snapshot restore", "refusing to restore without --yes: stdin is not a terminal to confirm on")
	}
	fmt.Fprintf(e.stderr, "Restore %s (cluster %s, index %d, %d keys, %d live grants, taken %s)\n"+
		"into the cluster at %s?\n"+
		"Every key's state is replaced; live grants come back expired.\n"+
		"Type yes to restore: ",
		file, meta.ClusterID, meta.Index, len(img.Keys), countHeld(img), meta.CreatedAt.Format(time.RFC3339), strings.Join(e.g.endpoints, ","))
	line, _ := bufio.NewReader(e.stdin).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return errors.New("restore cancelled: nothing was changed")
	}
	return nil
}

// explainRestore words a failed restore. A refusal of the server changed
// nothing; anything else may have been applied or not, and the epoch floor,
// which only a restore raises, tells.
func explainRestore(ctx context.Context, c *client.Client, before *client.Status, err error, e *env) error {
	var ae *client.Error
	if errors.As(err, &ae) && ae.Code != "outcome_unknown" {
		if errors.Is(err, client.ErrBadRequest) {
			return explainedf(err, "fenced refused the restore, nothing was changed: %s", ae.Message)
		}
		return explainedf(err, "the restore was not applied: %v", err)
	}
	msg := fmt.Sprintf("outcome of the restore unknown (%v)", err)
	if before != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.g.timeout)
		defer cancel()
		if after, serr := leaderStatus(sctx, c); serr == nil {
			if after.EpochFloor > before.EpochFloor {
				msg += fmt.Sprintf("; the epoch floor rose from %d to %d: the restore was applied", before.EpochFloor, after.EpochFloor)
			} else {
				msg += fmt.Sprintf("; the epoch floor is still %d: the restore does not appear applied", after.EpochFloor)
			}
		}
	}
	return explainedf(err, "%s. Check 'fencectl status -o json' (epoch_floor) before restoring again; a second restore is safe, the floor only rises", msg)
}

// readBackup reads and checks a backup file: its checksum and structure,
// and, with a key file, its HMAC under that key.
func readBackup(file, keyFile string) ([]byte, cluster.BackupMeta, *fsm.Image, cluster.BackupAuth, error) {
	var auth cluster.BackupAuth
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, cluster.BackupMeta{}, nil, auth, err
	}
	meta, img, err := cluster.DecodeBackup(data)
	if err != nil {
		return nil, meta, nil, auth, fmt.Errorf("%s is not a sound fenced backup: %v", file, err)
	}
	if auth, err = checkAuth(data, keyFile); err != nil {
		return nil, meta, nil, auth, fmt.Errorf("%s is not an authentic fenced backup: %v", file, err)
	}
	return data, meta, img, auth, nil
}

func describeBackup(file string, data []byte, meta cluster.BackupMeta, img *fsm.Image, auth cluster.BackupAuth, keys bool) backupInfo {
	bi := backupInfo{File: file, Bytes: len(data), BackupMeta: meta, Held: countHeld(img), Checksum: "ok", Auth: auth}
	// The header's numbers are the leader's; the image is what a restore
	// installs, so its own count and highest epoch are the ones to show.
	bi.Keys = len(img.Keys)
	bi.MaxEpoch = max(bi.MaxEpoch, img.MaxEpoch())
	if keys {
		bi.KeyList = make([]client.KeyInfo, 0, len(img.Keys))
		for _, k := range img.Keys {
			bi.KeyList = append(bi.KeyList, client.KeyInfo{Key: k.Key, Holder: k.Holder, Token: k.Token, Epoch: k.Token.Epoch(),
				Seq: k.Token.Seq(), State: k.State.String(), TTL: k.TTL.String(), Index: k.Index})
		}
	}
	return bi
}

func countHeld(img *fsm.Image) int {
	n := 0
	for _, k := range img.Keys {
		if k.State == fsm.Held {
			n++
		}
	}
	return n
}

func printBackupInfo(e *env, bi backupInfo) error {
	if e.jsonOutput() {
		return printJSON(e.stdout, bi)
	}
	if err := fields(e.stdout,
		"file", fmt.Sprintf("%s (%d bytes)", bi.File, bi.Bytes),
		"cluster", bi.ClusterID,
		"taken by", bi.NodeID,
		"taken at", bi.CreatedAt.Format(time.RFC3339),
		"term", strconv.FormatUint(bi.Term, 10),
		"index", strconv.FormatUint(bi.Index, 10),
		"keys", fmt.Sprintf("%d (%d held)", bi.Keys, bi.Held),
		"epoch floor", strconv.FormatUint(bi.Floor, 10),
		"max epoch", strconv.FormatUint(bi.MaxEpoch, 10),
		"epoch", strconv.FormatUint(bi.Epoch, 10),
		"sha256", bi.SHA256,
		"checksum", bi.Checksum,
		"hmac", authText(bi.Auth),
	); err != nil {
		return err
	}
	if bi.KeyList == nil {
		return nil
	}
	fmt.Fprintln(e.stdout)
	t := newTable(e.stdout, "KEY", "HOLDER", "TOKEN", "EPOCH", "SEQ", "STATE", "TTL", "INDEX")
	for _, k := range bi.KeyList {
		t.row(k.Key, k.Holder, k.Token.String(), strconv.FormatUint(k.Epoch, 10), strconv.FormatUint(k.Seq, 10),
			k.State, k.TTL, strconv.FormatUint(k.Index, 10))
	}
	return t.flush()
}

// authText words a backup's authentication for people.
func authText(a cluster.BackupAuth) string {
	switch {
	case a.Verified:
		return "yes, HMAC verified under key " + a.KeyID
	case a.Authenticated:
		return "HMAC under key " + a.KeyID + ", not checked (give --backup-key-file)"
	}
	return "no (checksum only)"
}

// writeFileAtomic writes data to path so that path holds either its old
// content or all of data, also across a crash: a temporary file in the same
// directory is written, flushed to disk and renamed over path, and the
// directory is flushed so the rename itself is durable.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		err = d.Sync()
		_ = d.Close()
	}
	return err
}
