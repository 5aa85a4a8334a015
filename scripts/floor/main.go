// Command floor measures the physical floor under one acquire on this
// machine: what the disk and loopback cost before fenced does anything.
//
//	go run ./scripts/floor                 # in $TMPDIR, where the benchmarks' data dirs go
//	go run ./scripts/floor -dir /var/lib/fenced -o json
//
// A commit on a 3-node loopback cluster needs the entry on the leader's disk
// and on one follower's, written in parallel, and two round trips (the client
// to the leader and back, the leader to a follower and back). All three
// members write the same entry at once to the same disk, so the floor is
// taken as the median time for three files to be written and synced at once
// plus two loopback round trips between processes (each wakes a process that
// was waiting, which costs far more on a virtual machine than the in-process
// round trip shown beside it). Each write is 64 bytes into a preallocated
// file, fsync-ed, as fenced's log store (raft-wal) writes a segment; the
// median of a growing append (each fsync also writes the file's new size) is
// shown beside it.
//
// The floor under a verify or a keepalive is one HTTP exchange: net/http's
// client posting a small JSON body to a net/http server in another process
// that answers at once with a keepalive-sized JSON answer, no work between.
// An acquire sent by that client pays the same exchange in place of its
// round trip to the leader: its floor over net/http is the three writes at
// once, one round trip between processes and one HTTP exchange.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"sync"
	"time"
)

// Result is what one run measured, in nanoseconds at the median unless named.
type Result struct {
	Dir               string `json:"dir"`
	Samples           int    `json:"samples"`
	SyncAppendNs      int64  `json:"sync_append_p50_ns"`
	SyncPreallocNs    int64  `json:"sync_prealloc_p50_ns"`
	SyncPreallocP99Ns int64  `json:"sync_prealloc_p99_ns"`
	TwoAtOnceNs       int64  `json:"sync_two_at_once_p50_ns"`
	ThreeAtOnceNs     int64  `json:"sync_three_at_once_p50_ns"`
	RoundTripNs       int64  `json:"loopback_round_trip_p50_ns"`
	CrossRoundTripNs  int64  `json:"loopback_round_trip_across_processes_p50_ns"`
	HTTPExchangeNs    int64  `json:"http_exchange_across_processes_p50_ns"`
	FloorNs           int64  `json:"acquire_floor_ns"`
	HTTPFloorNs       int64  `json:"acquire_floor_over_http_ns"`
}

func main() {
	dir := flag.String("dir", os.TempDir(), "directory on the disk to measure (where the nodes' data dirs are)")
	n := flag.Int("samples", 1000, "samples per measurement")
	out := flag.String("o", "text", "output: text or json")
	serve := flag.String("serve", "", "internal: serve echo or http on loopback in this process for the parent's round trips")
	flag.Parse()
	if *serve != "" {
		if err := serveForParent(*serve); err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		return
	}
	r, err := measure(*dir, *n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	if *out == "json" {
		json.NewEncoder(os.Stdout).Encode(r)
		return
	}
	ms := func(ns int64) string { return fmt.Sprintf("%.3f ms", float64(ns)/1e6) }
	fmt.Printf("64-byte write+fsync, growing file     p50 %s\n", ms(r.SyncAppendNs))
	fmt.Printf("64-byte write+fsync, preallocated     p50 %s (p99 %s)\n", ms(r.SyncPreallocNs), ms(r.SyncPreallocP99Ns))
	fmt.Printf("the same, two files at once           p50 %s\n", ms(r.TwoAtOnceNs))
	fmt.Printf("the same, three files at once         p50 %s\n", ms(r.ThreeAtOnceNs))
	fmt.Printf("loopback TCP round trip (64 bytes)    p50 %s in one process, %s between two\n", ms(r.RoundTripNs), ms(r.CrossRoundTripNs))
	fmt.Printf("acquire floor (three at once + 2 RTT)     %s\n", ms(r.FloorNs))
	fmt.Printf("verify/keepalive floor (net/http POST to another process, answered at once)  p50 %s\n", ms(r.HTTPExchangeNs))
	fmt.Printf("acquire floor over net/http (three at once + 1 RTT + that POST)  %s\n", ms(r.HTTPFloorNs))
}

func measure(dir string, n int) (Result, error) {
	work, err := os.MkdirTemp(dir, "floor-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)
	r := Result{Dir: dir, Samples: n}
	if r.SyncAppendNs, _, err = syncs(work, n, 1, false); err != nil {
		return r, err
	}
	if r.SyncPreallocNs, r.SyncPreallocP99Ns, err = syncs(work, n, 1, true); err != nil {
		return r, err
	}
	if r.TwoAtOnceNs, _, err = syncs(work, n, 2, true); err != nil {
		return r, err
	}
	if r.ThreeAtOnceNs, _, err = syncs(work, n, 3, true); err != nil {
		return r, err
	}
	if r.RoundTripNs, err = roundTrips("", n*5); err != nil {
		return r, err
	}
	addr, stop, err := startChild("echo")
	if err != nil {
		return r, err
	}
	r.CrossRoundTripNs, err = roundTrips(addr, n*5)
	stop()
	if err != nil {
		return r, err
	}
	if r.HTTPExchangeNs, err = httpExchanges(n * 5); err != nil {
		return r, err
	}
	r.FloorNs = r.ThreeAtOnceNs + 2*r.CrossRoundTripNs
	r.HTTPFloorNs = r.ThreeAtOnceNs + r.CrossRoundTripNs + r.HTTPExchangeNs
	return r, nil
}

// syncs times n rounds in which each of files writers writes 64 bytes and
// fsyncs its own file, all at once; a round ends when the last is done.
// It returns the median and the 99th percentile.
func syncs(dir string, n, files int, prealloc bool) (p50, p99 int64, err error) {
	fs := make([]*os.File, files)
	for i := range fs {
		f, err := os.CreateTemp(dir, "seg-")
		if err != nil {
			return 0, 0, err
		}
		defer f.Close()
		if prealloc {
			if err := f.Truncate(int64(n+1) * 64); err != nil {
				return 0, 0, err
			}
			if err := f.Sync(); err != nil {
				return 0, 0, err
			}
		}
		fs[i] = f
	}
	buf := make([]byte, 64)
	durs := make([]time.Duration, 0, n)
	for round := 0; round < n; round++ {
		var wg sync.WaitGroup
		errs := make([]error, files)
		start := time.Now()
		for i, f := range fs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := f.WriteAt(buf, int64(round)*64); err != nil {
					errs[i] = err
					return
				}
				errs[i] = f.Sync()
			}()
		}
		wg.Wait()
		durs = append(durs, time.Since(start))
		for _, err := range errs {
			if err != nil {
				return 0, 0, err
			}
		}
	}
	return pct(durs, 50), pct(durs, 99), nil
}

// roundTrips times n 64-byte ping-pongs over one loopback TCP connection to
// addr, or to an echo server in this process when addr is empty.
func roundTrips(addr string, n int) (int64, error) {
	if addr == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer ln.Close()
		go echo(ln)
		addr = ln.Addr().String()
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, 64)
	durs := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return 0, err
		}
		durs = append(durs, time.Since(start))
	}
	return pct(durs, 50), nil
}

func pct(d []time.Duration, p int) int64 {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return int64(d[(len(d)-1)*p/100])
}
