package cluster

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// benchKeys returns n live grants of 64 holders, with their strings made
// up front so that the benchmarks count only the lease table's memory.
func benchKeys(n int) []fsm.KeyState {
	holders := make([]string, 64)
	for i := range holders {
		holders[i] = fmt.Sprintf("holder-%d", i)
	}
	ks := make([]fsm.KeyState, n)
	for i := range ks {
		ks[i] = fsm.KeyState{Key: fmt.Sprintf("bench/key/%d", i), Holder: holders[i%len(holders)], Token: fence.Token(uint64(i) + 1),
			TTL: time.Hour, State: fsm.Held, Index: uint64(i) + 1, Armed: uint64(i) + 1}
	}
	return ks
}

func benchLeases() *leases {
	return newLeases(hclog.NewNullLogger(), func(uint64, fsm.Expire, time.Duration) {}, nil)
}

// BenchmarkLeaseArm arms one lease per operation in a table that grows to
// b.N leases: ns/op and B/op are the cost of one armed lease (B/op counts
// what the table's growth left behind too), live-B/lease what the table
// holds per lease in the end.
func BenchmarkLeaseArm(b *testing.B) {
	ks := benchKeys(b.N)
	l := benchLeases()
	l.activate(1, walkList(nil), nil)
	base := liveBytes()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range ks {
		l.granted(ks[i])
	}
	b.StopTimer()
	b.ReportMetric(float64(liveBytes()-base)/float64(b.N), "live-B/lease")
	runtime.KeepAlive(ks)
	l.deactivate()
}

// liveBytes returns the bytes of the heap that a collection leaves.
func liveBytes() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkLeaseChurn arms two leases and ends two per operation in a
// table of 10,000, which the cache holds: the work of an arm and an end
// (key index, heap, holder lists), not the memory's latency.
func BenchmarkLeaseChurn(b *testing.B) {
	const n = 10_000
	ks := benchKeys(2 * n)
	l := benchLeases()
	l.activate(1, walkList(ks[:n]), nil)
	released := func(k fsm.KeyState) fsm.KeyState {
		return fsm.KeyState{Key: k.Key, Token: k.Token, State: fsm.Released}
	}
	before := cpuTime()
	for i := 0; b.Loop(); i++ {
		old, fresh := ks[i%n], ks[n+i%n]
		l.granted(fresh)
		l.ended(released(old))
		l.granted(old)
		l.ended(released(fresh))
	}
	b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
	l.deactivate()
}

// BenchmarkLeaseActivate re-arms a million live grants, as a new leader
// does; ns/lease and live-B/lease are per lease.
func BenchmarkLeaseActivate(b *testing.B) {
	ks := benchKeys(1 << 20)
	l := benchLeases()
	base := liveBytes()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.activate(uint64(i)+1, walkList(ks), nil)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(ks)), "ns/lease")
	b.ReportMetric(float64(liveBytes()-base)/float64(len(ks)), "live-B/lease")
	runtime.KeepAlive(ks)
	l.deactivate()
}

// BenchmarkLeaseRenew renews one lease of a table of 100,000 per
// operation.
func BenchmarkLeaseRenew(b *testing.B) {
	ks := benchKeys(100000)
	l := benchLeases()
	l.activate(1, walkList(ks), nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := ks[i%len(ks)]
		if _, _, ok := l.renew(k.Key, k.Holder, k.Token); !ok {
			b.Fatal("renew refused")
		}
	}
	b.StopTimer()
	l.deactivate()
}

// BenchmarkLeaseRenewHolder renews every lease of a holder with four keys,
// as a keepalive does.
func BenchmarkLeaseRenewHolder(b *testing.B) {
	ks := benchKeys(100000)
	l := benchLeases()
	l.activate(1, walkList(ks), nil)
	holders := make([]string, 0, 64)
	for i := 0; i < 64; i++ {
		holders = append(holders, ks[i].Holder)
	}
	for i := 0; i < 64; i++ {
		h := fmt.Sprintf("four-%d", i)
		for k := 0; k < 4; k++ {
			l.granted(fsm.KeyState{Key: fmt.Sprintf("%s/%d", h, k), Holder: h, Token: 1, TTL: time.Hour, State: fsm.Held})
		}
		holders[i] = h
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ls, _ := l.renewHolder(holders[i%len(holders)], nil); len(ls) != 4 {
			b.Fatal("keepalive renewed other than four leases")
		}
	}
	b.StopTimer()
	l.deactivate()
}

// BenchmarkLeaseActivateFromFSM re-arms the leases of a state machine with a
// million held keys, as a new leader does: "walk" straight from the state
// machine, "list" from a list of every live grant first (what a new leader
// did before). cpu-ms/op is the process's CPU time, which the machine's
// load moves far less than wall time.
func BenchmarkLeaseActivateFromFSM(b *testing.B) {
	f := fsm.New(fsm.Config{})
	logs := make([]*raft.Log, 0, 256)
	for i := 0; i < 1_000_000; i++ {
		cmd := fsm.Acquire{Key: fmt.Sprintf("svc/orders/shard-%07d", i), Holder: fmt.Sprintf("worker-%04d", i%1000), TTL: time.Hour, RequestID: "0123456789abcdef01234567"}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 3, Type: raft.LogCommand, Data: fsm.Encode(cmd)})
		if len(logs) == cap(logs) {
			f.ApplyBatch(logs)
			logs = logs[:0]
		}
	}
	for _, mode := range []string{"walk", "list"} {
		b.Run(mode, func(b *testing.B) {
			l := benchLeases()
			b.ReportAllocs()
			runtime.GC()
			before := cpuTime()
			for i := 0; b.Loop(); i++ {
				if mode == "walk" {
					l.activate(uint64(i)+1, f.WalkLive, nil)
				} else {
					l.activate(uint64(i)+1, walkList(f.Live()), nil)
				}
			}
			b.ReportMetric(float64((cpuTime()-before).Milliseconds())/float64(b.N), "cpu-ms/op")
			l.deactivate()
		})
	}
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
