package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fenced/fenced/client"

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

// backupWriteTimeout ends a backup whose reader took longer than this to
// take one write of it (64 KiB): the node holds the backup's frozen state
// until the backup is sent, and a reader that stopped reading must not
// hold it for ever.
const backupWriteTimeout = 30 * time.Second

// sendBackup answers with a backup, written as it is read (with its size,
// metadata and checksum in the headers), in an authenticated envelope when
// a key is set.
func (s *Server) sendBackup(w http.ResponseWriter, r *http.Request) {
	b, err := s.node.OpenBackup(r.Context(), s.backups.get().Key)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer b.Close()
	hdr, _ := json.Marshal(b.Meta)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(client.BackupMetaHeader, string(hdr))
	w.Header().Set("Content-Length", strconv.FormatInt(b.Size, 10))
	dw := &deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: s.backupWriteTimeout}
	if _, err := b.WriteTo(dw); err != nil {
		s.log.Warn("backup not sent whole", "remote", r.RemoteAddr, "size", b.Size, "error", err)
		// The headers promised bytes that will not come: the connection
		// closes, and the reader sees a short body, never a wrong one.
		panic(http.ErrAbortHandler)
	}
	_ = dw.rc.SetWriteDeadline(time.Time{})
}

// deadlineWriter moves the write deadline to timeout from now before each
// write.
type deadlineWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	if err := d.rc.SetWriteDeadline(time.Now().Add(d.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return 0, err
	}
	return d.w.Write(p)
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
