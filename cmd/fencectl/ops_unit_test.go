package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// TestOpsUsageErrors: wrong usage of the operations commands exits 2 with one
// "fencectl:" line and a pointer to the help, before any request is made.
func TestOpsUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"members", "bogus"},
		{"members", "-o", "json", "list"},
		{"members", "list", "extra"},
		{"members", "add", "n4"},
		{"members", "add", "n4", "127.0.0.1"},
		{"members", "add", "n4", "http://127.0.0.1:7701"},
		{"members", "add", "n4", "127.0.0.1:0"},
		{"members", "add", "n 4", "127.0.0.1:7701"},
		{"members", "add", "n4", "127.0.0.1:7701", "--http", "127.0.0.1"},
		{"members", "remove"},
		{"members", "remove", "a", "b"},
		{"leader", "transfer", "a", "b"},
		{"leader", "elect"},
		{"snapshot", "save"},
		{"snapshot", "inspect", "a", "b"},
		{"snapshot", "restore"},
		{"snapshot", "restore", "f", "--above-epoch", "1", "--margin", "2"},
		{"snapshot", "restore", "f", "--above-epoch", "4294967296"},
		{"debug", "log"},
		{"acquire", "k", "--lock-delay", "6m"},
		{"acquire", "k", "--lock-delay", "-1s"},
		{"help", "members", "bogus"},
		{"help", "members", "add", "x"},
	} {
		e, stdout, stderr := testEnv(nil)
		code := run(context.Background(), e, args)
		if code != exitUsage || stdout.Len() != 0 || !strings.HasPrefix(stderr.String(), "fencectl: ") ||
			!strings.Contains(stderr.String(), "Run 'fencectl help") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	// A group without a command: its help, on stderr, and exit 2.
	e, stdout, stderr := testEnv(nil)
	if code := run(context.Background(), e, []string{"snapshot"}); code != exitUsage || stdout.Len() != 0 ||
		!strings.Contains(stderr.String(), "snapshot restore FILE") {
		t.Errorf("snapshot: exit %d, stderr %q", code, stderr)
	}
}

// TestGroupHelp: every command of a group has its help, asked both ways, and
// the group's help lists them.
func TestGroupHelp(t *testing.T) {
	for _, c := range commands {
		for _, sc := range c.subs {
			word := strings.TrimPrefix(sc.name, c.name+" ")
			for _, args := range [][]string{{"help", c.name, word}, {c.name, word, "--help"}, {c.name, word, "-h"}} {
				e, stdout, _ := testEnv(nil)
				if code := run(context.Background(), e, args); code != 0 {
					t.Fatalf("%q: exit %d", args, code)
				}
				for _, want := range []string{"Usage:\n  fencectl " + sc.name, "Global flags:", "Examples:\n  fencectl " + sc.name} {
					if !strings.Contains(stdout.String(), want) {
						t.Errorf("%q: help lacks %q:\n%s", args, want, stdout)
					}
				}
			}
			e, stdout, _ := testEnv(nil)
			if code := run(context.Background(), e, []string{c.name, "--help"}); code != 0 || !strings.Contains(stdout.String(), "\n  "+sc.name) {
				t.Errorf("%s --help: exit %d, does not list %s:\n%s", c.name, code, sc.name, stdout)
			}
		}
	}
}

// testBackup builds a backup file the way fenced lays it out (see
// cluster/backup.go): magic, header length, JSON header, snapshot, SHA-256.
func testBackup(t *testing.T) []byte {
	t.Helper()
	img := &fsm.Image{Applied: 9, ClusterID: "c0ffee", Members: map[string]string{"n1": "127.0.0.1:7700"}, Keys: []fsm.KeyState{
		{Key: "db", Holder: "alice", Token: fence.Token(2<<32 | 3), TTL: 10 * time.Second, State: fsm.Held, Index: 8},
		{Key: "job", Holder: "bob", Token: fence.Token(2<<32 | 1), TTL: time.Minute, State: fsm.Released, Index: 5},
	}}
	var snap bytes.Buffer
	if err := img.Encode(&snap); err != nil {
		t.Fatal(err)
	}
	hdr, _ := json.Marshal(cluster.BackupMeta{ClusterID: "c0ffee", NodeID: "n1", Term: 2, Index: 9, Keys: 2, MaxEpoch: 2, Epoch: 2,
		CreatedAt: time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)})
	var b bytes.Buffer
	b.WriteString("FENCEDB1")
	_ = binary.Write(&b, binary.BigEndian, uint32(len(hdr)))
	b.Write(hdr)
	b.Write(snap.Bytes())
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:])
	if _, _, err := cluster.DecodeBackup(b.Bytes()); err != nil {
		t.Fatalf("the test backup does not decode: %v", err)
	}
	return b.Bytes()
}

// TestSnapshotInspect shows a sound backup's metadata and keys, and refuses
// damaged ones with exit 1.
func TestSnapshotInspect(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.fenced")
	data := testBackup(t)
	if err := os.WriteFile(good, data, 0o600); err != nil {
		t.Fatal(err)
	}
	e, stdout, stderr := testEnv(nil)
	if code := run(context.Background(), e, []string{"snapshot", "inspect", good, "--keys"}); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"cluster:      c0ffee", "keys:         2 (1 held)", "max epoch:    2", "checksum:     ok",
		"db   alice   8589934595  2      3    held", "job  bob     8589934593  2      1    released"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("inspect lacks %q:\n%s", want, stdout)
		}
	}
	e, stdout, _ = testEnv(nil)
	if code := run(context.Background(), e, []string{"snapshot", "inspect", good, "-o", "json"}); code != 0 {
		t.Fatalf("json: exit %d", code)
	}
	var bi backupInfo
	if err := json.Unmarshal(stdout.Bytes(), &bi); err != nil || bi.Keys != 2 || bi.Held != 1 || bi.ClusterID != "c0ffee" ||
		bi.Bytes != len(data) || len(bi.SHA256) != 64 || bi.Checksum != "ok" {
		t.Fatalf("inspect json: %+v %v\n%s", bi, err, stdout)
	}

	flipped := append([]byte(nil), data...)
	flipped[40] ^= 1
	for name, bad := range map[string][]byte{"flipped": flipped, "truncated": data[:len(data)-1], "empty": nil, "other": []byte("PK\x03\x04 not a backup at all, but long enough to be read")} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		e, stdout, stderr := testEnv(nil)
		if code := run(context.Background(), e, []string{"snapshot", "inspect", path}); code != exitErr || stdout.Len() != 0 ||
			!strings.Contains(stderr.String(), "is not a sound fenced backup") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, code, stdout, stderr)
		}
	}
}

// restoreServer answers restores and status like a leader, and counts the
// restores it received.
type restoreServer struct {
	*httptest.Server
	mu       sync.Mutex
	restores []string // query strings
}

func newRestoreServer(t *testing.T) *restoreServer {
	t.Helper()
	rs := &restoreServer{}
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/cluster":
			_ = json.NewEncoder(w).Encode(client.Status{ID: "n1", LeaderID: "n1", Ready: true, Term: 3, EpochFloor: 0})
		case "/v1/snapshot/restore":
			body, _ := io.ReadAll(r.Body)
			meta, _, err := cluster.DecodeBackup(body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(client.ErrorResponse{Code: "bad_request", Message: err.Error()})
				return
			}
			rs.mu.Lock()
			rs.restores = append(rs.restores, r.URL.RawQuery)
			rs.mu.Unlock()
			_ = json.NewEncoder(w).Encode(cluster.RestoreResult{Meta: meta, SameCluster: false, OldFloor: 0, NewFloor: 1<<20 + 2, Attested: 1<<20 + 2, Expired: 1})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(rs.Close)
	return rs
}

func (rs *restoreServer) count() int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.restores)
}

// TestSnapshotRestoreConfirmation: without --yes a restore needs a "yes"
// typed on a terminal; without a terminal it is refused, and a damaged file
// is never sent.
func TestSnapshotRestoreConfirmation(t *testing.T) {
	rs := newRestoreServer(t)
	file := filepath.Join(t.TempDir(), "b.fenced")
	if err := os.WriteFile(file, testBackup(t), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"FENCE_ENDPOINTS": rs.URL, "FENCE_TIMEOUT": "2s"}
	restore := func(stdin string, terminal bool, args ...string) (int, string, string) {
		e, stdout, stderr := testEnv(vars)
		e.stdin, e.terminal = strings.NewReader(stdin), func() bool { return terminal }
		code := run(context.Background(), e, append([]string{"snapshot", "restore", file}, args...))
		return code, stdout.String(), stderr.String()
	}

	if code, _, stderr := restore("yes\n", false); code != exitUsage || !strings.Contains(stderr, "--yes") {
		t.Fatalf("no terminal: exit %d: %s", code, stderr)
	}
	if code, _, stderr := restore("no\n", true); code != exitErr || !strings.Contains(stderr, "restore cancelled") ||
		!strings.Contains(stderr, "Type yes to restore") {
		t.Fatalf("answered no: exit %d: %s", code, stderr)
	}
	if code, _, stderr := restore("", true); code != exitErr || !strings.Contains(stderr, "restore cancelled") {
		t.Fatalf("end of input: exit %d: %s", code, stderr)
	}
	if rs.count() != 0 {
		t.Fatalf("%d restores sent without confirmation", rs.count())
	}
	code, stdout, stderr := restore("yes\n", true)
	if code != 0 || rs.count() != 1 || !strings.Contains(stdout, "epoch floor:     0 -> 1048578") ||
		!strings.Contains(stdout, "same cluster:    no") || !strings.Contains(stdout, "grants expired:  1") {
		t.Fatalf("answered yes: exit %d, %d restores\nstdout: %s\nstderr: %s", code, rs.count(), stdout, stderr)
	}
	code, stdout, _ = restore("", false, "--yes", "--above-epoch", "42", "-o", "json")
	var ri restoreInfo
	if err := json.Unmarshal([]byte(stdout), &ri); code != 0 || err != nil || ri.File != file || ri.Meta.ClusterID != "c0ffee" || ri.NewFloor != 1<<20+2 {
		t.Fatalf("--yes -o json: exit %d %+v %v\n%s", code, ri, err, stdout)
	}
	if q := rs.restores[1]; q != "above_epoch=42" {
		t.Fatalf("query %q", q)
	}

	bad := filepath.Join(t.TempDir(), "bad.fenced")
	data := testBackup(t)
	if err := os.WriteFile(bad, data[:len(data)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	e, _, stderr2 := testEnv(vars)
	if code := run(context.Background(), e, []string{"snapshot", "restore", bad, "--yes"}); code != exitErr ||
		!strings.Contains(stderr2.String(), "is not a sound fenced backup") || rs.count() != 2 {
		t.Fatalf("damaged: exit %d, %d restores: %s", code, rs.count(), stderr2)
	}
}

// TestWriteFileAtomic: the file is created or replaced whole, and no
// temporary file is left behind.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "backup.fenced")
	for _, content := range []string{"first", "second, longer"} {
		if err := writeFileAtomic(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q %v, want %q", got, err, content)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
	if err := writeFileAtomic(filepath.Join(dir, "missing", "x"), []byte("x")); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// TestLockDelayMessage: a refusal because of a lock-delay says when to retry.
func TestLockDelayMessage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req client.AcquireRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		if req.LockDelay != "15s" {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(client.ErrorResponse{Code: "bad_request", Message: "lock_delay " + req.LockDelay})
			return
		}
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(client.ErrorResponse{Code: "lock_delay", Message: `key "db" is in its lock-delay`, RetryAfter: "14.2s"})
	}))
	defer srv.Close()
	e, stdout, stderr := testEnv(map[string]string{"FENCE_ENDPOINTS": srv.URL})
	code := run(context.Background(), e, []string{"acquire", "db", "--holder", "bob", "--lock-delay", "15s"})
	if code != exitErr || stdout.Len() != 0 || stderr.String() !=
		"fencectl: key db is in its lock-delay: its last grant expired without a release, and it is kept from new holders for a while; retry after 14.2s\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
