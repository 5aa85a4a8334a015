package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
)

// TestReadAheadFileReadsAsTheFile compares every read through the window
// with the same read of the file, before and after writes.
func TestReadAheadFileReadsAsTheFile(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 3*recoveryWindow+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(filepath.Join(dir, "seg"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := fs.New().OpenWriter(dir, "seg")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	f, err := readAheadFS{fs.New()}.OpenWriter(dir, "seg")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	compare := func(phase string, i int) {
		size := rng.IntN(recoveryWindow / 3)
		if rng.IntN(4) == 0 {
			size = rng.IntN(64)
		}
		off := rng.Int64N(int64(len(data)) + 4096)
		want, got := make([]byte, size), make([]byte, size)
		wn, werr := raw.ReadAt(want, off)
		gn, gerr := f.ReadAt(got, off)
		if wn != gn || !bytes.Equal(want[:wn], got[:gn]) || errors.Is(werr, io.EOF) != errors.Is(gerr, io.EOF) || (werr == nil) != (gerr == nil) {
			t.Fatalf("%s read %d of %d bytes at %d: got %d, %v; the file gives %d, %v (or other bytes)", phase, i, size, off, gn, gerr, wn, werr)
		}
	}
	for i := range 2000 {
		compare("before writes", i)
	}
	// Reads of the window's region after a write must see the write.
	patch := bytes.Repeat([]byte{0xAB}, 4096)
	if _, err := f.ReadAt(make([]byte, 16), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(patch, 100); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	if _, err := f.ReadAt(got, 100); err != nil || !bytes.Equal(got, patch[:16]) {
		t.Fatalf("read after a write: %x, %v; want the written bytes", got, err)
	}
	for i := range 500 {
		compare("after a write", i)
	}
}

// TestWALReopensThroughTheWindow stores entries in small commits, reopens
// the WAL, and reads every entry back, then appends and reopens again.
func TestWALReopensThroughTheWindow(t *testing.T) {
	dir := t.TempDir()
	log := hclog.NewNullLogger()
	next := uint64(1)
	appendN := func(s *walStore, n int) {
		t.Helper()
		for range n {
			e := &raft.Log{Index: next, Term: 1, Data: []byte(fmt.Sprintf("entry %d %s", next, bytes.Repeat([]byte("x"), int(next%200))))}
			if err := s.StoreLog(e); err != nil {
				t.Fatal(err)
			}
			next++
		}
	}
	check := func(s *walStore) {
		t.Helper()
		last, err := s.LastIndex()
		if err != nil || last != next-1 {
			t.Fatalf("last index %d, %v; want %d", last, err, next-1)
		}
		for i := uint64(1); i < next; i++ {
			var e raft.Log
			if err := s.GetLog(i, &e); err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
			if want := fmt.Sprintf("entry %d %s", i, bytes.Repeat([]byte("x"), int(i%200))); string(e.Data) != want {
				t.Fatalf("entry %d: %q", i, e.Data)
			}
		}
	}
	s, err := openWAL(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	appendN(s, 5000)
	s.Close()
	for round := range 2 {
		if s, err = openWAL(dir, log); err != nil {
			t.Fatalf("reopen %d: %v", round, err)
		}
		check(s)
		appendN(s, 3000)
		check(s)
		s.Close()
	}
}

// BenchmarkWALOpenAfterSmallCommits opens a WAL whose open segment holds
// 200,000 entries committed one at a time, as a busy leader's is, with
// raft-wal's own file system and with the read window.
func BenchmarkWALOpenAfterSmallCommits(b *testing.B) {
	dir := b.TempDir()
	filledWAL(b, dir, 200000, 120).Close()
	for _, c := range []struct {
		name string
		open func() (io.Closer, error)
	}{
		{"raft-wal-fs", func() (io.Closer, error) {
			meta := &metadb.BoltMetaDB{}
			w, err := wal.Open(dir, wal.WithMetaStore(meta))
			if err != nil {
				return nil, err
			}
			return &walStore{WAL: w, meta: meta}, nil
		}},
		{"read-window", func() (io.Closer, error) { return openWAL(dir, hclog.NewNullLogger()) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				w, err := c.open()
				if err != nil {
					b.Fatal(err)
				}
				w.Close()
			}
		})
	}
}

// BenchmarkWALGetLog reads back entries of a closed WAL one by one, as a
// new leader applying the log after its snapshot does (ns per entry).
func BenchmarkWALGetLog(b *testing.B) {
	const n = 100000
	s := filledWAL(b, b.TempDir(), n, 200)
	defer s.Close()
	var e raft.Log
	b.ResetTimer()
	for i := range b.N {
		if err := s.GetLog(uint64(i%n)+1, &e); err != nil {
			b.Fatal(err)
		}
	}
}

// filledWAL opens a WAL in dir and stores n entries of size bytes in it, one
// commit each, as a busy leader does.
func filledWAL(b *testing.B, dir string, n uint64, size int) *walStore {
	b.Helper()
	s, err := openWAL(dir, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	data := bytes.Repeat([]byte("k"), size)
	for i := uint64(1); i <= n; i++ {
		if err := s.StoreLog(&raft.Log{Index: i, Term: 1, Data: data}); err != nil {
			b.Fatal(err)
		}
	}
	return s
}
