package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"reflect"
	"runtime"
	"testing"
	"testing/iotest"
	"time"
)

// readers are the ways a restore's reader may hand out the snapshot: all at
// once, a byte a read, half of what is asked, the end with the last bytes.
var readers = map[string]func(io.Reader) io.Reader{
	"whole":    func(r io.Reader) io.Reader { return r },
	"one-byte": iotest.OneByteReader,
	"half":     iotest.HalfReader,
	"data-err": iotest.DataErrReader,
}

// restoreThrough restores b into f through the reader wrap makes, with the
// stream's window starting at window bytes.
func restoreThrough(f *FSM, b []byte, wrap func(io.Reader) io.Reader, window int) error {
	defer func(w int) { streamWindow = w }(streamWindow)
	streamWindow = window
	return f.Restore(io.NopCloser(wrap(bytes.NewReader(b))))
}

// A restore reads the snapshot as its reader hands it out, in pieces of any
// size, through a window of any first size (one that must grow for the 70
// KB holder of unusual's state), to the same state.
func TestRestoreStreamsThroughAnyReads(t *testing.T) {
	c := unusual(t)
	want := c.f.Image().sort()
	b := imageBytes(t, c.f)
	for name, wrap := range readers {
		for _, window := range []int{1, 7, 4096, 64 << 10} {
			t.Run(fmt.Sprintf("%s/%d", name, window), func(t *testing.T) {
				g := New(Config{})
				if err := restoreThrough(g, b, wrap, window); err != nil {
					t.Fatal(err)
				}
				if got := g.Image().sort(); !reflect.DeepEqual(got, want) {
					t.Fatalf("restored state differs:\n%+v\n%+v", got, want)
				}
			})
		}
	}
}

// maxReader records the largest buffer a reader was asked to fill.
type maxReader struct {
	r   io.Reader
	max int
}

func (m *maxReader) Read(p []byte) (int, error) {
	m.max = max(m.max, len(p))
	return m.r.Read(p)
}

// A restore never holds the snapshot whole: it asks its reader for no more
// than its window at a time, however large the snapshot. (Reading it all
// first: "a restore of 8.0 MB asked for 2.9 MB at once".)
func TestRestoreDoesNotHoldTheSnapshot(t *testing.T) {
	f := New(Config{})
	fill(f, 100_000)
	b := imageBytes(t, f)
	r := &maxReader{r: bytes.NewReader(b)}
	g := New(Config{})
	if err := g.Restore(io.NopCloser(r)); err != nil {
		t.Fatal(err)
	}
	if g.Len() != f.Len() {
		t.Fatalf("restored %d keys of %d", g.Len(), f.Len())
	}
	if r.max > 2*streamWindow || r.max >= len(b)/4 {
		t.Fatalf("a restore of %.1f MB asked for %.1f MB at once", float64(len(b))/1e6, float64(r.max)/1e6)
	}
}

// sealed returns body with its checksum appended: bytes that pass the
// checksum, whatever they hold.
func sealed(body []byte) []byte {
	return binary.BigEndian.AppendUint32(body[:len(body):len(body)], crc32.ChecksumIEEE(body))
}

// A count that a stream cannot yet check (the bytes left are not known)
// gets no room on its word: a snapshot claiming 2^40 keys in a few bytes is
// refused without allocating for them. (Room taken on the count's word,
// even capped at two million keys: "refusing 83 bytes allocated 117.5 MB".)
func TestRestoreHostileCountTakesNoRoom(t *testing.T) {
	body := []byte(snapMagic)
	body = append(body, snapVersion2)
	body = binary.AppendUvarint(body, 9) // applied
	body = binary.AppendUvarint(body, 0) // floor
	body = binary.AppendUvarint(body, 0) // cluster id
	body = binary.AppendUvarint(body, 0) // members
	body = binary.AppendUvarint(body, 1<<40)
	body = append(body, make([]byte, 64)...)
	b := sealed(body)
	if _, err := DecodeImage(b); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("decoded: %v", err)
	}
	g, _ := seeded()
	before := g.Image().sort()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	err := restoreThrough(g, b, iotest.OneByteReader, 16)
	runtime.ReadMemStats(&m1)
	if !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("restored: %v", err)
	}
	if !reflect.DeepEqual(before, g.Image().sort()) {
		t.Fatal("a refused snapshot changed the state")
	}
	if grew := m1.TotalAlloc - m0.TotalAlloc; grew > 8<<20 {
		t.Fatalf("refusing %d bytes allocated %.1f MB", len(b), float64(grew)/1e6)
	}
}

// failingReader hands out its bytes, then fails.
type failingReader struct {
	r   io.Reader
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// A reader that fails partway refuses the restore with its error, and
// leaves the state as it was.
func TestRestoreReadErrorChangesNothing(t *testing.T) {
	b := imageBytes(t, unusual(t).f)
	broken := errors.New("disk gone")
	for _, at := range []int{0, 3, 20, len(b) / 2, len(b) - 4, len(b) - 1, len(b)} {
		g, _ := seeded()
		before := g.Image().sort()
		err := g.Restore(io.NopCloser(&failingReader{r: bytes.NewReader(b[:at]), err: broken}))
		if !errors.Is(err, broken) {
			t.Fatalf("read error after %d bytes: restore said %v", at, err)
		}
		if !reflect.DeepEqual(before, g.Image().sort()) {
			t.Fatalf("a failed read after %d bytes changed the state", at)
		}
	}
}

// A reader that never hands out a byte ends the restore rather than
// spinning.
func TestRestoreStopsOnAReaderThatMakesNoProgress(t *testing.T) {
	g := New(Config{})
	done := make(chan error, 1)
	go func() { done <- g.Restore(io.NopCloser(stuckReader{})) }()
	select {
	case err := <-done:
		if !errors.Is(err, io.ErrNoProgress) {
			t.Fatalf("restore said %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("restore still reading from a reader that returns nothing")
	}
}

type stuckReader struct{}

func (stuckReader) Read([]byte) (int, error) { return 0, nil }
