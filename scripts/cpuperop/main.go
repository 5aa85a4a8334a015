// Command cpuperop measures the server CPU per operation of fenced builds,
// alternating between them: for each run and each build it starts a fresh
// 3-node cluster on free loopback ports, runs fencectl bench against the
// leader with the nodes' PIDs, and prints one line per workload and client
// count: BUILD WORKLOAD CLIENTS OPS/S SERVER_CPU_US_PER_OP CLIENT_CPU_US_PER_OP
// P50_MS P99_MS ERRORS.
//
//	go run ./scripts/cpuperop -builds old=/tmp/fenced-old,new=/tmp/fenced-new
//	go run ./scripts/cpuperop -workloads verify,keepalive -clients 16,64 -runs 3
//	go run ./scripts/cpuperop -builds old=/tmp/fenced-old@std,new=/tmp/fenced-new@h2c
//
// CPU time per operation depends far less on what else runs on the machine
// than operations per second do, which is why this is the figure to compare
// on a shared machine.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fenced/fenced/internal/proccluster"
)

func main() {
	builds := flag.String("builds", "", "comma-separated NAME=FENCED_BINARY[@TRANSPORT] (default: this module's build as 'this'); @TRANSPORT runs that build with that transport only")
	fencectl := flag.String("fencectl", "", "fencectl binary (default: built from this module)")
	workloads := flag.String("workloads", "verify,keepalive", "comma-separated fencectl bench workloads")
	clients := flag.String("clients", "64", "fencectl bench --clients")
	duration := flag.Duration("duration", 5*time.Second, "fencectl bench --duration")
	transport := flag.String("transport", "std", "comma-separated fencectl bench --transport values, each optionally with -nobatch (std-nobatch: --batching=false); each build runs with each, alternating (the BUILD column then says build/transport)")
	runs := flag.Int("runs", 3, "alternating runs of each build")
	nodeArgs := flag.String("node-args", "", "extra arguments for every node, space-separated")
	flag.StringVar(&profileDir, "profile-dir", "", "write a CPU profile of each node, taken over the middle of each run, to this directory (adds --enable-pprof)")
	flag.Parse()
	if err := run(*builds, *fencectl, *workloads, *clients, *transport, *duration, *runs, strings.Fields(*nodeArgs)); err != nil {
		fmt.Fprintln(os.Stderr, "cpuperop:", err)
		os.Exit(1)
	}
}

// build is one fenced binary under a name; transport, when set, is the
// only fencectl bench --transport it runs with (NAME=BIN@TRANSPORT).
type build struct{ name, bin, transport string }

// profileDir, when set, receives the nodes' CPU profiles.
var profileDir string

// profileNodes takes a CPU profile of every node over the middle of a run.
func profileNodes(c *proccluster.Cluster, lead *proccluster.Node, name string, d time.Duration) func() {
	if profileDir == "" {
		return func() {}
	}
	secs := max(1, int(d.Seconds())-2)
	done := make(chan struct{}, len(c.Nodes))
	for _, n := range c.Nodes {
		role := "follower"
		if n == lead {
			role = "leader"
		}
		go func() {
			defer func() { done <- struct{}{} }()
			time.Sleep(time.Second)
			resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", c.URL(n), secs))
			if err != nil {
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(profileDir, fmt.Sprintf("%s-%s-%s.pprof", name, n.ID, role)))
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		}()
	}
	return func() {
		for range c.Nodes {
			<-done
		}
	}
}

func run(builds, ctl, workloads, clients, transport string, d time.Duration, runs int, nodeArgs []string) error {
	var bs []build
	if builds == "" {
		bin, err := proccluster.Fenced()
		if err != nil {
			return err
		}
		bs = append(bs, build{"this", bin, ""})
	}
	for _, b := range strings.Split(builds, ",") {
		if name, bin, ok := strings.Cut(b, "="); ok {
			bin, tr, _ := strings.Cut(bin, "@")
			bs = append(bs, build{name, bin, tr})
		}
	}
	if ctl == "" {
		var err error
		if ctl, err = proccluster.Fencectl(); err != nil {
			return err
		}
	}
	fmt.Println("BUILD WORKLOAD CLIENTS OPS/S SERVER_CPU_US/OP CLIENT_CPU_US/OP P50_MS P99_MS ERRORS")
	transports := strings.Split(transport, ",")
	for r := 0; r < runs; r++ {
		for _, b := range bs {
			ts := transports
			if b.transport != "" {
				ts = []string{b.transport}
			}
			for _, t := range ts {
				name := b.name
				if len(ts) > 1 {
					name += "/" + t
				}
				for _, w := range strings.Split(workloads, ",") {
					if err := once(build{name, b.bin, t}, ctl, w, clients, t, d, nodeArgs); err != nil {
						return fmt.Errorf("%s %s: %w", name, w, err)
					}
				}
			}
		}
	}
	return nil
}

// once runs one workload on a fresh cluster of one build.
func once(b build, ctl, workload, clients, transport string, d time.Duration, nodeArgs []string) error {
	dir, err := os.MkdirTemp("", "cpuperop")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	args := append([]string{"--log-level", "info"}, nodeArgs...)
	if profileDir != "" {
		args = append(args, "--enable-pprof")
	}
	c, err := proccluster.Start(proccluster.Options{Dir: dir, Binary: b.bin, ExtraArgs: args})
	if err != nil {
		return err
	}
	defer c.Stop()
	lead, err := c.Leader(context.Background(), time.Minute)
	if err != nil {
		return err
	}
	var pids []string
	for _, n := range c.Nodes {
		pids = append(pids, strconv.Itoa(n.PID()))
	}
	wait := profileNodes(c, lead, strings.ReplaceAll(b.name, "/", "-")+"-"+workload, d)
	defer wait()
	// TRANSPORT-nobatch: that transport with the client's batching off.
	tr, batching := transport, "--batching=true"
	if base, ok := strings.CutSuffix(transport, "-nobatch"); ok {
		tr, batching = base, "--batching=false"
	}
	out, err := exec.Command(ctl, "--endpoints", lead.HTTPAddr, "-o", "json", "bench", workload, "--clients", clients,
		"--duration", d.String(), "--transport", tr, batching, "--server-pids", strings.Join(pids, ",")).Output()
	if err != nil {
		return fmt.Errorf("fencectl bench: %w", err)
	}
	var rs []struct {
		Workload  string  `json:"workload"`
		Clients   int     `json:"clients"`
		OpsPerSec float64 `json:"ops_per_sec"`
		Server    float64 `json:"server_cpu_per_op_ns"`
		Client    float64 `json:"client_cpu_per_op_ns"`
		P50       float64 `json:"p50_ns"`
		P99       float64 `json:"p99_ns"`
		Errors    int64   `json:"errors"`
	}
	if err := json.Unmarshal(out, &rs); err != nil {
		return err
	}
	for _, r := range rs {
		fmt.Printf("%s %s %d %.0f %.1f %.1f %.2f %.2f %d\n", b.name, r.Workload, r.Clients, r.OpsPerSec, r.Server/1e3, r.Client/1e3, r.P50/1e6, r.P99/1e6, r.Errors)
	}
	return nil
}
