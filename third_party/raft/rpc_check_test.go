package raft

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// NetworkTransportConfig.CheckRPC sees every incoming RPC, heartbeats
// included, with the connection it came on, before anything processes it;
// an RPC it refuses never reaches the consumer or the heartbeat handler, and
// its sender gets an error instead of an answer.
func TestNetworkTransport_CheckRPCDropsRefusedRPCs(t *testing.T) {
	var mu sync.Mutex
	var checked []string
	var wrongConn error
	var local string
	check := func(conn net.Conn, h RPCHeader) error {
		mu.Lock()
		defer mu.Unlock()
		checked = append(checked, string(h.ID))
		if conn == nil || conn.LocalAddr().String() != local {
			wrongConn = errors.New("the check was not given the accepted connection")
		}
		if string(h.ID) != "n2" {
			return errors.New("not n2")
		}
		return nil
	}
	trans1, err := NewTCPTransportWithConfig("127.0.0.1:0", nil, &NetworkTransportConfig{
		MaxPool: 2, Timeout: 2 * time.Second, Logger: newTestLogger(t), CheckRPC: check})
	if err != nil {
		t.Fatal(err)
	}
	defer trans1.Close()
	local = string(trans1.LocalAddr())

	var heard []string
	heardCh := make(chan struct{}, 16)
	record := func(rpc RPC) {
		mu.Lock()
		heard = append(heard, string(rpc.Command.(WithRPCHeader).GetRPCHeader().ID))
		mu.Unlock()
		switch cmd := rpc.Command.(type) {
		case *AppendEntriesRequest:
			rpc.Respond(&AppendEntriesResponse{Success: true}, nil)
		case *RequestVoteRequest:
			rpc.Respond(&RequestVoteResponse{Granted: true}, nil)
		case *RequestPreVoteRequest:
			rpc.Respond(&RequestPreVoteResponse{Granted: true}, nil)
		case *InstallSnapshotRequest:
			_, _ = new(bytes.Buffer).ReadFrom(rpc.Reader)
			rpc.Respond(&InstallSnapshotResponse{Success: true}, nil)
		case *TimeoutNowRequest:
			rpc.Respond(&TimeoutNowResponse{}, nil)
		default:
			t.Errorf("unexpected command %T", cmd)
		}
		heardCh <- struct{}{}
	}
	trans1.SetHeartbeatHandler(record)
	go func() {
		for rpc := range trans1.Consumer() {
			record(rpc)
		}
	}()

	trans2, err := NewTCPTransportWithLogger("127.0.0.1:0", nil, 2, 2*time.Second, newTestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer trans2.Close()

	target := trans1.LocalAddr()
	send := func(id string) map[string]error {
		h := RPCHeader{ProtocolVersion: ProtocolVersionMax, ID: []byte(id), Addr: []byte("somewhere")}
		errs := map[string]error{}
		errs["append entries"] = trans2.AppendEntries("n1", target, &AppendEntriesRequest{RPCHeader: h, Term: 1, PrevLogEntry: 1, Entries: []*Log{{Index: 2, Term: 1}}}, &AppendEntriesResponse{})
		errs["heartbeat"] = trans2.AppendEntries("n1", target, &AppendEntriesRequest{RPCHeader: h, Term: 1}, &AppendEntriesResponse{})
		errs["request vote"] = trans2.RequestVote("n1", target, &RequestVoteRequest{RPCHeader: h, Term: 1}, &RequestVoteResponse{})
		errs["request pre-vote"] = trans2.RequestPreVote("n1", target, &RequestPreVoteRequest{RPCHeader: h, Term: 1}, &RequestPreVoteResponse{})
		errs["install snapshot"] = trans2.InstallSnapshot("n1", target, &InstallSnapshotRequest{RPCHeader: h, Term: 1, Size: 3}, &InstallSnapshotResponse{}, bytes.NewReader([]byte("abc")))
		errs["timeout now"] = trans2.TimeoutNow("n1", target, &TimeoutNowRequest{RPCHeader: h}, &TimeoutNowResponse{})
		return errs
	}

	for what, err := range send("impostor") {
		if err == nil {
			t.Errorf("a refused %s was answered", what)
		}
	}
	for what, err := range send("n2") {
		if err != nil {
			t.Errorf("an accepted %s failed: %v", what, err)
		}
	}
	for i := 0; i < 6; i++ {
		select {
		case <-heardCh:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 6 accepted RPCs were processed", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range heard {
		if id != "n2" {
			t.Errorf("an RPC from %q was processed after the check refused it", id)
		}
	}
	if len(heard) != 6 || len(checked) != 12 {
		t.Errorf("processed %d RPCs (want 6), checked %d (want 12)", len(heard), len(checked))
	}
	if wrongConn != nil {
		t.Error(wrongConn)
	}
}
