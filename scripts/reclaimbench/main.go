// Command reclaimbench measures key reclamation on the real binaries: a
// 3-node cluster on loopback, clients that acquire and release distinct keys
// (each key once, never again), with reclamation off and on. It reports the
// acquire rate, the leader's RSS and key count over time, the newest
// snapshot's size, and how long a restarted follower takes to catch up.
//
//	go run ./scripts/reclaimbench --keys 300000 --clients 32 --retention 5s --modes off,on
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/bench"
	"github.com/fenced/fenced/internal/proccluster"
)

type sample struct {
	at       time.Duration
	done     int64
	keys     int
	rssMB    float64
	snapMB   float64
	reclaims string
}

type outcome struct {
	mode       string
	keys       int64
	elapsed    time.Duration
	rate       float64
	errors     int64
	samples    []sample
	maxRSS     float64
	finalKeys  int
	finalRSS   float64
	finalSnap  float64
	restart    time.Duration
	restartErr error
	// cpuPerOp is the CPU time of the three nodes together per
	// acquire+release cycle while the clients ran: less sensitive than the
	// rate to what else the machine runs.
	cpuPerOp time.Duration
}

func main() {
	keys := flag.Int("keys", 200000, "distinct keys acquired and released, each once")
	clients := flag.Int("clients", 32, "concurrent clients")
	retention := flag.Duration("retention", 5*time.Second, "--key-retention of the 'on' mode")
	modes := flag.String("modes", "off,on", "runs in order: off (--key-retention 0) or on")
	every := flag.Duration("every", 5*time.Second, "sampling interval")
	tail := flag.Duration("tail", 35*time.Second, "wait after the last key, beyond the retention, before the final sample (a snapshot every 30s)")
	flag.Parse()
	bin, err := proccluster.Fenced()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var outs []outcome
	for _, m := range strings.Split(*modes, ",") {
		ret := time.Duration(0)
		if m == "on" {
			ret = *retention
		}
		o, err := run(bin, m, ret, *keys, *clients, *every, *tail)
		if err != nil {
			fmt.Fprintln(os.Stderr, m+":", err)
			os.Exit(1)
		}
		outs = append(outs, o)
	}
	fmt.Println()
	fmt.Println("| mode | keys | acquire+release/s | nodes' CPU/cycle | errors | leader RSS max | keys at end | RSS at end | snapshot at end | follower restart |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, o := range outs {
		fmt.Printf("| %s | %d | %.0f | %v | %d | %.0f MB | %d | %.0f MB | %.1f MB | %v |\n", o.mode, o.keys, o.rate, o.cpuPerOp.Round(time.Microsecond), o.errors, o.maxRSS, o.finalKeys, o.finalRSS, o.finalSnap, o.restart.Round(10*time.Millisecond))
	}
}

func run(bin, mode string, retention time.Duration, n, clients int, every, tail time.Duration) (outcome, error) {
	o := outcome{mode: mode}
	dir, err := os.MkdirTemp("", "fenced-reclaimbench-")
	if err != nil {
		return o, err
	}
	defer os.RemoveAll(dir)
	c, err := proccluster.Start(proccluster.Options{Nodes: 3, Dir: dir, Binary: bin,
		ExtraArgs: []string{"--key-retention", retention.String(), "--log-level", "info"}})
	if err != nil {
		return o, err
	}
	defer c.Stop()
	ctx := context.Background()
	lead, err := c.Leader(ctx, 30*time.Second)
	if err != nil {
		return o, err
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients,
		DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}}
	cl := client.New([]string{lead.HTTPAddr}, client.WithHTTPClient(hc))

	var next, done, errs atomic.Int64
	cpu0 := clusterCPU(c)
	start := time.Now()
	stopSampling := make(chan struct{})
	var samplesMu sync.Mutex
	sampleNow := func() sample {
		s := sample{at: time.Since(start).Round(time.Second), done: done.Load(), rssMB: rssMB(lead.PID()), snapMB: snapMB(lead.DataDir)}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if st, err := cl.NodeStatus(sctx, "http://"+lead.HTTPAddr); err == nil {
			s.keys = st.Keys
		}
		cancel()
		return s
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s := sampleNow()
				samplesMu.Lock()
				o.samples = append(o.samples, s)
				samplesMu.Unlock()
				fmt.Fprintf(os.Stderr, "%s %6v done %7d keys %7d rss %6.1f MB snapshot %5.1f MB\n", mode, s.at, s.done, s.keys, s.rssMB, s.snapMB)
			case <-stopSampling:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("h%d", i)
			for {
				k := next.Add(1)
				if k > int64(n) {
					return
				}
				key := "churn/" + strconv.FormatInt(k, 10)
				g, err := cl.Acquire(ctx, client.AcquireRequest{Key: key, Holder: holder, TTL: "30s"})
				if err == nil {
					_, err = cl.Release(ctx, client.ReleaseRequest{Key: key, Holder: holder, Token: g.Token})
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	o.elapsed = time.Since(start)
	o.keys, o.errors = done.Load(), errs.Load()
	if o.keys > 0 {
		o.cpuPerOp = (clusterCPU(c) - cpu0) / time.Duration(o.keys)
	}
	o.rate = float64(o.keys) / o.elapsed.Seconds()
	// Let the last keys' retention pass and a snapshot be taken.
	time.Sleep(retention + tail)
	close(stopSampling)
	final := sampleNow()
	o.samples = append(o.samples, final)
	o.finalKeys, o.finalRSS, o.finalSnap = final.keys, final.rssMB, final.snapMB
	for _, s := range o.samples {
		o.maxRSS = max(o.maxRSS, s.rssMB)
	}
	o.restart, o.restartErr = restartFollower(ctx, c, lead, cl)
	fmt.Fprintf(os.Stderr, "%s: %d keys in %v (%.0f/s), %d errors; end: %d keys, rss %.1f MB, snapshot %.1f MB; follower restart %v %v\n",
		mode, o.keys, o.elapsed.Round(time.Second), o.rate, o.errors, o.finalKeys, o.finalRSS, o.finalSnap, o.restart, o.restartErr)
	return o, nil
}

// restartFollower stops a follower, starts it again and measures until it
// has applied the leader's commit index of the moment it was started.
func restartFollower(ctx context.Context, c *proccluster.Cluster, lead *proccluster.Node, cl *client.Client) (time.Duration, error) {
	var f *proccluster.Node
	for _, n := range c.Nodes {
		if n != lead {
			f = n
			break
		}
	}
	c.Terminate(f)
	st, err := cl.NodeStatus(ctx, "http://"+lead.HTTPAddr)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := c.StartNode(f); err != nil {
		return 0, err
	}
	for time.Since(start) < 2*time.Minute {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		fs, err := cl.NodeStatus(sctx, "http://"+f.HTTPAddr)
		cancel()
		if err == nil && fs.AppliedIndex >= st.CommitIndex {
			return time.Since(start), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, errors.New("follower did not catch up")
}

// rssMB is a process's resident set size in MiB, 0 when /proc cannot tell.
func rssMB(pid int) float64 {
	n, _ := bench.ProcessRSS(pid)
	return float64(n) / (1 << 20)
}

// snapMB returns the size of the newest snapshot in a data dir.
func snapMB(dataDir string) float64 {
	dirs, _ := filepath.Glob(filepath.Join(dataDir, "snapshots", "*", "state.bin"))
	var newest os.FileInfo
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && (newest == nil || fi.ModTime().After(newest.ModTime())) {
			newest = fi
		}
	}
	if newest == nil {
		return 0
	}
	return float64(newest.Size()) / (1 << 20)
}

// clusterCPU sums the user and system CPU time of every running node; a
// node /proc cannot tell about counts nothing.
func clusterCPU(c *proccluster.Cluster) time.Duration {
	var total time.Duration
	for _, n := range c.Nodes {
		if t, err := bench.ProcessesCPU([]int{n.PID()}); err == nil {
			total += t
		}
	}
	return total
}
