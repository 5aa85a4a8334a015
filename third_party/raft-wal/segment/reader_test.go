// Copyright (c) HashiCorp, Inc
// SPDX-License-Identifier: MPL-2.0

package segment

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft-wal/types"
	"github.com/stretchr/testify/require"
)

type entryDesc struct {
	len, num int
}

func TestReader(t *testing.T) {
	cases := []struct {
		name          string
		firstIndex    uint64
		entries       []entryDesc
		corrupt       func(twf *testWritableFile) error
		wantLastIndex uint64
		wantOpenErr   string
	}{
		{
			name:       "basic sealed",
			firstIndex: 1,
			entries: []entryDesc{
				// 28 * 128 bytes entries are all that will fit in a 4KiB segment after
				// headers and index size are accounted for.
				{len: 128, num: 28},
			},
			wantLastIndex: 28,
		},
		{
			name:       "value larger than minBufSize",
			firstIndex: 1,
			entries: []entryDesc{
				{len: 128, num: 5},
				{len: minBufSize + 10, num: 1},
			},
			wantLastIndex: 6,
		},
		{
			name:       "sealed file truncated",
			firstIndex: 1,
			entries: []entryDesc{
				{len: 128, num: 28},
			},
			corrupt: func(twf *testWritableFile) error {
				twf.Truncate(0)
				return nil
			},
			wantOpenErr: "corrupt",
		},
	}

	for _, tc := range cases {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			vfs := newTestVFS()

			f := NewFiler("test", vfs)

			seg0 := testSegment(1)

			w, err := f.Create(seg0)
			require.NoError(t, err)
			defer w.Close()

			// Append previous entries. We just pick a fixed size and format that's
			// easy to verify but generally fits in our test block size.
			idx := tc.firstIndex
			wantLength := make(map[uint64]int)
			for _, desc := range tc.entries {
				// Append individually, could do commit batches but this is all in
				// memory so no real benefit.
				padLen := 0
				if desc.len > 6 {
					padLen = desc.len - 6
				}
				padding := strings.Repeat("P", padLen)
				for i := 0; i < desc.num; i++ {
					v := fmt.Sprintf("%05d:%s", idx, padding)
					err := w.Append([]types.LogEntry{{Index: idx, Data: []byte(v)}})
					require.NoError(t, err, "error appending entry idx=%d", idx)
					wantLength[idx] = desc.len
					idx++
				}
			}

			// Should have sealed
			sealed, indexStart, err := w.Sealed()
			require.NoError(t, err)
			require.True(t, sealed)

			if tc.corrupt != nil {
				file := testFileFor(t, w)
				require.NoError(t, tc.corrupt(file))
			}

			seg0.IndexStart = indexStart
			seg0.MaxIndex = w.LastIndex()
			seg0.SealTime = time.Now()

			// Now open the "file" with a reader.
			r, err := f.Open(seg0)

			if tc.wantOpenErr != "" {
				require.ErrorContains(t, err, tc.wantOpenErr)
				return
			}
			require.NoError(t, err)

			// Make sure we can read every value
			for idx := tc.firstIndex; idx <= tc.wantLastIndex; idx++ {
				got, err := r.GetLog(idx)
				require.NoError(t, err, "error reading idx=%d", idx)
				require.True(t, strings.HasPrefix(string(got.Bs), fmt.Sprintf("%05d:", idx)), "bad value for idx=%d", idx)
				require.Len(t, string(got.Bs), wantLength[idx])
			}

			// And we should _not_ read one either side
			if tc.firstIndex > 1 {
				_, err := r.GetLog(tc.firstIndex - 1)
				require.ErrorIs(t, err, types.ErrNotFound)
			}
			_, err = r.GetLog(tc.wantLastIndex + 1)
			require.ErrorIs(t, err, types.ErrNotFound)
		})
	}
}

// countingFile records the largest single read.
type countingFile struct {
	types.ReadableFile
	largest int
}

func (f *countingFile) ReadAt(p []byte, off int64) (int, error) {
	if len(p) > f.largest {
		f.largest = len(p)
	}
	return f.ReadableFile.ReadAt(p, off)
}

// TestReaderReadsSmallFramesWithSmallReads is the regression test of the
// fenced patch: reading a small entry asks the file for firstReadSize bytes,
// not the whole 64 KiB buffer, and a frame larger than that still reads
// back whole.
func TestReaderReadsSmallFramesWithSmallReads(t *testing.T) {
	vfs := newTestVFS()
	f := NewFiler("test", vfs)
	seg0 := testSegment(1)
	seg0.SizeLimit = 256 * 1024
	w, err := f.Create(seg0)
	require.NoError(t, err)
	defer w.Close()
	sizes := []int{100, firstReadSize - frameHeaderLen, firstReadSize, 3 * firstReadSize, 100}
	for i, n := range sizes {
		v := fmt.Sprintf("%05d:%s", i+1, strings.Repeat("P", n-6))
		require.NoError(t, w.Append([]types.LogEntry{{Index: uint64(i + 1), Data: []byte(v)}}))
	}
	rd := w.(*Writer).r.(*Reader)
	cf := &countingFile{ReadableFile: rd.rf}
	rd.rf = cf
	for i, n := range sizes {
		got, err := w.GetLog(uint64(i + 1))
		require.NoError(t, err)
		require.Len(t, got.Bs, n)
		require.True(t, strings.HasPrefix(string(got.Bs), fmt.Sprintf("%05d:", i+1)))
		if n <= firstReadSize-frameHeaderLen {
			require.LessOrEqual(t, cf.largest, firstReadSize, "reading entry %d of %d bytes", i+1, n)
		}
		got.Close()
		cf.largest = 0
	}
}
