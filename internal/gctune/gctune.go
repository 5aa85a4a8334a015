// Package gctune bounds the garbage collector's headroom over the live heap,
// so that a node holding a large state machine does not keep twice its live
// heap resident.
//
// Go's collector lets the heap grow to (1+GOGC/100) times what was live at
// the last collection before it runs again, and resident memory follows that
// high-water mark. With the default GOGC=100 a node whose state machine and
// lease table are 400 MB live keeps about 800 MB resident. A Tuner lowers
// GOGC as the live heap grows so that the headroom is a fraction of it (but
// never less than a floor, and never more than GOGC=100 allows): small heaps
// collect exactly as Go does by default, large ones pay a little more
// collector CPU for a resident size near their live heap.
package gctune

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultFloor is the least headroom a Tuner leaves: below
// DefaultFloor/fraction of live heap the headroom is the floor, and below
// the floor itself the collector runs as with GOGC=100. It keeps small
// nodes from collecting often for no gain worth having, and is no larger
// because a follower with a million keys holds only about 100 MiB: a floor
// of 32 MiB made its headroom a third of its heap instead of a fifth
// (docs/PERFORMANCE.md, "Restart and memory at 1M keys").
const DefaultFloor = 16 << 20

// maxPercent is the GOGC a Tuner never exceeds: Go's default.
const maxPercent = 100

// minPercent is the GOGC a Tuner never goes below: at lower values the
// collector runs nearly back to back for a few percent of memory.
const minPercent = 10

// Percent returns the GOGC that gives a live heap of live bytes a headroom
// of max(floor, pct% of live), within [minPercent, 100].
func Percent(live uint64, pct int, floor uint64) int {
	if live == 0 || floor >= live {
		return maxPercent // the floor is at least what GOGC=100 leaves
	}
	p := max(pct, int(floor*100/live))
	return min(max(p, minPercent), maxPercent)
}

// Tuner sets GOGC from the live heap after each collection.
type Tuner struct {
	// Pct is the headroom over the live heap, in percent of it.
	Pct int
	// Floor is the least headroom, in bytes.
	Floor uint64
	// Every is how often the live heap is read.
	Every time.Duration
	// Log hears every change of GOGC.
	Log hclog.Logger

	// live reads the live heap; setPercent sets GOGC. Tests replace them.
	live       func() uint64
	setPercent func(int) int
}

// liveHeap reads the heap that the last collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Run adjusts GOGC until ctx ends, then puts back the GOGC it found.
func (t *Tuner) Run(ctx context.Context) {
	live, set := t.live, t.setPercent
	if live == nil {
		live = liveHeap
	}
	if set == nil {
		set = debug.SetGCPercent
	}
	every := t.Every
	if every <= 0 {
		every = time.Second
	}
	log := t.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	orig := set(maxPercent)
	defer set(orig)
	cur := maxPercent
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		cur = t.step(live(), cur, set, log)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// step sets GOGC for a live heap of l when it differs from cur by more
// than a few points (each change re-paces the collector), and returns the
// GOGC now in force.
func (t *Tuner) step(l uint64, cur int, set func(int) int, log hclog.Logger) int {
	p := Percent(l, t.Pct, t.Floor)
	if p == cur || (p != maxPercent && abs(p-cur) < 3) {
		return cur
	}
	set(p)
	log.Debug("collector headroom", "live_bytes", l, "gogc", p)
	return p
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
