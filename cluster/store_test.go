package cluster

import (
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// openTestStore opens dir's log store of the given kind; its metrics stop at
// once, and the caller closes it.
func openTestStore(t *testing.T, dir, kind string, noSync bool) logStore {
	t.Helper()
	s, stop, err := openStore(dir, kind, noSync, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	stop()
	return s
}

// A closed store refuses raft's calls instead of touching a closed database,
// and the WAL still tells raft it is monotonic through the gate.
func TestGatedStore(t *testing.T) {
	for _, kind := range []string{StoreBolt, StoreWAL} {
		t.Run(kind, func(t *testing.T) {
			g := gate(openTestStore(t, t.TempDir(), kind, false))
			if err := g.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
			if err := g.SetUint64([]byte("CurrentTerm"), 1); err != nil {
				t.Fatal(err)
			}
			if got := g.IsMonotonic(); got != (kind == StoreWAL) {
				t.Fatalf("IsMonotonic = %v", got)
			}
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			if err := g.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			var l raft.Log
			if err := g.GetLog(1, &l); !errors.Is(err, errStoreClosed) {
				t.Fatalf("GetLog after Close: %v", err)
			}
			if err := g.StoreLog(&raft.Log{Index: 2, Term: 1}); !errors.Is(err, errStoreClosed) {
				t.Fatalf("StoreLog after Close: %v", err)
			}
			if _, err := g.GetUint64([]byte("CurrentTerm")); !errors.Is(err, errStoreClosed) {
				t.Fatalf("GetUint64 after Close: %v", err)
			}
		})
	}
}

// A data dir whose WAL is open elsewhere is refused at once, not waited for
// forever; a data dir keeps its kind when none is asked for.
func TestStoreKindAndInUse(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreWAL, false)
	if got := StoreKind(dir); got != StoreWAL {
		t.Fatalf("WAL data dir seen as %q", got)
	}
	if _, err := openStoreReadOnly(dir); !errors.Is(err, ErrStoreInUse) {
		t.Fatalf("open of a WAL in use: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := openStoreReadOnly(dir)
	if err != nil {
		t.Fatalf("open of a closed WAL: %v", err)
	}
	r.Close()
	openTestStore(t, dir, StoreAuto, false).Close()
	if got := StoreKind(dir); got != StoreWAL {
		t.Fatalf("WAL data dir reopened as %q", got)
	}

	// A new data dir gets the WAL, or bolt when fsync is off; either is
	// reopened as what it is.
	for _, c := range []struct {
		noSync bool
		want   string
	}{{false, StoreWAL}, {true, StoreBolt}} {
		dir := t.TempDir()
		for i := 0; i < 2; i++ {
			openTestStore(t, dir, StoreAuto, c.noSync).Close()
		}
		if got := StoreKind(dir); got != c.want {
			t.Fatalf("new data dir (no sync %v) got %q, want %q", c.noSync, got, c.want)
		}
	}
}

// Raft clears a log suffix that conflicts with a new leader's entries
// (DeleteRange at the tail). The WAL must still open and read every kept
// entry afterwards: raft-wal before v0.4.1 sealed the tail segment without an
// index block there, and the next start panicked in raft.NewRaft
// (hashicorp/raft-wal#31).
func TestWALTailTruncationSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, StoreWAL, false)
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(9, 10); err != nil { // "clearing log suffix"
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: 9, Term: 2, Type: raft.LogCommand, Data: []byte{9}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir, StoreWAL, false)
	defer s.Close()
	for i := uint64(1); i <= 9; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d after a tail truncation and a restart: %v", i, err)
		}
	}
	if last, err := s.LastIndex(); err != nil || last != 9 {
		t.Fatalf("last index %d, %v; want 9", last, err)
	}
}
