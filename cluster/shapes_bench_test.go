package cluster

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkShapeCycles measures acquire-and-release cycles on the leader of
// a 3-node in-process cluster, with as many clients as the name says, each
// a holder of its own: a lock (one key, the clients queue for it), a
// 4-permit semaphore (four hold it at once), and shared grants (every
// client holds one at once), and two-key sets (multi2). Each cycle is an acquire that waits its turn
// and a release (two log entries, or one when a release hands the key on).
//
//	go test -run '^$' -bench ShapeCycles -benchtime 2000x ./cluster
func BenchmarkShapeCycles(b *testing.B) {
	tc := newTestCluster(b, 3)
	_, lead := tc.leader()
	for _, bc := range []struct {
		name    string
		clients int
		args    AcquireArgs
	}{
		{"lock/16", 16, AcquireArgs{}},
		{"semaphore4/16", 16, AcquireArgs{Limit: 4}},
		{"semaphore4/64", 64, AcquireArgs{Limit: 4}},
		{"shared/64", 64, AcquireArgs{Shared: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			key := "bench/" + bc.name
			var next atomic.Int64
			b.SetParallelism(max(bc.clients/max(1, testingProcs()), 1))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				a := bc.args
				a.Key, a.Holder, a.TTL, a.Wait = key, fmt.Sprintf("c%d", next.Add(1)), time.Minute, time.Minute
				for pb.Next() {
					g, err := lead.Acquire(ctx, a)
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := lead.Release(ctx, ReleaseArgs{Key: key, Holder: a.Holder, Token: g.Token}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
	// Two-key sets over a ring of 8 keys, each overlapping its neighbours':
	// client i takes keys i and i+1 (mod 8) together, waits its turn, and
	// releases both.
	b.Run("multi2/16", func(b *testing.B) {
		var next atomic.Int64
		b.SetParallelism(max(16/max(1, testingProcs()), 1))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			i := next.Add(1)
			a := AcquireMultiArgs{Keys: []string{fmt.Sprintf("bench/m%d", i%8), fmt.Sprintf("bench/m%d", (i+1)%8)}, Holder: fmt.Sprintf("m%d", i),
				TTL: time.Minute, Wait: time.Minute}
			for pb.Next() {
				gs, err := lead.AcquireMulti(ctx, a)
				if err != nil {
					b.Error(err)
					return
				}
				for _, g := range gs {
					if _, err := lead.Release(ctx, ReleaseArgs{Key: g.Key, Holder: a.Holder, Token: g.Token}); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	})
}

// testingProcs is GOMAXPROCS, which RunParallel multiplies its parallelism
// by.
func testingProcs() int { return runtime.GOMAXPROCS(0) }
