package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
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
	}
	if err := json.Unmarshal([]byte(stdout), &rs); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(rs) != 12 {
		t.Fatalf("%d results, want 6 workloads x 2 client counts", len(rs))
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

func TestHistogram(t *testing.T) {
	var b strings.Builder
	histogram(&b, []time.Duration{10 * time.Microsecond, 80 * time.Microsecond, 90 * time.Microsecond, 3 * time.Millisecond})
	out := b.String()
	if !strings.Contains(out, "<= 50µs") || !strings.Contains(out, "<= 3.2ms") || strings.Count(out, "\n") != 7 {
		t.Fatalf("%s", out)
	}
}
