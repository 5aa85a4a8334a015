// Command floodbench measures what one flooding client costs the leader of
// a 3-node cluster of the real binaries on loopback: while one identity (an
// anonymous client, so its address: 127.0.0.1) floods, it samples the
// leader's resident memory (/proc/PID/status), CPU (/proc/PID/stat) and
// goroutines (go_goroutines in /metrics) every second. The flood, all at
// once for --duration:
//
//   - --watches never-reading watch streams of every key on the leader,
//   - --quiet watches of a quiet prefix with progress=100ms on the
//     followers (each quiet interval asks the leader to confirm it leads),
//   - --cyclers loops of acquire and release of ever new keys, each with a
//     fresh request id and a 1 KiB value (request-id volume, ended keys,
//     and the events the never-reading watches are sent).
//
// Each --modes entry runs on a new cluster: "defaults" with fenced's
// defaults, "unlimited" with the shares set off (--max-watches-per-identity
// 0, --max-ended-keys-per-identity 0, --max-waiters-per-identity 0,
// --watch-write-timeout 1h), as fenced was before it had them; the shared
// progress checks and the reclaimer's one entry per key have no switch and
// are in both.
//
//	go run ./scripts/floodbench --duration 40s --modes defaults,unlimited
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/bench"
	"github.com/fenced/fenced/internal/proccluster"
)

// unlimited are the flags that turn the shares off.
var unlimited = []string{"--max-watches-per-identity", "0", "--max-ended-keys-per-identity", "0",
	"--max-waiters-per-identity", "0", "--watch-write-timeout", "1h"}

// keep is --keep.
var keep bool

type sample struct {
	rssMB      float64
	cpu        time.Duration
	goroutines int
}

type outcome struct {
	mode                 string
	idle, peak, after    sample
	idleCPU, floodCPU    float64 // percent of one core
	watchOpen, watchRefd int64   // never-reading streams opened, refused
	quietOpen, quietRefd int64
	syncs                int64 // sync events the quiet watches received
	cycles               int64
	cycleErrs            map[string]int64
	endedKeys            int
	// ends counts how the quiet streams ended (the last event before the
	// stream closed); leaderKept says the sampled node led throughout.
	ends       map[string]int64
	leaderKept bool
}

func main() {
	duration := flag.Duration("duration", 40*time.Second, "how long the flood lasts")
	watches := flag.Int("watches", 300, "never-reading watch streams on the leader")
	quiet := flag.Int("quiet", 200, "watches of a quiet prefix with progress=100ms, spread over the followers")
	cyclers := flag.Int("cyclers", 4, "loops of acquire+release of new keys with fresh request ids and 1 KiB values")
	flag.BoolVar(&keep, "keep", false, "keep the nodes' data dirs and logs (their path is printed)")
	modes := flag.String("modes", "defaults,unlimited", "defaults (fenced's shares) and/or unlimited (shares off), each on a new cluster")
	flag.Parse()
	bin, err := proccluster.Fenced()
	if err != nil {
		fmt.Fprintln(os.Stderr, "floodbench:", err)
		os.Exit(1)
	}
	var outs []outcome
	for _, m := range strings.Split(*modes, ",") {
		var args []string
		switch m {
		case "defaults":
		case "unlimited":
			args = unlimited
		default:
			fmt.Fprintf(os.Stderr, "floodbench: unknown mode %q (defaults, unlimited)\n", m)
			os.Exit(2)
		}
		o, err := run(bin, m, args, *duration, *watches, *quiet, *cyclers)
		if err != nil {
			fmt.Fprintln(os.Stderr, "floodbench:", m+":", err)
			os.Exit(1)
		}
		outs = append(outs, o)
	}
	fmt.Printf("\none client floods for %v: %d never-reading watches on the leader, %d progress=100ms watches on the followers, %d acquire+release loops (fresh request ids, 1 KiB values)\n\n",
		*duration, *watches, *quiet, *cyclers)
	fmt.Println("| mode | leader RSS idle | RSS peak | RSS after | leader CPU idle | CPU flooding | goroutines idle / peak | never-reading watches accepted / refused | quiet watches accepted / refused | grants | ended keys |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, o := range outs {
		fmt.Printf("| %s | %.0f MB | %.0f MB | %.0f MB | %.0f %% | %.0f %% | %d / %d | %d / %d | %d / %d | %d | %d |\n",
			o.mode, o.idle.rssMB, o.peak.rssMB, o.after.rssMB, o.idleCPU, o.floodCPU, o.idle.goroutines, o.peak.goroutines,
			o.watchOpen, o.watchRefd, o.quietOpen, o.quietRefd, o.cycles, o.endedKeys)
		fmt.Printf("|  | sampled node led throughout: %v; quiet streams' sync events: %d; ended by: %v; refused grants: %v |\n",
			o.leaderKept, o.syncs, o.ends, o.cycleErrs)
	}
}

func run(bin, mode string, args []string, duration time.Duration, watches, quiet, cyclers int) (outcome, error) {
	o := outcome{mode: mode, cycleErrs: map[string]int64{}, ends: map[string]int64{}}
	dir, err := os.MkdirTemp("", "floodbench-")
	if err != nil {
		return o, err
	}
	if keep {
		fmt.Fprintf(os.Stderr, "%s: nodes' data dirs and logs in %s\n", mode, dir)
	} else {
		defer os.RemoveAll(dir)
	}
	c, err := proccluster.Start(proccluster.Options{Nodes: 3, Dir: dir, Binary: bin, ExtraArgs: append([]string{"--log-level", "warn"}, args...)})
	if err != nil {
		return o, err
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), duration+2*time.Minute)
	defer cancel()
	lead, err := c.Leader(ctx, 30*time.Second)
	if err != nil {
		return o, err
	}
	var followers []string
	for _, n := range c.Nodes {
		if n != lead {
			followers = append(followers, n.HTTPAddr)
		}
	}
	pid := lead.PID()
	// Idle: five seconds of nothing.
	s0 := measure(pid, lead.HTTPAddr)
	time.Sleep(5 * time.Second)
	o.idle = measure(pid, lead.HTTPAddr)
	o.idleCPU = pct(o.idle.cpu-s0.cpu, 5*time.Second)
	fmt.Fprintf(os.Stderr, "%s: idle rss %.1f MB cpu %.1f%% goroutines %d\n", mode, o.idle.rssMB, o.idleCPU, o.idle.goroutines)

	fctx, stop := context.WithTimeout(ctx, duration)
	defer stop()
	hc := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 1024}}
	var wg sync.WaitGroup
	spawn := func(n int, f func(i int)) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); f(i) }()
		}
	}
	var endMu sync.Mutex
	ended := func(how string) {
		endMu.Lock()
		o.ends[how]++
		endMu.Unlock()
	}
	spawn(watches, func(int) {
		openWatch(fctx, hc, "http://"+lead.HTTPAddr+"/v1/watch?prefix=", false, &o.watchOpen, &o.watchRefd, nil, nil)
	})
	spawn(quiet, func(i int) {
		u := "http://" + followers[i%len(followers)] + "/v1/watch?prefix=quiet/&progress=100ms"
		openWatch(fctx, hc, u, true, &o.quietOpen, &o.quietRefd, &o.syncs, ended)
	})
	api := client.New(c.Endpoints(), client.WithHTTPClient(&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}))
	var errMu sync.Mutex
	value := strings.Repeat("v", client.MaxValueLen)
	spawn(cyclers, func(i int) {
		for n := 0; fctx.Err() == nil; n++ {
			key := fmt.Sprintf("flood/%d/%d", i, n)
			g, err := api.Acquire(fctx, client.AcquireRequest{Key: key, Holder: fmt.Sprintf("flood/c%d", i), TTL: "10s", RequestID: client.NewRequestID(), Value: value})
			if err == nil {
				_, err = api.Release(fctx, client.ReleaseRequest{Key: key, Holder: g.Holder, Token: g.Token, RequestID: client.NewRequestID()})
			}
			if fctx.Err() != nil {
				return
			}
			if err != nil {
				errMu.Lock()
				o.cycleErrs[codeOf(err)]++
				errMu.Unlock()
				time.Sleep(10 * time.Millisecond)
				continue
			}
			atomic.AddInt64(&o.cycles, 1)
		}
	})
	start, first := time.Now(), measure(pid, lead.HTTPAddr)
	var last sample
	for t := time.NewTicker(time.Second); fctx.Err() == nil; {
		select {
		case <-t.C:
		case <-fctx.Done():
		}
		last = measure(pid, lead.HTTPAddr)
		o.peak.rssMB = max(o.peak.rssMB, last.rssMB)
		o.peak.goroutines = max(o.peak.goroutines, last.goroutines)
		fmt.Fprintf(os.Stderr, "%s %5v rss %6.1f MB goroutines %5d watches %d/%d quiet %d/%d grants %d\n", mode, time.Since(start).Round(time.Second),
			last.rssMB, last.goroutines, atomic.LoadInt64(&o.watchOpen), atomic.LoadInt64(&o.watchRefd),
			atomic.LoadInt64(&o.quietOpen), atomic.LoadInt64(&o.quietRefd), atomic.LoadInt64(&o.cycles))
	}
	o.floodCPU = pct(last.cpu-first.cpu, time.Since(start))
	wg.Wait()
	hc.CloseIdleConnections()
	// Settled: what the flood left behind once its streams are gone.
	time.Sleep(5 * time.Second)
	o.after = measure(pid, lead.HTTPAddr)
	if now, err := c.Leader(ctx, 10*time.Second); err == nil && now == lead {
		o.leaderKept = true
	}
	if st, err := api.Status(ctx); err == nil {
		o.endedKeys = st.Keys
	}
	return o, nil
}

// openWatch keeps one watch stream at u open until ctx ends: reading it
// (counting sync events) when read is set, else never reading past its
// first event. A refused stream is counted and asked again after a second.
func openWatch(ctx context.Context, hc *http.Client, u string, read bool, opened, refused, syncs *int64, ended func(how string)) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := hc.Do(req)
		if err != nil {
			pause(ctx, time.Second)
			continue
		}
		br := bufio.NewReader(resp.Body)
		ok := resp.StatusCode == http.StatusOK
		for ok {
			line, err := br.ReadString('\n')
			if err != nil {
				ok = false
				break
			}
			if strings.HasPrefix(line, "event:") {
				ok = !strings.Contains(line, client.WatchUnavailable)
				break
			}
		}
		if !ok {
			atomic.AddInt64(refused, 1)
			resp.Body.Close()
			pause(ctx, time.Second)
			continue
		}
		atomic.AddInt64(opened, 1)
		if !read {
			<-ctx.Done() // never read again
			resp.Body.Close()
			return
		}
		last := ""
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			if ev, ok := strings.CutPrefix(line, "event:"); ok {
				last = strings.TrimSpace(ev)
			}
			if strings.HasPrefix(line, "data:") && last != client.WatchSync {
				last += " " + strings.TrimSpace(strings.TrimPrefix(line, "data:"))
			}
			if last == client.WatchSync {
				atomic.AddInt64(syncs, 1)
			}
		}
		if ctx.Err() == nil {
			ended(last)
		}
		resp.Body.Close()
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func codeOf(err error) string {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return "error"
}

func measure(pid int, addr string) sample {
	var s sample
	if n, err := bench.ProcessRSS(pid); err == nil {
		s.rssMB = float64(n) / (1 << 20)
	}
	s.cpu, _ = bench.ProcessesCPU([]int{pid})
	s.goroutines = goroutines(addr)
	return s
}

// goroutines reads go_goroutines from a node's /metrics; 0 when it cannot.
func goroutines(addr string) int {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(n)
		}
	}
	return 0
}

func pct(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * float64(cpu) / float64(wall)
}
