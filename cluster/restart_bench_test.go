package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// BenchmarkRestart1M measures how long a node holding a million keys takes
// from start to serving: opening the stores, restoring the snapshot, replaying
// the log after it, and the new leader's barrier and lease re-arming.
//
//	go test -run '^$' -bench Restart1M -benchtime 1x ./cluster
func BenchmarkRestart1M(b *testing.B) {
	const keys = 1_000_000
	addr := testutil.FreeAddrs(b, 1)[0]
	cfg := fastConfig(b, "n1", b.TempDir(), addr)
	cfg.Bootstrap = true
	cfg.NoSync = true // filling is not what is measured
	cfg.SnapshotThreshold = 1 << 40
	n, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	testutil.Eventually(b, 10*time.Second, func() error {
		if !n.Ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	fill(b, n, keys)
	if err := n.wait(n.r().Snapshot()); err != nil {
		b.Fatal(err)
	}
	fill(b, n, 5000) // a log tail after the snapshot, replayed on start
	n.Close()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		n, err = New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		testutil.Eventually(b, time.Minute, func() error {
			if !n.Ready() {
				return fmt.Errorf("not ready")
			}
			return nil
		})
		b.ReportMetric(time.Since(start).Seconds(), "s-to-ready")
		if got := n.fsm.Len(); got < keys {
			b.Fatalf("%d keys after restart", got)
		}
		b.StopTimer()
		n.Close()
		b.StartTimer()
	}
}

// fill grants count fresh keys through raft, many proposals at once.
func fill(b *testing.B, n *Node, count int) {
	base := n.fsm.Len()
	var wg sync.WaitGroup
	const workers = 256
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < count; i += workers {
				key := fmt.Sprintf("svc/orders/shard-%07d", base+i)
				if _, err := n.apply(fsm.Acquire{Key: key, Holder: "worker", TTL: time.Hour, RequestID: "0123456789abcdef01234567"}); err != nil {
					b.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
}
