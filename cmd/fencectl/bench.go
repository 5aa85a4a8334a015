package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/bench"
	"github.com/fenced/fenced/internal/synchttp"
)

var benchCommand = command{
	name:    "bench",
	args:    "[WORKLOAD...]",
	summary: "measure throughput and latency of a cluster",
	help: `
Drives a workload against the cluster for --duration at each client count of
--clients and prints ops/s and latency percentiles, with a histogram of the
latencies of the last run. Workloads:

  acquire       fresh keys, never released (one grant per operation)
  cycle         acquire then release of a key per client (two commits)
  verify        linearizable verify of a held grant
  keepalive     keepalive of a holder with four keys (no log write)
  contended     clients take turns on one key with waiting acquires; an
                operation is one grant and its release
  mix           70% verify, 20% keepalive, 10% cycle
  sem-cycle     clients take permits of one 4-permit semaphore key with
                waiting acquires; an operation is a permit and its release
  shared-cycle  shared grants of one key, acquired and released
  multi-cycle   all-or-nothing two-key sets, waiting: client i takes keys i
                and i+1 of a ring of 8, so a set overlaps its neighbours';
                an operation is the set and the release of both keys

With no WORKLOAD, all of them run in that order. Every result shows the CPU
time per operation of this process and, for a cluster on this machine (or
the processes --server-pids names), of the cluster's processes, summed.
Point --endpoints at the leader to measure fenced rather than forwarding. Keys are written under a
bench/ prefix and stay in the cluster (every key's high-water mark is kept).`,
	examples: `
fencectl bench verify --clients 1,16,64 --duration 10s
fencectl bench cycle acquire -o json > results.json
fencectl bench sem-cycle shared-cycle multi-cycle --clients 16,64 --transport std`,
	new: func() runner { return &benchCmd{} },
}

type benchCmd struct {
	clients   string
	duration  time.Duration
	ttl       time.Duration
	noHist    bool
	cpuProf   string
	transport string
	batching  bool
	pids      string
}

func (b *benchCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&b.clients, "clients", "1,16,64", "comma-separated client counts; each is one run")
	fs.DurationVar(&b.duration, "duration", 10*time.Second, "length of each run")
	fs.DurationVar(&b.ttl, "ttl", 30*time.Second, "TTL of the grants the workloads make")
	fs.BoolVar(&b.noHist, "no-histogram", false, "do not print the latency histogram")
	fs.StringVar(&b.transport, "transport", transportLean, "how the benchmark client sends requests: "+transportLean+
		" (each client's requests written and read on its own goroutine over a kept-alive connection, so the client takes little of the CPU it measures), or "+
		transportStd+" (net/http's Transport, as client.Client uses it: an end-to-end figure for a Go application)")
	fs.BoolVar(&b.batching, "batching", true, "let the client coalesce concurrent verifies and keepalives into batch requests, as client.Client does by default; --batching=false sends one request per operation, for comparison")
	fs.StringVar(&b.pids, "server-pids", serverPIDsAuto, "PIDs of the cluster's processes (comma-separated) whose CPU time (/proc/PID/stat) each result shows per operation, summed (SERVER CPU/OP); "+
		serverPIDsAuto+": the processes of this machine that listen on the members' HTTP addresses (Linux); none: no server figure")
	fs.StringVar(&b.cpuProf, "cpuprofile", "", "write a Go CPU profile of the benchmark client to this file (the server's is at /debug/pprof/ with --enable-pprof)")
	completeFlag(fs, "transport", transportLean, transportStd)
	completeFlag(fs, "cpuprofile", completeFiles)
}

func (b *benchCmd) run(ctx context.Context, e *env, args []string) error {
	workloads := args
	if len(workloads) == 0 {
		workloads = bench.Workloads
	}
	for _, w := range workloads {
		if !slices.Contains(bench.Workloads, w) {
			return usageErr("bench", fmt.Sprintf("unknown workload %q (one of %s)", w, strings.Join(bench.Workloads, ", ")))
		}
	}
	counts, err := parseCounts(b.clients)
	if err != nil {
		return usageErr("bench", err.Error())
	}
	if b.duration <= 0 {
		return usageErr("bench", "--duration must be positive")
	}
	if b.transport != transportLean && b.transport != transportStd {
		return usageErr("bench", fmt.Sprintf("--transport: %q is neither %s nor %s", b.transport, transportLean, transportStd))
	}
	if b.cpuProf != "" {
		stop, err := startCPUProfile(b.cpuProf)
		if err != nil {
			return err
		}
		defer stop()
	}
	serverCPU, err := b.serverCPU(ctx, e)
	if err != nil {
		return err
	}
	var results []*bench.Result
	for _, w := range workloads {
		for _, n := range counts {
			c := b.client(e)
			progress := progressFor(e, w, n, b.duration)
			r, err := bench.Run(ctx, c, bench.Config{Workload: w, Clients: n, Duration: b.duration, TTL: b.ttl,
				Progress: progress, CPU: processCPU, ServerCPU: serverCPU})
			c.CloseIdleConnections()
			if progress != nil {
				fmt.Fprint(e.stderr, "\r\033[K")
			}
			if err != nil {
				return fmt.Errorf("%s with %d clients: %w", w, n, err)
			}
			r.Transport = b.transport
			r.Batching = b.batching
			results = append(results, r)
		}
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, results)
	}
	t := newTable(e.stdout, "WORKLOAD", "CLIENTS", "OPS/S", "P50", "P90", "P99", "MAX", "ERRORS", "CLIENT CPU/OP", "SERVER CPU/OP")
	for _, r := range results {
		t.row(r.Workload, strconv.Itoa(r.Clients), fmt.Sprintf("%.0f", r.OpsPerSec), ms(r.P50), ms(r.P90), ms(r.P99), ms(r.Max), strconv.FormatInt(r.Errors, 10), us(r.ClientCPUPerOp), us(r.ServerCPUPerOp))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.FirstErr != "" {
			fmt.Fprintf(e.stderr, "%s/%d: first error: %s\n", r.Workload, r.Clients, r.FirstErr)
		}
	}
	if !b.noHist && len(results) > 0 {
		last := results[len(results)-1]
		fmt.Fprintf(e.stdout, "\nlatency histogram of %s with %d clients\n", last.Workload, last.Clients)
		histogram(e.stdout, last.Latencies)
	}
	return nil
}

// Values of --server-pids besides a list.
const (
	serverPIDsAuto = "auto"
	serverPIDsNone = "none"
)

// serverCPU returns the reader of the cluster's CPU time that --server-pids
// asks for, or nil for none. auto finds the processes of this machine that
// listen on the members' HTTP addresses; finding none is not an error (a
// remote cluster), the results then show no server figure.
func (b *benchCmd) serverCPU(ctx context.Context, e *env) (func() (time.Duration, error), error) {
	var pids []int
	switch b.pids {
	case serverPIDsNone:
		return nil, nil
	case serverPIDsAuto:
		addrs := append([]string(nil), e.g.endpoints...)
		if st, err := e.client().Status(ctx); err == nil {
			for _, m := range st.Members {
				addrs = append(addrs, m.HTTPAddr)
			}
		}
		pids = bench.ListeningPIDs(hostPorts(addrs))
		if len(pids) == 0 {
			return nil, nil
		}
	default:
		for _, f := range strings.Split(b.pids, ",") {
			pid, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || pid <= 0 {
				return nil, usageErr("bench", fmt.Sprintf("--server-pids: %q is not a PID (a comma-separated list, %s or %s)", f, serverPIDsAuto, serverPIDsNone))
			}
			pids = append(pids, pid)
		}
	}
	if _, err := bench.ProcessesCPU(pids); err != nil {
		return nil, fmt.Errorf("--server-pids: %w", err)
	}
	fmt.Fprintf(e.stderr, "server CPU from processes %v\n", pids)
	return func() (time.Duration, error) { return bench.ProcessesCPU(pids) }, nil
}

// hostPorts strips the scheme and path of endpoint URLs, keeping host:port.
func hostPorts(addrs []string) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if _, rest, ok := strings.Cut(a, "://"); ok {
			a = rest
		}
		a, _, _ = strings.Cut(a, "/")
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Benchmark client transports.
const (
	transportLean = "lean"
	transportStd  = "std"
)

// client returns the client.Client of one run.
func (b *benchCmd) client(e *env) *client.Client {
	if b.transport == transportStd {
		return e.waitingClient(client.WithBatching(b.batching))
	}
	return e.waitingClient(client.WithBatching(b.batching), client.WithHTTPClient(&http.Client{Transport: &synchttp.Transport{TLS: e.g.tls.cfg}}))
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("--clients: %q is not a client count (1..4096)", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }

func us(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fµs", float64(d)/1e3)
}

// progressFor returns the progress bar of a run when stderr is a terminal,
// and nil (no progress) when it is a file or a pipe, which would keep the
// bar's carriage returns and escape sequences.
func progressFor(e *env, workload string, clients int, total time.Duration) func(int64, time.Duration) {
	f, ok := e.stderr.(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	return progressBar(e.stderr, workload, clients, total)
}

// progressBar draws a one-line bar on w while a run goes.
func progressBar(w io.Writer, workload string, clients int, total time.Duration) func(int64, time.Duration) {
	return func(done int64, elapsed time.Duration) {
		frac := min(1, float64(elapsed)/float64(total))
		const width = 30
		filled := int(frac * width)
		fmt.Fprintf(w, "\r\033[K%-9s %3d clients [%s%s] %3.0f%% %d ops", workload, clients,
			strings.Repeat("#", filled), strings.Repeat(".", width-filled), frac*100, done)
	}
}

// histogram prints latencies in logarithmic buckets (powers of two from
// 50µs), one bar per bucket.
func histogram(w io.Writer, lats []time.Duration) {
	if len(lats) == 0 {
		return
	}
	const first = 50 * time.Microsecond
	counts := map[int]int{}
	top := 0
	for _, l := range lats {
		b := 0
		if l > first {
			b = int(math.Ceil(math.Log2(float64(l) / float64(first))))
		}
		counts[b]++
		top = max(top, b)
	}
	most := 0
	for _, c := range counts {
		most = max(most, c)
	}
	for b := 0; b <= top; b++ {
		upper := first << b
		bar := strings.Repeat("█", int(math.Ceil(40*float64(counts[b])/float64(most))))
		if counts[b] == 0 {
			bar = ""
		}
		fmt.Fprintf(w, "  <= %-9s %-40s %d\n", upper, bar, counts[b])
	}
}

// startCPUProfile profiles the client, whose CPU shares the machine with the
// cluster in a loopback benchmark and so counts in every figure.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
