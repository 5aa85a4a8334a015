package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// A restore decodes the snapshot as it reads it, instead of reading it whole
// first: at a million keys the whole snapshot is 40-60 MB that the node would
// hold beside the key table it builds, and give back to the system only
// slowly. The reader's bytes pass through a window that slides as the
// decoder consumes them; the checksum, which trails the snapshot, is
// computed as they are read, the last four bytes read held back as the
// checksum they may be. Nothing of the FSM changes until the whole snapshot
// was read and checked, as before.

// streamWindow is the window's first size: it grows, doubling, only while
// one field does not fit in it, so it never holds more than twice what was
// read.
var streamWindow = 64 << 10

// stream is a decoder's source when it reads as it decodes.
type stream struct {
	r io.Reader
	// win[:end] holds what was read and not yet slid out; the decoder's buf
	// is a suffix of win[:end-trailer] (what it has not consumed yet).
	win []byte
	end int
	// sum is the checksum of every byte read but the last trailer bytes:
	// of win[:visible()] and of what slid out before it.
	sum uint32
	// read counts every byte read.
	read int64
	eof  bool
	err  error
	// scratch holds the fields decoder.bytes returned since the last
	// decoder.record: the window may slide under them, a copy cannot.
	scratch []byte
}

// trailer is the length of the checksum that ends a snapshot.
const trailer = 4

// streamDecoder returns a decoder that reads r as it decodes.
func streamDecoder(r io.Reader) *decoder {
	return &decoder{s: &stream{r: r, win: make([]byte, max(streamWindow, 1))}}
}

// fill makes the decoder's buffer hold at least n bytes if the input has
// them, and reports whether it does. Without a stream the buffer is the
// whole input already.
func (d *decoder) fill(n int) bool {
	return len(d.buf) >= n || d.more(n)
}

// more is fill's slow path: it slides the window and reads.
func (d *decoder) more(n int) bool {
	s := d.s
	if s == nil || d.err != nil {
		return false
	}
	s.slide(s.visible() - len(d.buf))
	for s.visible() < n && !s.eof {
		s.readMore()
	}
	d.buf = s.win[:s.visible()]
	return len(d.buf) >= n
}

// visible is the end of what the decoder may see: all that was read but
// the last trailer bytes, which may be the checksum.
func (s *stream) visible() int { return max(s.end-trailer, 0) }

// slide drops the window's first n bytes (consumed, and summed already).
func (s *stream) slide(n int) {
	copy(s.win, s.win[n:s.end])
	s.end -= n
}

// readMore reads once into the window, growing it when it is full, and
// sums what left the held-back trailer.
func (s *stream) readMore() {
	if s.end == len(s.win) {
		bigger := make([]byte, 2*len(s.win))
		copy(bigger, s.win[:s.end])
		s.win = bigger
	}
	summed := s.visible()
	for range 100 {
		m, err := s.r.Read(s.win[s.end:])
		s.end += m
		s.read += int64(m)
		if err != nil {
			s.eof = true
			if !errors.Is(err, io.EOF) {
				s.err = err
			}
		}
		if m > 0 || s.eof {
			s.sum = crc32.Update(s.sum, crc32.IEEETable, s.win[summed:s.visible()])
			return
		}
	}
	s.eof, s.err = true, io.ErrNoProgress
}

// drain reads the rest of the input, for its checksum and its length, once
// decoding has stopped.
func (s *stream) drain() {
	for !s.eof {
		s.slide(s.visible())
		s.readMore()
	}
}

// checksumOK reports whether the input, read to its end, ends in the
// checksum of what precedes it.
func (s *stream) checksumOK() bool {
	return s.end >= trailer && binary.BigEndian.Uint32(s.win[s.end-trailer:s.end]) == s.sum
}

// record starts a record whose fields decoder.bytes returns: the fields of
// the one before it are no longer needed.
func (d *decoder) record() {
	if d.s != nil {
		d.s.scratch = d.s.scratch[:0]
	}
}

// stable returns b, which is in the window, as bytes that the window's
// next slide leaves alone.
func (d *decoder) stable(b []byte) []byte {
	s := d.s
	if s == nil {
		return b
	}
	at := len(s.scratch)
	s.scratch = append(s.scratch, b...)
	return s.scratch[at:len(s.scratch):len(s.scratch)]
}

// sized returns how many records of a count to make room for at once. A
// whole input has bounded every count already (decoder.count); a stream
// cannot, since the bytes left are not known, so its room grows with the
// records read instead of being taken on the count's word.
func (d *decoder) sized(n uint64) int {
	if d.s != nil {
		return int(min(n, 1024))
	}
	return int(n)
}

// decodeStream reads a snapshot from r as decodeState does from its bytes,
// with the same refusals in the same order: too short, then a checksum that
// does not match, then the first bad field. A reader's error is returned as
// it is, wrapped.
func decodeStream(r io.Reader, begin func(n int), key func(*rawKey) bool, value func(key, value []byte) bool) (*Image, error) {
	d := streamDecoder(r)
	img, err := decodeVersioned(d, begin, key, value)
	s := d.s
	if err != nil {
		s.drain()
	}
	switch {
	case s.err != nil:
		// Not the snapshot's fault: the reader's error, as it said it.
		return nil, fmt.Errorf("fsm: reading the snapshot: %w", s.err)
	case s.read < int64(len(snapMagic)+1+trailer):
		return nil, fmt.Errorf("%w: %d bytes", ErrBadSnapshot, s.read)
	case !s.checksumOK():
		return nil, fmt.Errorf("%w: checksum mismatch", ErrBadSnapshot)
	case err != nil:
		return nil, err
	}
	return img, nil
}
