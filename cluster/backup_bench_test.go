package cluster

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fsm"
)

// BenchmarkBackup1M measures a backup of a million held keys, written out
// to nothing: as it is made now (stream: the table frozen, the bytes written
// from its pages twice, to measure and to send) and as it was (image: the
// state copied into an Image, encoded into a buffer, wrapped in another).
// held-B/key is the heap the backup holds while it is sent, apply-held-ms
// how long it kept the apply loop from the state machine (the Image's read
// lock; the freeze's write lock).
//
//	go test -run '^$' -bench Backup1M -benchtime 3x ./cluster
func BenchmarkBackup1M(b *testing.B) {
	const keys = 1_000_000
	f := fsm.New(fsm.Config{})
	logs := make([]*raft.Log, 0, 256)
	for i := range keys {
		cmd := fsm.Acquire{Key: fmt.Sprintf("svc/orders/shard-%07d", i), Holder: fmt.Sprintf("worker-%04d", i%1000), TTL: 10 * time.Second, RequestID: fmt.Sprintf("%024x", i)}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 3, Type: raft.LogCommand, Data: fsm.Encode(cmd)})
		if len(logs) == cap(logs) || i == keys-1 {
			f.ApplyBatch(logs)
			logs = logs[:0]
		}
	}
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			z := f.Freeze()
			b.ReportMetric(float64(time.Since(start).Microseconds())/1e3, "apply-held-ms")
			held, kept := heapGrowth(func() any {
				s, err := openFrozen(z, "n1", 3, time.Now(), nil)
				if err != nil {
					b.Fatal(err)
				}
				return s
			})
			s := kept.(*BackupStream)
			if _, err := s.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
			s.Close()
			b.ReportMetric(float64(held)/keys, "held-B/key")
		}
	})
	b.Run("image", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			held, kept := heapGrowth(func() any {
				start := time.Now()
				img := f.Image()
				b.ReportMetric(float64(time.Since(start).Microseconds())/1e3, "apply-held-ms")
				var snap bytes.Buffer
				if err := img.Encode(&snap); err != nil {
					b.Fatal(err)
				}
				data, err := encodeBackup(BackupMeta{Keys: len(img.Keys)}, snap.Bytes())
				if err != nil {
					b.Fatal(err)
				}
				return data // what the answer held while it was sent
			})
			runtime.KeepAlive(kept)
			b.ReportMetric(float64(held)/keys, "held-B/key")
		}
	})
}
