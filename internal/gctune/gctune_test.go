package gctune

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/internal/testutil"
)

const mib = 1 << 20

func TestPercent(t *testing.T) {
	const floor = 64 * mib
	for _, c := range []struct {
		name  string
		live  uint64
		pct   int
		floor uint64
		want  int
	}{
		{"empty heap: Go's default", 0, 25, floor, 100},
		{"small heap: the floor is more than GOGC=100 gives", 10 * mib, 25, floor, 100},
		{"heap the size of the floor", 64 * mib, 25, floor, 100},
		{"between: the floor is the headroom", 128 * mib, 25, floor, 50},
		{"large heap: the fraction", 400 * mib, 25, floor, 25},
		{"huge heap, tiny fraction: never below the minimum", 64 << 30, 1, floor, minPercent},
		{"no floor", 10 * mib, 25, 0, 25},
		{"fraction above Go's default is capped", 400 * mib, 300, floor, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Percent(c.live, c.pct, c.floor); got != c.want {
				t.Fatalf("Percent(%d, %d, %d) = %d, want %d", c.live, c.pct, c.floor, got, c.want)
			}
		})
	}
}

// fakeRuntime records the GOGC values a Tuner sets, for a live heap the
// test moves.
type fakeRuntime struct {
	mu   sync.Mutex
	heap uint64
	gogc int
	sets []int
}

func (f *fakeRuntime) live() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heap
}

func (f *fakeRuntime) set(p int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.gogc
	f.gogc, f.sets = p, append(f.sets, p)
	return old
}

func (f *fakeRuntime) state() (int, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gogc, append([]int(nil), f.sets...)
}

func TestTunerFollowsTheLiveHeapAndRestoresGOGC(t *testing.T) {
	rt := &fakeRuntime{gogc: 70, heap: 1 << 20}
	tu := &Tuner{Pct: 25, Floor: DefaultFloor, Every: time.Millisecond, Log: hclog.NewNullLogger(), live: rt.live, setPercent: rt.set}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tu.Run(ctx); close(done) }()

	waitGOGC(t, rt, 100)
	rt.mu.Lock()
	rt.heap = 1 << 30
	rt.mu.Unlock()
	waitGOGC(t, rt, 25)
	rt.mu.Lock()
	rt.heap = 1<<30 + 1<<20 // a change that moves GOGC by nothing
	rt.mu.Unlock()
	cancel()
	<-done
	g, sets := rt.state()
	if g != 70 {
		t.Fatalf("GOGC after the tuner stopped = %d, want the 70 it found", g)
	}
	if want := []int{100, 25, 70}; len(sets) != len(want) || sets[0] != 100 || sets[1] != 25 || sets[2] != 70 {
		t.Fatalf("GOGC set to %v, want %v (no change for a heap that moved GOGC by nothing)", sets, want)
	}
}

func waitGOGC(t *testing.T, rt *fakeRuntime, want int) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, func() error {
		if g, _ := rt.state(); g != want {
			return testutil.Errorf("GOGC %d, want %d", g, want)
		}
		return nil
	})
}

func TestStepIgnoresSmallMoves(t *testing.T) {
	rt := &fakeRuntime{}
	tu := &Tuner{Pct: 25, Floor: 64 * mib}
	log := hclog.NewNullLogger()
	cur := tu.step(256*mib, 100, rt.set, log) // floor/live = 25
	cur = tu.step(250*mib, cur, rt.set, log)  // 25.6 → 25: no change
	cur = tu.step(200*mib, cur, rt.set, log)  // 32: a change
	if _, sets := rt.state(); cur != 32 || len(sets) != 2 || sets[0] != 25 || sets[1] != 32 {
		t.Fatalf("GOGC %d after sets %v, want 32 after [25 32]", cur, sets)
	}
}

func TestLiveHeapReadsTheRuntime(t *testing.T) {
	runtime.GC()
	if liveHeap() == 0 {
		t.Fatal("the runtime reports no live heap")
	}
}
