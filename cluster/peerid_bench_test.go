package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The accept side's check of one RPC's sender (the common case: the
// certificate's CN is the sender).
func BenchmarkCheckRPC(b *testing.B) {
	cfgs := pkiLayers(b)
	l := layer(b, cfgs["n1"], &syncBuffer{})
	conn := acceptOne(b, l, layer(b, cfgs["n2"], &syncBuffer{}), "n1")
	h := raft.RPCHeader{ID: []byte("n2")}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := l.CheckRPC(conn, h); err != nil {
			b.Fatal(err)
		}
	}
}

// One AppendEntries round trip (a heartbeat's size) between two nodes over
// mutual TLS on loopback, with the server ids checked in both directions and
// without (as before).
func BenchmarkAppendEntriesRoundTrip(b *testing.B) {
	for _, bc := range []struct {
		name string
		skip bool
	}{{"checked", false}, {"unchecked", true}} {
		b.Run(bc.name, func(b *testing.B) {
			cfgs := pkiLayers(b)
			trans := func(id string) boundTransport {
				l := layer(b, cfgs[id], &syncBuffer{}, withoutIDCheck(bc.skip))
				nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: l, MaxPool: 2, Timeout: 5 * time.Second,
					Logger: hclog.NewNullLogger(), CheckRPC: l.CheckRPC})
				b.Cleanup(func() { nt.Close() })
				go func() {
					for rpc := range nt.Consumer() {
						rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
					}
				}()
				return boundTransport{nt}
			}
			n1, n2 := trans("n1"), trans("n2")
			req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte(n2.LocalAddr())},
				Term: 1, PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 1}
			var resp raft.AppendEntriesResponse
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := n2.AppendEntries("n1", n1.LocalAddr(), req, &resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The dialing side's cost per RPC: the address handed to the transport
// carries the server id.
func BenchmarkBoundAddr(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if a := boundAddr("fenced-2", "fenced-2.fenced-headless.default.svc:7701"); len(a) == 0 {
			b.Fatal("empty")
		}
	}
}
