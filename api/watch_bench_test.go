package api

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/internal/testutil"
)

// BenchmarkWatchFanout measures the delivery of watch events to 1,000
// watchers of one key, and to 1,000 watchers of a key each: the latency from
// the entry's apply on the node (seen by an in-process subscription) to its
// arrival at each watcher through HTTP and the Go client, and the CPU time of
// the whole process (server and watchers) per event per watcher. Each
// iteration commits 100 grants and 100 releases, one every 100ms (one key)
// or 10ms (a key per watcher).
//
//	go test -run '^$' -bench BenchmarkWatchFanout -benchtime 1x ./api/
func BenchmarkWatchFanout(b *testing.B) {
	for _, tc := range []struct {
		name     string
		watchers int
		keys     int
		every    time.Duration
		mode     fanoutMode
	}{
		{"1000-watchers-1-key", 1000, 1, 100 * time.Millisecond, sharedWatches},
		// The same watches, each on a stream of its own
		// (WatchOptions.Private): the node writes each event 1,000 times.
		{"1000-private-watchers-1-key", 1000, 1, 100 * time.Millisecond, privateWatches},
		{"1000-watchers-1000-keys", 1000, 1000, 10 * time.Millisecond, sharedWatches},
		// Watchers that only read the frames' ids: the node's share of
		// the fan-out, with little of the watchers' decoding.
		{"1000-raw-readers-1-key", 1000, 1, 100 * time.Millisecond, rawReaders},
	} {
		b.Run(tc.name, func(b *testing.B) { benchFanout(b, tc.watchers, tc.keys, tc.every, tc.mode) })
	}
	// The Go client's watchers in a process of their own (this test binary
	// run again): the node's CPU and the watchers' are told apart, though
	// they still share the two cores.
	b.Run("1000-watchers-1-key-other-process", func(b *testing.B) { benchFanoutProcess(b, 1000, 100*time.Millisecond, sharedWatches) })
	b.Run("1000-private-watchers-1-key-other-process", func(b *testing.B) {
		benchFanoutProcess(b, 1000, 100*time.Millisecond, privateWatches)
	})
	// The same with raw readers in the other process: what is left is
	// mostly the node's share, against the floor of scripts/fanoutfloor.
	b.Run("1000-raw-readers-1-key-other-process", func(b *testing.B) { benchFanoutProcess(b, 1000, 100*time.Millisecond, rawReaders) })
}

// fanoutMode is how the watchers of a fan-out benchmark read.
type fanoutMode string

const (
	// sharedWatches are the Go client's watches as they come: the
	// watches of one key share a stream.
	sharedWatches fanoutMode = "shared"
	// privateWatches are the Go client's watches on streams of their own.
	privateWatches fanoutMode = "private"
	// rawReaders read the stream's frames without the Go client, one
	// stream each.
	rawReaders fanoutMode = "raw"
)

func benchNode(b *testing.B) (string, *cluster.Node) {
	b.Helper()
	addrs := testutil.FreeAddrs(b, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Error})
	n, err := cluster.New(cluster.Config{ID: "n1", DataDir: filepath.Join(b.TempDir(), "n1"), RaftBind: addrs[0], HTTPAdvertise: ln.Addr().String(),
		Peers: []cluster.Peer{{ID: "n1", Addr: addrs[0]}}, NoSync: true, Logger: log,
		HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond, LeaderLeaseTimeout: 250 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(NewServer(n, log))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	b.Cleanup(func() { srv.Close(); n.Close() })
	testutil.Eventually(b, 15*time.Second, func() error {
		if !n.Ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	return srv.URL, n
}

// arrival is one event's arrival at a watcher.
type arrival struct {
	index uint64
	at    time.Time
}

// benchFanout commits an event every interval (so that the latency is the
// delivery's, not a backlog's) and collects every delivery.
func benchFanout(b *testing.B, watchers, keys int, every time.Duration, mode fanoutMode) {
	url, node := benchNode(b)
	// Many streams: give the client enough connections.
	c := client.New([]string{url}, client.WithHTTPClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: watchers + 16, MaxConnsPerHost: 0}}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := func(i int) string { return fmt.Sprintf("bench/%04d", i%keys) }
	var mu sync.Mutex
	arrivals := make([][]arrival, watchers)
	var started sync.WaitGroup
	for w := 0; w < watchers; w++ {
		started.Add(1)
		if mode == rawReaders {
			go rawReader(b, ctx, url, key(w), &started, func(index uint64, at time.Time) {
				mu.Lock()
				arrivals[w] = append(arrivals[w], arrival{index, at})
				mu.Unlock()
			})
			continue
		}
		go noteArrivals(c.Watch(ctx, client.WatchOptions{Key: key(w), Private: mode == privateWatches}), &started, func(index uint64, at time.Time) {
			mu.Lock()
			arrivals[w] = append(arrivals[w], arrival{index, at})
			mu.Unlock()
		})
	}
	started.Wait()
	// The CPU counts the warm-up's deliveries, as want does.
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	warmUp(b, ctx, c, every, key)
	// The probe: an in-process subscription that notes when each entry is
	// applied.
	probe, err := node.Feed().Subscribe("bench/", false, node.Feed().Last())
	if err != nil {
		b.Fatal(err)
	}
	defer probe.Close()
	applied := map[uint64]time.Time{}
	var pmu sync.Mutex
	go func() {
		for {
			bt, err := probe.Next(ctx)
			if err != nil {
				return
			}
			now := time.Now()
			pmu.Lock()
			for _, ev := range bt.Events {
				applied[ev.Index] = now
			}
			pmu.Unlock()
		}
	}()
	const perIter = 100
	b.ResetTimer()
	events := 2 * warmUpPairs
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; i < b.N; i++ {
		for j := 0; j < perIter; j++ {
			grantAndRelease(b, ctx, c, tick, key(j))
			events += 2
		}
	}
	// Every watcher of a key gets that key's events.
	want := events * watchers / keys
	if keys > 1 {
		want = events // each event goes to the one watcher of its key
	}
	testutil.Eventually(b, 2*time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		got := 0
		for _, a := range arrivals {
			got += len(a)
		}
		if got < want {
			return fmt.Errorf("%d of %d deliveries", got, want)
		}
		return nil
	})
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	var lat []time.Duration
	pmu.Lock()
	mu.Lock()
	for _, as := range arrivals {
		for _, a := range as {
			if at, ok := applied[a.index]; ok {
				lat = append(lat, a.at.Sub(at))
			}
		}
	}
	mu.Unlock()
	pmu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		b.Fatal("no latencies")
	}
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(want), "cpu-us/delivery")
	b.ReportMetric(float64(len(lat)), "deliveries")
}

// benchFanoutProcess is a one-key case of BenchmarkWatchFanout, its
// watchers reading as mode says, with the watchers in another process:
// TestWatchFanoutWatchers run by this test binary. Latency compares wall
// clocks of the two processes on one machine.
func benchFanoutProcess(b *testing.B, watchers int, every time.Duration, mode fanoutMode) {
	url, node := benchNode(b)
	c := client.New([]string{url})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const key = "bench/0000"
	const perIter = 100
	want := 2 * (perIter*b.N + warmUpPairs) * watchers
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestWatchFanoutWatchers$")
	cmd.Env = append(os.Environ(), "FENCED_FANOUT_URL="+url, "FENCED_FANOUT_KEY="+key,
		"FENCED_FANOUT_WATCHERS="+strconv.Itoa(watchers), "FENCED_FANOUT_WANT="+strconv.Itoa(want),
		"FENCED_FANOUT_MODE="+string(mode))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait() //nolint:errcheck // it ends with its output
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "ready" {
	}
	// The CPU counts the warm-up's deliveries, as want does.
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	warmUp(b, ctx, c, every, func(int) string { return key })
	probe, err := node.Feed().Subscribe("bench/", false, node.Feed().Last())
	if err != nil {
		b.Fatal(err)
	}
	defer probe.Close()
	applied := map[uint64]int64{}
	var pmu sync.Mutex
	go func() {
		for {
			bt, err := probe.Next(ctx)
			if err != nil {
				return
			}
			now := time.Now().UnixNano()
			pmu.Lock()
			for _, ev := range bt.Events {
				applied[ev.Index] = now
			}
			pmu.Unlock()
		}
	}()
	b.ResetTimer()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; i < b.N*perIter; i++ {
		grantAndRelease(b, ctx, c, tick, key)
	}
	// The watchers print each arrival ("index unix-nanos"), then the
	// changes they were handed twice ("duplicates n") and their CPU ("cpu
	// nanos") once they have every delivery.
	var lat []time.Duration
	var watcherCPU time.Duration
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) != 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		if f[0] == "duplicates" {
			if n > 0 {
				b.Errorf("the watchers were handed %d changes twice", n)
			}
			continue
		}
		if f[0] == "cpu" {
			watcherCPU = time.Duration(n)
			break
		}
		idx, _ := strconv.ParseUint(f[0], 10, 64)
		pmu.Lock()
		if at, ok := applied[idx]; ok {
			lat = append(lat, time.Duration(n-at))
		}
		pmu.Unlock()
	}
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	nodeCPU := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	if len(lat) == 0 {
		b.Fatal("no latencies")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(float64(nodeCPU.Microseconds())/float64(want), "node-cpu-us/delivery")
	b.ReportMetric(float64(watcherCPU.Microseconds())/float64(want), "watchers-cpu-us/delivery")
	b.ReportMetric(float64(len(lat)), "deliveries")
}

// TestWatchFanoutWatchers is the watchers' process of
// benchFanoutProcess; without its environment it does nothing. Each
// watcher notes its arrivals in a slice of its own and counts them with an
// atomic add: the process's own bookkeeping is no lock and no channel send
// per delivery, so that its CPU is the watchers'. FENCED_FANOUT_MODE says
// how the watchers read (a fanoutMode: shared, private or raw), and
// FENCED_FANOUT_CPUPROFILE names a file for the process's CPU profile.
func TestWatchFanoutWatchers(t *testing.T) {
	url := os.Getenv("FENCED_FANOUT_URL")
	if url == "" {
		t.Skip("run by BenchmarkWatchFanout")
	}
	watchers, _ := strconv.Atoi(os.Getenv("FENCED_FANOUT_WATCHERS"))
	want, _ := strconv.Atoi(os.Getenv("FENCED_FANOUT_WANT"))
	key := os.Getenv("FENCED_FANOUT_KEY")
	mode := fanoutMode(os.Getenv("FENCED_FANOUT_MODE"))
	c := client.New([]string{url}, client.WithHTTPClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: watchers + 16}}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	arrivals := make([][]arrival, watchers)
	// counted admits a delivery (one past want is not noted); noted,
	// added after the note, closes done at want, so that every note
	// happens before done closes. A watcher's change at or before the
	// last it noted is a duplicate: counted apart, and never noted.
	var counted, noted, duplicates atomic.Int64
	done := make(chan struct{})
	var started sync.WaitGroup
	for w := 0; w < watchers; w++ {
		started.Add(1)
		arrivals[w] = make([]arrival, 0, want/watchers+1)
		var last uint64
		note := func(index uint64, at time.Time) {
			if index <= last {
				duplicates.Add(1)
				return
			}
			last = index
			if counted.Add(1) > int64(want) {
				return
			}
			arrivals[w] = append(arrivals[w], arrival{index, at})
			if noted.Add(1) == int64(want) {
				close(done)
			}
		}
		if mode == rawReaders {
			go rawReader(t, ctx, url, key, &started, note)
			continue
		}
		go noteArrivals(c.Watch(ctx, client.WatchOptions{Key: key, Private: mode == privateWatches}), &started, note)
	}
	started.Wait()
	if path := os.Getenv("FENCED_FANOUT_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	fmt.Println("ready")
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Errorf("%d of %d deliveries", noted.Load(), want)
		return
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	out := bufio.NewWriter(os.Stdout)
	for _, as := range arrivals {
		for _, a := range as {
			fmt.Fprintf(out, "%d %d\n", a.index, a.at.UnixNano())
		}
	}
	fmt.Fprintf(out, "duplicates %d\n", duplicates.Load())
	fmt.Fprintf(out, "cpu %d\n", ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano())
	out.Flush()
}

// warmUpPairs is how many grants and releases a fan-out benchmark commits
// before it times any: the first changes after a thousand watches started
// find their process warming up (and the watches of one key moving onto
// the stream they share), which is not the delivery the benchmark times.
// Their deliveries are counted in the CPU per delivery, not in the latency.
const warmUpPairs = 5

// warmUp commits warmUpPairs grants and releases, of key(0), key(1), ...
func warmUp(b *testing.B, ctx context.Context, c *client.Client, every time.Duration, key func(int) string) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for j := 0; j < warmUpPairs; j++ {
		grantAndRelease(b, ctx, c, tick, key(j))
	}
}

// grantAndRelease commits a grant of key and its release, each at the next
// tick, so that each event's delivery is timed alone, not behind a backlog.
func grantAndRelease(b *testing.B, ctx context.Context, c *client.Client, tick *time.Ticker, key string) {
	<-tick.C
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: key, Holder: "h", TTL: "1m"})
	if err != nil {
		b.Fatal(err)
	}
	<-tick.C
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: key, Holder: "h", Token: g.Token}); err != nil {
		b.Fatal(err)
	}
}

// noteArrivals reads a Go client's watch stream: its first sync says the
// watcher started, and each grant or release after it is noted with the
// time it arrived.
func noteArrivals(ch <-chan client.WatchEvent, started *sync.WaitGroup, note func(uint64, time.Time)) {
	first := true
	for ev := range ch {
		if first && ev.Type == client.WatchSync {
			first = false
			started.Done()
			continue
		}
		if ev.Type == "granted" || ev.Type == "released" {
			note(ev.Index, time.Now())
		}
	}
}

// rawReader reads a watch stream and notes the arrival of each change by its
// id line alone, without decoding the JSON.
func rawReader(b testing.TB, ctx context.Context, url, key string, started *sync.WaitGroup, note func(uint64, time.Time)) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/watch?key="+key, nil)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		b.Error(err)
		started.Done()
		return
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 4096)
	synced := false
	var id []byte
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		if rest, ok := bytes.CutPrefix(line, []byte("id: ")); ok {
			id = append(id[:0], bytes.TrimSpace(rest)...)
			continue
		}
		name, ok := bytes.CutPrefix(line, []byte("event: "))
		if !ok {
			continue
		}
		if bytes.HasPrefix(name, []byte("sync")) {
			if !synced {
				synced = true
				started.Done()
			}
			continue
		}
		if n, err := strconv.ParseUint(string(id), 10, 64); err == nil && synced {
			note(n, time.Now())
		}
	}
}
