package cluster

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/fsm"
)

// BenchmarkMassExpiry grants a million leases on a single node (fsync off:
// the log's disk is not what is measured), moves the leader's lease clock
// past all of their deadlines at once, as a leader change does for every
// lease of one TTL, and waits until every one of them expired. Meanwhile an
// acquire (a new key each time, then released) runs in a loop. Reported:
// expire-s (from the clock's jump until the last expiry was applied),
// peak-goroutines (above the count before the jump), peak-heap-MB (the
// largest heap in use while they expired, sampled), and the acquires'
// latency (acq-p50-ms, acq-p99-ms, acq-max-ms).
//
//	go test ./cluster -run '^$' -bench MassExpiry -benchtime 1x -timeout 30m
func BenchmarkMassExpiry(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				massExpiry(b, n)
			}
		})
	}
}

func massExpiry(b *testing.B, leases int) {
	tc := newTestClusterWith(b, 1, func(c *Config) {
		c.NoSync = true
		c.SnapshotThreshold, c.SnapshotInterval, c.TrailingLogs = 1<<30, time.Hour, 1<<20
	})
	_, lead := tc.leader()
	b.StopTimer()
	t0 := time.Now()
	grantPipelined(b, lead, leases)
	b.Logf("granted %d leases in %v", leases, time.Since(t0))
	var expired atomic.Int64
	lead.testHooks.Store(&hooks{ended: func(k fsm.KeyState) {
		if k.State == fsm.Expired {
			expired.Add(1)
		}
	}})
	runtime.GC()
	base := runtime.NumGoroutine()
	var peakG, peakHeap int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the sampler
		defer wg.Done()
		var ms runtime.MemStats
		for i := 0; ; i++ {
			peakG = max(peakG, runtime.NumGoroutine())
			if i%50 == 0 {
				runtime.ReadMemStats(&ms)
				peakHeap = max(peakHeap, int(ms.HeapInuse))
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var lat []time.Duration
	go func() { // the acquire that must not wait behind the expiries
		defer wg.Done()
		ctx := context.Background()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			g, err := lead.Acquire(ctx, AcquireArgs{Key: fmt.Sprintf("probe/%d", i), Holder: "probe", TTL: time.Hour})
			if err != nil {
				b.Error(err)
				return
			}
			lat = append(lat, time.Since(start))
			if _, err := lead.Release(ctx, ReleaseArgs{Key: g.Key, Holder: "probe", Token: g.Token}); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	b.StartTimer()
	start := time.Now()
	skipLeaseClock(lead, 2*time.Hour)
	for expired.Load() < int64(leases) {
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	b.StopTimer()
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(took.Seconds(), "expire-s")
	b.ReportMetric(float64(peakG-base), "peak-goroutines")
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MB")
	b.ReportMetric(pct(0.5), "acq-p50-ms")
	b.ReportMetric(pct(0.99), "acq-p99-ms")
	b.ReportMetric(pct(1), "acq-max-ms")
	b.ReportMetric(float64(len(lat)), "acquires")
	tc.closeAll()
	b.StartTimer()
}

// grantPipelined grants n keys of 1000 holders with an hour's TTL,
// straight through raft with many entries in flight: the setup of a
// benchmark, not what it measures.
func grantPipelined(b *testing.B, lead *Node, n int) {
	r := lead.r()
	const window = 4096
	var fs []interface{ Error() error }
	for i := 0; i < n; i++ {
		cmd := fsm.Acquire{Key: fmt.Sprintf("svc/orders/shard-%07d", i), Holder: fmt.Sprintf("worker-%04d", i%1000), TTL: time.Hour}
		fs = append(fs, r.Apply(fsm.Encode(cmd), time.Minute))
		if len(fs) == window || i == n-1 {
			for _, f := range fs {
				if err := f.Error(); err != nil {
					b.Fatal(err)
				}
			}
			fs = fs[:0]
		}
	}
}
