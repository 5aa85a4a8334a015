package bench

import (
	"net"
	"os"
	"runtime"
	"slices"
	"testing"
)

func TestProcessesCPUAndListeningPIDs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	before, err := ProcessesCPU([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until /proc shows at least one tick more.
	after := before
	for x := 0; after == before; x++ {
		for i := 0; i < 1e7; i++ {
			x ^= i
		}
		if after, err = ProcessesCPU([]int{os.Getpid()}); err != nil {
			t.Fatal(err)
		}
	}
	if after < before+clockTick {
		t.Fatalf("CPU went from %v to %v", before, after)
	}
	if _, err := ProcessesCPU([]int{1 << 30}); err == nil {
		t.Fatal("a process that does not exist has a CPU time")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if pids := ListeningPIDs([]string{ln.Addr().String()}); !slices.Equal(pids, []int{os.Getpid()}) {
		t.Fatalf("ListeningPIDs(%s) = %v, want [%d]", ln.Addr(), pids, os.Getpid())
	}
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln2.Addr().String()
	ln2.Close()
	if pids := ListeningPIDs([]string{addr, "192.0.2.1:80"}); len(pids) != 0 {
		t.Fatalf("ListeningPIDs of a closed port and a remote address = %v", pids)
	}
}

func TestProcessRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	rss, err := ProcessRSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Fatalf("this test's RSS: %d, %v", rss, err)
	}
	if _, err := ProcessRSS(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
