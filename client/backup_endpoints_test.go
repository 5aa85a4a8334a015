package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// backupNode answers backups and restores like a healthy node and counts the
// restores it served.
func backupNode(t *testing.T, restores *atomic.Int32) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, Status{ID: "n2", State: "Leader", Ready: true, LeaderID: "n2"})
	})
	mux.HandleFunc("GET /v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		meta, _ := json.Marshal(BackupMeta{})
		w.Header().Set(BackupMetaHeader, string(meta))
		_, _ = w.Write([]byte("backup"))
	})
	mux.HandleFunc("POST /v1/snapshot/restore", func(w http.ResponseWriter, r *http.Request) {
		restores.Add(1)
		writeJSON(w, http.StatusOK, RestoreResult{})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestBackupAndRestoreLeaveAFrozenNode: a node that never answers, listed
// first, does not hold a backup or a restore until the caller's deadline; a
// restore is sent only to a node that answered just before, so it is never
// left in doubt on a node that was frozen all along.
func TestBackupAndRestoreLeaveAFrozenNode(t *testing.T) {
	var restores atomic.Int32
	c := New([]string{hangingEndpoint(t), backupNode(t, &restores)}, WithAttemptTimeout(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if data, _, err := c.Backup(ctx); err != nil || string(data) != "backup" {
		t.Fatalf("backup with a frozen first endpoint: %q, %v", data, err)
	}
	if _, err := c.Restore(ctx, []byte("backup"), 0, 0); err != nil {
		t.Fatalf("restore with a frozen first endpoint: %v", err)
	}
	if n := restores.Load(); n != 1 {
		t.Fatalf("the healthy node served %d restores, want 1", n)
	}
}
