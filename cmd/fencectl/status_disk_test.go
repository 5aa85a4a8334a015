package main

import (
	"testing"

	"github.com/fenced/fenced/client"
)

func TestDataDirCell(t *testing.T) {
	for _, tc := range []struct {
		d    *client.DataDirStatus
		want string
	}{
		{nil, ""},
		{&client.DataDirStatus{UsedBytes: 512}, "512B used"},
		{&client.DataDirStatus{UsedBytes: 64 << 20, FreeBytes: 1 << 30, TotalBytes: 4 << 30}, "64.0MiB used, 1.0GiB free (25%)"},
		{&client.DataDirStatus{UsedBytes: 90 << 20, FreeBytes: 1 << 20, TotalBytes: 100 << 20, NoSpace: true}, "NO SPACE: 90.0MiB used, 1.0MiB free (1%)"},
	} {
		if got := dataDirCell(tc.d); got != tc.want {
			t.Errorf("dataDirCell(%+v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
