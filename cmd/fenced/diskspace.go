package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/cluster"
)

// diskFloor is the data dir's free-space floor (--data-dir-min-free,
// --data-dir-min-free-percent): below the larger of the two the leader
// refuses new keys with no_space, long before the disk is full, and hands
// leadership to a voter with space.
type diskFloor struct {
	minFree        string
	minFreePercent float64
	bytes          uint64 // parsed minFree
}

func (d *diskFloor) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.minFree, "data-dir-min-free", "64MiB", "free space of the data dir's file system below which the leader refuses new keys (no_space, 507) while renewals, releases and verifies go on: a size such as 64MiB or 1GiB, or 0; the larger of this and --data-dir-min-free-percent counts")
	fs.Float64Var(&d.minFreePercent, "data-dir-min-free-percent", cluster.DefaultDataDirMinFreePercent, "free space, in percent of the data dir's file system, below which the leader refuses new keys (0 to 100)")
}

var errDiskFloor = errors.New("--data-dir-min-free must be a size such as 64MiB, 1GiB or 500000000, or 0")

func (d *diskFloor) check() error {
	b, err := parseSize(d.minFree)
	if err != nil {
		return errDiskFloor
	}
	d.bytes = b
	if !(d.minFreePercent >= 0 && d.minFreePercent <= 100) {
		return fmt.Errorf("--data-dir-min-free-percent must be between 0 and 100, not %v", d.minFreePercent)
	}
	return nil
}

// parseSize reads a byte size: a number with an optional unit (B, KB, MB,
// GB, KiB, MiB, GiB).
func parseSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	num, mult := s, 1.0
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = v, u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || f < 0 || math.IsNaN(f) || f*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("not a size: %q", s)
	}
	return uint64(f * mult), nil
}

// stallBound is cluster.Config.LogStallBound for --log-stall-bound: 0 turns
// the step-down off.
func stallBound(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// peerHasSpace asks a voter, at its HTTP address, whether its data dir has
// space; no answer counts as no.
func peerHasSpace(o *options) func(ctx context.Context, id, httpAddr string) bool {
	return func(ctx context.Context, id, httpAddr string) bool {
		if httpAddr == "" || o.loaded == nil {
			return false
		}
		c := o.loaded.apiClient([]string{httpAddr})
		st, err := c.NodeStatus(ctx, c.Endpoints()[0])
		return err == nil && st.ID == id && st.DataDir != nil && !st.DataDir.NoSpace
	}
}
