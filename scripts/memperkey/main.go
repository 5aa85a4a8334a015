// Command memperkey measures what held keys cost a real 3-node fenced
// cluster on this machine: each node's resident memory (RSS) and Go heap per
// held key, and, after kill -9 of every node, how long the restarted cluster
// takes to grant its first acquire.
//
//	go run ./scripts/memperkey -keys 1000000
//	go run ./scripts/memperkey -keys 200000 -node-args=--memory-limit=off
//
// It starts the nodes on free loopback ports (internal/proccluster), fills
// -keys keys with -clients concurrent clients (a holder per thousand keys, a TTL
// of -ttl so nothing expires), waits -settle, and prints per node: RSS and
// heap in use before and after, and the growth per key; live/k is the heap
// right after a collection it asks for once the other figures are read.
// With -backup it then takes a backup from the leader and prints what that
// cost: the most its RSS rose, and one client's acquire latencies meanwhile.
// Heap figures come from each node's /debug/pprof/heap (the nodes run with
// --enable-pprof).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/bench"
	"github.com/fenced/fenced/internal/proccluster"
)

func main() {
	keys := flag.Int("keys", 200000, "held keys to fill")
	clients := flag.Int("clients", 64, "concurrent filling clients")
	ttl := flag.Duration("ttl", time.Hour, "TTL of the grants (long enough that none expires)")
	settle := flag.Duration("settle", 10*time.Second, "wait after the fill before measuring")
	restart := flag.Bool("restart", true, "kill -9 every node afterwards, restart them and time the first acquire")
	flag.BoolVar(&backup, "backup", false, "after the fill, take a backup from the leader (GET /v1/snapshot) while one client acquires, and report what it cost the leader")
	binary := flag.String("binary", "", "fenced binary (default: built from this module)")
	nodeArgs := flag.String("node-args", "", "extra arguments for every node, space-separated")
	keep := flag.Bool("keep", false, "keep the data directories")
	flag.StringVar(&profileDir, "profile-dir", "", "write each node's heap profile (go tool pprof -sample_index=inuse_space) here after the fill")
	flag.Parse()
	if err := run(*keys, *clients, *ttl, *settle, *restart, *binary, strings.Fields(*nodeArgs), *keep); err != nil {
		fmt.Fprintln(os.Stderr, "memperkey:", err)
		os.Exit(1)
	}
}

// profileDir, when set, receives the nodes' heap profiles.
var profileDir string

// backup, when set, has the run measure a backup after the fill.
var backup bool

// saveHeapProfiles writes each node's heap profile to profileDir.
func saveHeapProfiles(c *proccluster.Cluster, lead *proccluster.Node, tag string) {
	if profileDir == "" {
		return
	}
	for _, n := range c.Nodes {
		role := "follower"
		if n.ID == lead.ID {
			role = "leader"
		}
		resp, err := http.Get(c.URL(n) + "/debug/pprof/heap")
		if err != nil {
			continue
		}
		f, err := os.Create(filepath.Join(profileDir, fmt.Sprintf("heap-%s-%s-%s.pprof", tag, n.ID, role)))
		if err == nil {
			_, _ = io.Copy(f, resp.Body)
			f.Close()
		}
		resp.Body.Close()
	}
}

// sample is one node's memory at one moment.
type sample struct {
	rss, heapInuse, heapAlloc uint64
	// peak is the largest RSS the process has had (VmHWM): after a
	// restart, what its restore and re-arm took at their height.
	peak uint64
	// live is HeapAlloc right after a collection the measurement asked
	// for, once RSS and the other figures were read: the live heap.
	live uint64
}

func run(keys, clients int, ttl, settle time.Duration, restart bool, binary string, nodeArgs []string, keep bool) error {
	dir, err := os.MkdirTemp("", "memperkey")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	args := append([]string{"--log-level", "info", "--enable-pprof"}, nodeArgs...)
	c, err := proccluster.Start(proccluster.Options{Dir: dir, Binary: binary, ExtraArgs: args})
	if err != nil {
		return err
	}
	defer c.Stop()
	ctx := context.Background()
	lead, err := c.Leader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	before := measureAll(c)
	cpu0, err := nodesCPU(c)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := fill(ctx, c, lead, keys, clients, ttl); err != nil {
		return err
	}
	fillTime := time.Since(t0)
	cpu1, err := nodesCPU(c)
	if err != nil {
		return err
	}
	fmt.Printf("filled %d keys with %d clients in %s (%.0f/s; a shared machine: not a throughput figure)\n",
		keys, clients, fillTime.Round(time.Millisecond), float64(keys)/fillTime.Seconds())
	fmt.Printf("the nodes' CPU during the fill: %.1f µs per key (user and system time of the three processes, from /proc)\n",
		float64(cpu1-cpu0)/1e3/float64(keys))
	time.Sleep(settle)
	// Leadership may have moved during the fill on a busy machine: the
	// roles are those of the moment of measuring.
	if lead, err = c.Leader(ctx, 30*time.Second); err != nil {
		return err
	}
	after := measureAll(c)
	report(c, lead, keys, before, after)
	saveHeapProfiles(c, lead, "filled")
	if backup {
		if err := measureBackup(ctx, c, lead, keys, ttl); err != nil {
			return err
		}
	}
	if !restart {
		return nil
	}
	for _, n := range c.Nodes {
		c.Kill(n)
	}
	for _, n := range c.Nodes {
		if err := c.StartNode(n); err != nil {
			return err
		}
	}
	first, err := firstAcquire(ctx, c, ttl)
	if err != nil {
		return err
	}
	fmt.Printf("restart after kill -9 of all nodes: first acquire granted %.2f s after the processes started\n", first.Seconds())
	time.Sleep(settle)
	lead, err = c.Leader(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Println("after the restart:")
	report(c, lead, keys, before, measureAll(c))
	saveHeapProfiles(c, lead, "restarted")
	return nil
}

func fill(ctx context.Context, c *proccluster.Cluster, lead *proccluster.Node, keys, clients int, ttl time.Duration) error {
	cl := client.New([]string{c.URL(lead)})
	var next, errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for {
				k := next.Add(1) - 1
				if k >= int64(keys) {
					return
				}
				// A holder per thousand keys: well under the default
				// --max-keys-per-holder.
				holder := fmt.Sprintf("mem/h%d", k/1000)
				for attempt := 0; ; attempt++ {
					_, err := cl.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("mem/%d", k), Holder: holder, TTL: ttl.String()})
					if err == nil {
						break
					}
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					if attempt > 20 {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}(i)
	}
	wg.Wait()
	if n := errs.Load(); n > 0 {
		fmt.Printf("%d acquires failed and were retried; first: %v\n", n, firstErr.Load())
	}
	if next.Load() < int64(keys) {
		return fmt.Errorf("fill stopped early: %v", firstErr.Load())
	}
	return nil
}

// measureBackup takes a backup from the leader, read as fast as it comes,
// while a sampler reads the leader's RSS every 5 ms and one client acquires
// fresh keys one after another; it prints the backup's size and time, the
// most the leader's RSS rose, and the acquires' latencies meanwhile.
func measureBackup(ctx context.Context, c *proccluster.Cluster, lead *proccluster.Node, keys int, ttl time.Duration) error {
	base := rss(lead.PID())
	stop := make(chan struct{})
	var peak atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := rss(lead.PID()); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var lat []time.Duration
	go func() {
		defer wg.Done()
		cl := client.New([]string{c.URL(lead)})
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			t := time.Now()
			if _, err := cl.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("mem/during-backup/%d", i), Holder: "mem/backup", TTL: ttl.String()}); err == nil {
				lat = append(lat, time.Since(t))
			}
		}
	}()
	time.Sleep(time.Second) // the acquires' latencies before the backup, for comparison
	t0 := time.Now()
	resp, err := http.Get(c.URL(lead) + "/v1/snapshot")
	var size int64
	if err == nil {
		size, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	took := time.Since(t0)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(10 * time.Microsecond)
	}
	rise := int64(peak.Load()) - int64(base)
	fmt.Printf("backup from the leader: %.1f MB in %s; the leader's RSS rose by at most %.1f MB (%d B a key) from %.1f MB\n",
		float64(size)/1e6, took.Round(time.Millisecond), float64(rise)/1e6, rise/int64(keys), float64(base)/1e6)
	fmt.Printf("one client's acquires over the backup and a second either side: %d, p50 %s, p99 %s, max %s\n",
		len(lat), q(0.5), q(0.99), q(1))
	return nil
}

func firstAcquire(ctx context.Context, c *proccluster.Cluster, ttl time.Duration) (time.Duration, error) {
	start := time.Now()
	cl := client.New(c.Endpoints(), client.WithAttemptTimeout(time.Second))
	for time.Since(start) < 5*time.Minute {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cl.Acquire(actx, client.AcquireRequest{Key: "mem/after-restart", Holder: "mem/restart", TTL: ttl.String()})
		cancel()
		if err == nil {
			return time.Since(start), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("no acquire granted within 5 minutes of the restart")
}

func measureAll(c *proccluster.Cluster) map[string]sample {
	out := map[string]sample{}
	for _, n := range c.Nodes {
		s := sample{rss: rss(n.PID())}
		s.peak, _ = bench.ProcessPeakRSS(n.PID())
		s.heapInuse, s.heapAlloc = heap(c.URL(n), false)
		_, s.live = heap(c.URL(n), true)
		out[n.ID] = s
	}
	return out
}

func report(c *proccluster.Cluster, lead *proccluster.Node, keys int, before, after map[string]sample) {
	fmt.Printf("%-4s %-8s %10s %10s %9s %10s %11s %11s %10s %7s\n", "node", "role", "RSS before", "RSS after", "RSS B/key", "peak B/key", "heap inuse", "HeapInuse/k", "HeapAlloc/k", "live/k")
	for _, n := range c.Nodes {
		role := "follower"
		if n.ID == lead.ID {
			role = "leader"
		}
		b, a := before[n.ID], after[n.ID]
		fmt.Printf("%-4s %-8s %9.1fM %9.1fM %9.0f %10.0f %10.1fM %11.0f %10.0f %7.0f\n", n.ID, role, mib(b.rss), mib(a.rss),
			perKey(a.rss, b.rss, keys), perKey(a.peak, b.rss, keys), mib(a.heapInuse), perKey(a.heapInuse, b.heapInuse, keys), perKey(a.heapAlloc, b.heapAlloc, keys),
			perKey(a.live, b.live, keys))
	}
}

// nodesCPU returns the CPU time the cluster's processes have used.
func nodesCPU(c *proccluster.Cluster) (time.Duration, error) {
	var pids []int
	for _, n := range c.Nodes {
		pids = append(pids, n.PID())
	}
	return bench.ProcessesCPU(pids)
}

func perKey(a, b uint64, keys int) float64 { return (float64(a) - float64(b)) / float64(keys) }

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// rss is a process's resident set size, 0 when /proc cannot tell.
func rss(pid int) uint64 {
	n, _ := bench.ProcessRSS(pid)
	return n
}

// heap reads HeapInuse and HeapAlloc from the runtime.MemStats that a node's
// /debug/pprof/heap?debug=1 ends with; with gc, after a collection.
func heap(base string, gc bool) (inuse, alloc uint64) {
	u := base + "/debug/pprof/heap?debug=1"
	if gc {
		u += "&gc=1"
	}
	resp, err := http.Get(u)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapInuse = "); ok {
			inuse, _ = strconv.ParseUint(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			alloc, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	return inuse, alloc
}
