package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fill applies n grants of distinct keys with realistic key and holder sizes.
func fill(f *FSM, n int) {
	logs := make([]*raft.Log, 0, 256)
	for i := 0; i < n; i++ {
		cmd := Acquire{Key: fmt.Sprintf("svc/orders/shard-%07d", i), Holder: fmt.Sprintf("worker-%04d", i%1000), TTL: 10 * time.Second, RequestID: "0123456789abcdef01234567"}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 3, Type: raft.LogCommand, Data: Encode(cmd)})
		if len(logs) == cap(logs) || i == n-1 {
			f.ApplyBatch(logs)
			logs = logs[:0]
		}
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemoryPerKey reports the heap bytes one held key costs at 1M keys
// (keys of 24 bytes, holders of 11, request ids of 24).
func BenchmarkMemoryPerKey(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		before := heap()
		f := New(Config{})
		fill(f, n)
		after := heap()
		b.ReportMetric(float64(after-before)/n, "bytes/key")
		runtime.KeepAlive(f)
	}
}

// BenchmarkSnapshotRestore1M measures writing and restoring a snapshot of 1M
// keys: the state part of a node's restart.
func BenchmarkSnapshotRestore1M(b *testing.B) {
	f := New(Config{})
	fill(f, 1_000_000)
	var buf bytes.Buffer
	if err := f.Image().Encode(&buf); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(buf.Len())/1e6, "MB")
	b.ReportAllocs()
	runtime.GC()
	before := cpuTime()
	for b.Loop() {
		g := New(Config{})
		if err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
			b.Fatal(err)
		}
	}
	// CPU time moves far less than wall time with the machine's load.
	b.ReportMetric((cpuTime()-before).Seconds()/float64(b.N), "cpu-s/op")
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSnapshotPersist1M measures what a node's snapshot of 1M keys
// costs: the view taken under the lock, the sort and the encoding.
func BenchmarkSnapshotPersist1M(b *testing.B) {
	f := New(Config{})
	fill(f, 1_000_000)
	benchmarkPersist(b, f)
}

// benchmarkPersist persists snapshots of f, reporting their CPU time (on a
// loaded machine it moves far less than wall time).
func benchmarkPersist(b *testing.B, f *FSM) {
	b.ReportAllocs()
	runtime.GC()
	before := cpuTime()
	for b.Loop() {
		persisted(b, f)
	}
	b.ReportMetric((cpuTime()-before).Seconds()/float64(b.N), "cpu-s/op")
}

// keysShuffled returns the keys fill grants for n keys, in a shuffled order so that
// lookups touch the table at random.
func keysShuffled(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("svc/orders/shard-%07d", i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys
}

// BenchmarkGet1M measures a lookup of a key among 1M.
func BenchmarkGet1M(b *testing.B) {
	const n = 1_000_000
	f := New(Config{})
	fill(f, n)
	keys := keysShuffled(n)
	runtime.GC()
	before := cpuTime()
	for i := 0; b.Loop(); i++ {
		if _, ok := f.Get(keys[i%n]); !ok {
			b.Fatal("key missing")
		}
	}
	reportCPU(b, before)
}

// reportCPU reports the process's CPU time since before per operation:
// on a loaded machine it moves far less than wall time.
func reportCPU(b *testing.B, before time.Duration) {
	b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
}

// BenchmarkApplyRenew1M measures applying a renewal of a key among 1M: a
// lookup and an overwrite of its entry.
func BenchmarkApplyRenew1M(b *testing.B) {
	const n = 1_000_000
	f := New(Config{})
	fill(f, n)
	keys := keysShuffled(n)
	holder := make(map[string]string, n)
	for i := 0; i < n; i++ {
		holder[fmt.Sprintf("svc/orders/shard-%07d", i)] = fmt.Sprintf("worker-%04d", i%1000)
	}
	data := make([][]byte, 4096)
	for i := range data {
		k := keys[i]
		data[i] = Encode(Acquire{Key: k, Holder: holder[k], TTL: 10 * time.Second, RequestID: "0123456789abcdef01234567"})
	}
	b.ReportAllocs()
	runtime.GC()
	before := cpuTime()
	for i := 0; b.Loop(); i++ {
		if r := f.Apply(&raft.Log{Index: uint64(n + i + 1), Term: 3, Type: raft.LogCommand, Data: data[i%len(data)]}).(*Result); r.Err != nil || !r.Renewed {
			b.Fatalf("renewal refused: %+v", r)
		}
	}
	reportCPU(b, before)
}

// fillShuffled is fill with the keys granted in a random order, as many
// clients grant them: the table's slots are then not in name order, which
// a snapshot's sort must put them in.
func fillShuffled(f *FSM, n int) []string {
	keys := keysShuffled(n)
	logs := make([]*raft.Log, 0, 256)
	for i, k := range keys {
		cmd := Acquire{Key: k, Holder: fmt.Sprintf("worker-%04d", i%1000), TTL: 10 * time.Second, RequestID: "0123456789abcdef01234567"}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 3, Type: raft.LogCommand, Data: Encode(cmd)})
		if len(logs) == cap(logs) || i == n-1 {
			f.ApplyBatch(logs)
			logs = logs[:0]
		}
	}
	return keys
}

// BenchmarkSnapshotPersistShuffled1M is BenchmarkSnapshotPersist1M over keys
// granted in a random order.
func BenchmarkSnapshotPersistShuffled1M(b *testing.B) {
	f := New(Config{})
	fillShuffled(f, 1_000_000)
	benchmarkPersist(b, f)
}

// BenchmarkSnapshotHeld1M reports the heap a snapshot of 1M keys keeps
// while raft persists it, once its keys are sorted (held-B/key), and that
// again after 100,000 entries applied meanwhile (written-B/key): what a
// snapshot in flight adds to a node's memory. The entries are grants of
// new keys (append) or renewals through the log of random held keys
// (rewrite), the worst case for a snapshot that shares the table's pages.
func BenchmarkSnapshotHeld1M(b *testing.B) {
	const n, writes = 1_000_000, 100_000
	f := New(Config{})
	keys := fillShuffled(f, n)
	next := uint64(n)
	for _, bc := range []struct {
		name string
		cmd  func(i int) Acquire
	}{
		{"append", func(i int) Acquire {
			return Acquire{Key: fmt.Sprintf("svc/orders/new-%d-%07d", next, i), Holder: "worker-new", TTL: 10 * time.Second}
		}},
		{"rewrite", func(i int) Acquire {
			k := (i * 7919) % n
			return Acquire{Key: keys[k], Holder: fmt.Sprintf("worker-%04d", k%1000), TTL: 10 * time.Second, RequestID: "0123456789abcdef01234567"}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				data := make([][]byte, writes)
				for i := range data {
					data[i] = Encode(bc.cmd(i))
				}
				base := heap()
				snap, err := f.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				if s, ok := snap.(interface{ sort() }); ok {
					s.sort() // its order lives while it is persisted
				}
				held := heap()
				for _, d := range data {
					next++
					if r := f.Apply(&raft.Log{Index: next, Term: 3, Type: raft.LogCommand, Data: d}).(*Result); r.Err != nil {
						b.Fatalf("refused: %+v", r)
					}
				}
				written := heap()
				b.ReportMetric(float64(held-base)/n, "held-B/key")
				b.ReportMetric(float64(written-base)/n, "written-B/key")
				var out sink
				if err := snap.Persist(&out); err != nil {
					b.Fatal(err)
				}
				snap.Release()
				data = nil
			}
		})
	}
}
