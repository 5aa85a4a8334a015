package guard

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/fenced/fenced/fence"
)

// benchAdmit admits a rising token on one key per iteration: every call is an
// admission that raises the highest, the costly path of each guard.
func benchAdmit(b *testing.B, g Guard) {
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := g.Admit(ctx, "bench", fence.Token(1<<32|uint64(i+1))); err != nil {
			b.Fatal(err)
		}
	}
}

// benchAdmitEqual admits the same token over and over, as a holder that
// writes many times under one grant does.
func benchAdmitEqual(b *testing.B, g Guard) {
	ctx := context.Background()
	tok := fence.Token(1<<32 | 1)
	if err := g.Admit(ctx, "bench", tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Admit(ctx, "bench", tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMemoryAdmit(b *testing.B)      { benchAdmit(b, NewMemory()) }
func BenchmarkMemoryAdmitEqual(b *testing.B) { benchAdmitEqual(b, NewMemory()) }

// BenchmarkMemoryAdmitParallel gives each goroutine its own key, so it shows
// how well the shards keep independent keys apart.
func BenchmarkMemoryAdmitParallel(b *testing.B) {
	g := NewMemory()
	var ids atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		key := fmt.Sprint("bench-", ids.Add(1))
		for i := uint64(1); pb.Next(); i++ {
			if err := g.Admit(ctx, key, fence.Token(1<<32|i)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkFileAdmit(b *testing.B)        { benchAdmit(b, openFile(b, b.TempDir())) }
func BenchmarkFileAdmitEqual(b *testing.B)   { benchAdmitEqual(b, openFile(b, b.TempDir())) }
func BenchmarkSQLiteAdmit(b *testing.B)      { benchAdmit(b, openSQLite(b)) }
func BenchmarkSQLiteAdmitEqual(b *testing.B) { benchAdmitEqual(b, openSQLite(b)) }
