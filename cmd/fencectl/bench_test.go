package main

import (
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/internal/bench"
)

// Every workload runs and measures something; the table and the JSON carry
// the figures. Speed itself is measured with the command, not asserted here.
func TestBench(t *testing.T) {
	t.Parallel()
	cl := shared.get(t)
	code, stdout, stderr := runCtl(t, nil, "--endpoints", endpoints(cl), "-o", "json", "bench", "--clients", "1,2", "--duration", "300ms")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var rs []struct {
		Workload  string  `json:"workload"`
		Clients   int     `json:"clients"`
		Ops       int64   `json:"ops"`
		Errors    int64   `json:"errors"`
		OpsPerSec float64 `json:"ops_per_sec"`
		P99       int64   `json:"p99_ns"`
		ClientCPU int64   `json:"client_cpu_per_op_ns"`
		FirstErr  string  `json:"first_error"`
	}
	if err := json.Unmarshal([]byte(stdout), &rs); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(rs) != 2*len(bench.Workloads) {
		t.Fatalf("%d results, want %d workloads x 2 client counts", len(rs), len(bench.Workloads))
	}
	for _, r := range rs {
		if r.Ops == 0 || r.OpsPerSec <= 0 || r.P99 <= 0 || r.Errors != 0 || r.ClientCPU <= 0 {
			t.Errorf("%s/%d measured nothing or failed: %+v", r.Workload, r.Clients, r)
		}
	}
	code, stdout, _ = runCtl(t, nil, "--endpoints", endpoints(cl), "bench", "verify", "--clients", "2", "--duration", "200ms")
	if code != 0 || !strings.Contains(stdout, "OPS/S") || !strings.Contains(stdout, "CLIENT CPU/OP") || !strings.Contains(stdout, "latency histogram") {
		t.Fatalf("table output: %d %s", code, stdout)
	}
	code, stdout, stderr = runCtl(t, nil, "--endpoints", endpoints(cl), "-o", "json", "bench", "cycle", "--clients", "2", "--duration", "200ms", "--transport", "std")
	if code != 0 || !strings.Contains(stdout, `"errors": 0`) || !strings.Contains(stdout, `"transport": "std"`) {
		t.Fatalf("net/http transport: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if code, _, _ := runCtl(t, nil, "bench", "--clients", "0"); code != 2 {
		t.Fatalf("bad --clients: exit %d", code)
	}
	if code, _, stderr := runCtl(t, nil, "bench", "--transport", "grpc"); code != 2 || !strings.Contains(stderr, "--transport") {
		t.Fatalf("bad --transport: exit %d %s", code, stderr)
	}
}

// The lock shapes' workloads run against a cluster through net/http's
// transport, as the comparison with etcd runs them: with more clients than
// the semaphore has permits, so that some acquires wait, and more than
// multi-cycle's ring has keys, so that some sets are wanted twice.
func TestBenchShapes(t *testing.T) {
	t.Parallel()
	cl := shared.get(t)
	code, stdout, stderr := runCtl(t, nil, "--endpoints", endpoints(cl), "-o", "json", "bench", "sem-cycle", "shared-cycle", "multi-cycle",
		"--clients", "10", "--duration", "500ms", "--transport", "std", "--server-pids", "none")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var rs []struct {
		Workload  string `json:"workload"`
		Clients   int    `json:"clients"`
		Ops       int64  `json:"ops"`
		Errors    int64  `json:"errors"`
		P99       int64  `json:"p99_ns"`
		Transport string `json:"transport"`
		FirstErr  string `json:"first_error"`
	}
	if err := json.Unmarshal([]byte(stdout), &rs); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Workload)
		if r.Ops == 0 || r.Errors != 0 || r.P99 <= 0 || r.Clients != 10 || r.Transport != "std" {
			t.Errorf("%s measured nothing or failed: %+v", r.Workload, r)
		}
	}
	if strings.Join(got, " ") != "sem-cycle shared-cycle multi-cycle" {
		t.Fatalf("workloads %v", got)
	}
}

func TestHistogram(t *testing.T) {
	var b strings.Builder
	histogram(&b, []time.Duration{10 * time.Microsecond, 80 * time.Microsecond, 90 * time.Microsecond, 3 * time.Millisecond})
	out := b.String()
	if !strings.Contains(out, "<= 50µs") || !strings.Contains(out, "<= 3.2ms") || strings.Count(out, "\n") != 7 {
		t.Fatalf("%s", out)
	}
}

// A bench of a cluster on this machine reports the server's CPU per
// operation, summed over the processes that serve the members' addresses
// (found through /proc, or named with --server-pids).
func TestBenchServerCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("server CPU comes from /proc")
	}
	t.Parallel()
	cl := shared.get(t)
	var nodes []string
	for _, n := range cl.Nodes {
		nodes = append(nodes, strconv.Itoa(n.PID()))
	}
	for _, pids := range []string{"auto", strings.Join(nodes, ",")} {
		code, stdout, stderr := runCtl(t, nil, "--endpoints", endpoints(cl), "-o", "json", "bench", "verify", "keepalive",
			"--clients", "2", "--duration", "300ms", "--server-pids", pids)
		if code != 0 {
			t.Fatalf("--server-pids %s: exit %d\n%s\n%s", pids, code, stdout, stderr)
		}
		var rs []struct {
			Workload  string `json:"workload"`
			ServerCPU int64  `json:"server_cpu_per_op_ns"`
		}
		if err := json.Unmarshal([]byte(stdout), &rs); err != nil || len(rs) != 2 {
			t.Fatalf("--server-pids %s: %v: %s", pids, err, stdout)
		}
		for _, r := range rs {
			if r.ServerCPU <= 0 {
				t.Errorf("--server-pids %s: %s: no server CPU per op: %s", pids, r.Workload, stdout)
			}
		}
	}
	if code, _, stderr := runCtl(t, nil, "bench", "--server-pids", "x"); code != 2 || !strings.Contains(stderr, "--server-pids") {
		t.Fatalf("bad --server-pids: exit %d %s", code, stderr)
	}
}
