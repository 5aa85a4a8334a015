package main

import (
	"errors"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	good := map[string]int64{"auto": 0, "off": 0, "512MiB": 512 << 20, "1.5GiB": 3 << 29, "800000000": 800000000, "2GB": 2e9}
	for in, want := range good {
		got, err := parseMemoryLimit(in)
		if err != nil || got != want {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "none", "-1GiB", "0", "12", "1e30GiB", "GiB", "NaN"} {
		if _, err := parseMemoryLimit(in); !errors.Is(err, errMemoryLimit) {
			t.Errorf("parseMemoryLimit(%q) = %v, want errMemoryLimit", in, err)
		}
	}
	if _, err := parseFlags([]string{"--memory-limit", "lots"}); !errors.Is(err, errMemoryLimit) {
		t.Errorf("--memory-limit lots: %v, want errMemoryLimit", err)
	}
}

func TestGCHeadroomFlag(t *testing.T) {
	for _, v := range []string{"-1", "101", "lots"} {
		if _, err := parseFlags([]string{"--gc-headroom", v}); err == nil {
			t.Errorf("--gc-headroom %s: accepted", v)
		}
	}
	o, err := parseFlags(nil)
	if err != nil || o.gcHeadroom != defaultGCHeadroom {
		t.Fatalf("default --gc-headroom: %v, %v", o, err)
	}
}

func TestDataDirFloorFlags(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.disk.bytes != 64<<20 || o.disk.minFreePercent != 5 {
		t.Fatalf("defaults: %d bytes, %v%%", o.disk.bytes, o.disk.minFreePercent)
	}
	for _, tc := range []struct {
		args []string
		ok   bool
		want uint64
	}{
		{[]string{"--data-dir-min-free", "1GiB"}, true, 1 << 30},
		{[]string{"--data-dir-min-free", "0"}, true, 0},
		{[]string{"--data-dir-min-free", "lots"}, false, 0},
		{[]string{"--data-dir-min-free", "-1MiB"}, false, 0},
		{[]string{"--data-dir-min-free-percent", "101"}, false, 0},
		{[]string{"--data-dir-min-free-percent", "0"}, true, 64 << 20},
	} {
		o, err := parseFlags(tc.args)
		if tc.ok != (err == nil) {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if err == nil && o.disk.bytes != tc.want {
			t.Errorf("%v: %d bytes, want %d", tc.args, o.disk.bytes, tc.want)
		}
	}
}
