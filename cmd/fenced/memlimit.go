package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/internal/gctune"
)

// Values of --memory-limit besides a size.
const (
	memoryLimitAuto = "auto"
	memoryLimitOff  = "off"
)

// cgroupShare is the part of a cgroup's memory limit that auto gives the Go
// heap: the rest is the runtime's own memory, stacks and the kernel's page
// cache of the log that the cgroup also counts.
const cgroupShare = 0.9

// cgroupLimitFiles are where cgroup v2 and v1 publish this process's
// memory limit.
var cgroupLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

var errMemoryLimit = errors.New("--memory-limit must be auto, off, or a size such as 512MiB, 2GiB or 800000000")

// parseMemoryLimit checks a --memory-limit value: auto, off or a size.
func parseMemoryLimit(s string) (int64, error) {
	switch s {
	case memoryLimitAuto, memoryLimitOff:
		return 0, nil
	}
	n, err := parseSize(s)
	if err != nil || n < 1<<20 {
		return 0, errMemoryLimit
	}
	return int64(n), nil
}

// applyMemoryLimit sets the Go runtime's soft memory limit (GOMEMLIMIT) the
// flag asks for. With a limit the garbage collector runs more often as the
// heap nears it, instead of letting the heap grow to twice what is live
// (GOGC=100): resident memory follows the live heap, paid for in GC CPU
// once the live heap comes near the limit. auto takes 90% of the cgroup's
// memory limit when there is one, and leaves the runtime alone otherwise; a
// GOMEMLIMIT environment variable wins over auto.
func applyMemoryLimit(flag string, log hclog.Logger) error {
	limit, err := parseMemoryLimit(flag)
	if err != nil {
		return err
	}
	switch flag {
	case memoryLimitOff:
		debug.SetMemoryLimit(math.MaxInt64)
		log.Info("no memory limit for the Go heap", "memory_limit", flag)
		return nil
	case memoryLimitAuto:
		if env := os.Getenv("GOMEMLIMIT"); env != "" {
			log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", env)
			return nil
		}
		cg, ok := cgroupMemoryLimit()
		if !ok {
			log.Info("no cgroup memory limit: no memory limit for the Go heap", "memory_limit", flag)
			return nil
		}
		limit = int64(float64(cg) * cgroupShare)
		log.Info("memory limit from the cgroup", "cgroup_limit_bytes", cg, "memory_limit_bytes", limit)
	default:
		log.Info("memory limit", "memory_limit_bytes", limit)
	}
	debug.SetMemoryLimit(limit)
	return nil
}

// cgroupMemoryLimit returns the memory limit of this process's cgroup, if
// it has one.
func cgroupMemoryLimit() (int64, bool) {
	for _, p := range cgroupLimitFiles {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// cgroup v2 says "max"; v1 says a huge number when there is none.
		if err != nil || v <= 0 || v >= 1<<62 {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

// memoryLimitUsage is the help text of --memory-limit.
var memoryLimitUsage = fmt.Sprintf("soft memory limit of the Go heap (GOMEMLIMIT): %s (%.0f%% of the cgroup's memory limit if there is one, else none; a GOMEMLIMIT environment variable wins), %s, or a size such as 512MiB or 2GiB. Near the limit the garbage collector runs more often instead of letting the heap grow to twice what is live",
	memoryLimitAuto, cgroupShare*100, memoryLimitOff)

// defaultGCHeadroom is --gc-headroom's default: a heap of a million keys
// keeps about a fifth more than its live size (and Go's scavenger another
// tenth of that), where GOGC=100 lets it double.
const defaultGCHeadroom = 20

var errGCHeadroom = errors.New("--gc-headroom must be a percentage from 0 (off: GOGC=100) to 100")

// gcHeadroomUsage is the help text of --gc-headroom.
var gcHeadroomUsage = fmt.Sprintf("how far the Go heap may grow past its live size before the garbage collector runs, in percent of the live heap but never less than %d MiB (0: off, Go's default GOGC=100, which lets it double). Large state machines then keep about that much more than they hold, for a little more collector CPU; small ones collect as by default. A GOGC environment variable turns it off",
	gctune.DefaultFloor>>20)

// startGCTuner runs the collector's headroom tuner until ctx ends, unless
// the flag or a GOGC environment variable turns it off.
func startGCTuner(ctx context.Context, pct int, log hclog.Logger) {
	if pct == 0 {
		log.Info("collector headroom tuner off", "gc_headroom", 0)
		return
	}
	if env := os.Getenv("GOGC"); env != "" {
		log.Info("collector headroom from GOGC: tuner off", "GOGC", env)
		return
	}
	log.Info("collector headroom", "percent_of_live_heap", pct, "floor_bytes", gctune.DefaultFloor)
	t := &gctune.Tuner{Pct: pct, Floor: gctune.DefaultFloor, Log: log.Named("gctune")}
	go t.Run(ctx)
}
