// Package bench drives load against a fenced cluster and measures throughput
// and latency, for fencectl bench and for performance work.
package bench

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenced/fenced/client"
)

// Workloads.
const (
	Acquire   = "acquire"   // fresh keys, never released
	Cycle     = "cycle"     // acquire then release, distinct keys per client
	Verify    = "verify"    // verify of a held key's token
	Keepalive = "keepalive" // keepalive of a holder with a few keys
	Contended = "contended" // clients take turns on one key with waiting acquires
	Mix       = "mix"       // verify-heavy mix: 70% verify, 20% keepalive, 10% cycle
	// The lock shapes' cycles: a waiting acquire and its release.
	SemCycle    = "sem-cycle"    // permits of one semaphore key of SemLimit permits
	SharedCycle = "shared-cycle" // shared grants of one key
	MultiCycle  = "multi-cycle"  // two-key sets over a ring of MultiRing keys
)

// Workloads lists the workload names.
var Workloads = []string{Acquire, Cycle, Verify, Keepalive, Contended, Mix, SemCycle, SharedCycle, MultiCycle}

// SemLimit is the number of permits of sem-cycle's key.
const SemLimit = 4

// MultiRing is the number of keys multi-cycle's sets are drawn from: client
// i takes keys i and i+1 (mod MultiRing) together, so each set overlaps its
// two neighbours' and, from 2*MultiRing clients on, each set is also some
// other client's: every key is wanted by four clients at 16 clients, as
// accounts that are transferred between pairwise would be.
const MultiRing = 8

// Config is one benchmark run.
type Config struct {
	Workload string
	Clients  int
	Duration time.Duration
	TTL      time.Duration
	// Prefix keeps runs apart in one cluster.
	Prefix string
	// Progress, if set, is called about every 200ms with the ops done so far.
	Progress func(done int64, elapsed time.Duration)
	// CPU, if set, returns the CPU time this process has used so far; the
	// result then carries the client's CPU per operation, which in a
	// loopback benchmark comes out of the cluster's own cores.
	CPU func() time.Duration
	// ServerCPU, if set, returns the CPU time the cluster's processes have
	// used so far (ProcessesCPU of their PIDs); the result then carries the
	// server CPU per operation, summed over the nodes.
	ServerCPU func() (time.Duration, error)
}

// Result is what a run measured.
type Result struct {
	Workload  string          `json:"workload"`
	Clients   int             `json:"clients"`
	Ops       int64           `json:"ops"`
	Errors    int64           `json:"errors"`
	Elapsed   time.Duration   `json:"elapsed_ns"`
	OpsPerSec float64         `json:"ops_per_sec"`
	P50       time.Duration   `json:"p50_ns"`
	P90       time.Duration   `json:"p90_ns"`
	P99       time.Duration   `json:"p99_ns"`
	Max       time.Duration   `json:"max_ns"`
	Latencies []time.Duration `json:"-"`
	FirstErr  string          `json:"first_error,omitempty"`
	// Transport names how the client sent its requests (set by the caller).
	Transport string `json:"transport,omitempty"`
	// Batching says whether the client coalesced concurrent verifies and
	// keepalives into batch requests (set by the caller).
	Batching bool `json:"batching"`
	// ClientCPUPerOp is the benchmark process's CPU time per measured
	// operation (zero when Config.CPU is unset).
	ClientCPUPerOp time.Duration `json:"client_cpu_per_op_ns,omitempty"`
	// ServerCPUPerOp is the CPU time (user and system) the cluster's
	// processes used per measured operation, summed over them (zero when
	// Config.ServerCPU is unset or failed).
	ServerCPUPerOp time.Duration `json:"server_cpu_per_op_ns,omitempty"`
}

// op is one measured operation of a client; it returns how many operations
// it counted (a cycle is one).
type op func(ctx context.Context) error

// Run drives the workload until the duration passes.
func Run(ctx context.Context, c *client.Client, cfg Config) (*Result, error) {
	if cfg.Clients <= 0 {
		cfg.Clients = 1
	}
	if cfg.TTL == 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "bench/" + client.NewRequestID()[:8]
	}
	ops := make([]op, cfg.Clients)
	for i := range ops {
		o, err := setup(ctx, c, cfg, i)
		if err != nil {
			return nil, fmt.Errorf("setup of client %d: %w", i, err)
		}
		ops[i] = o
	}
	var done, errs atomic.Int64
	var firstErr atomic.Value
	lats := make([][]time.Duration, cfg.Clients)
	rctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var cpu0, srv0 time.Duration
	if cfg.CPU != nil {
		cpu0 = cfg.CPU()
	}
	srvOK := cfg.ServerCPU != nil
	if srvOK {
		var err error
		srv0, err = cfg.ServerCPU()
		srvOK = err == nil
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range ops {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for rctx.Err() == nil {
				t0 := time.Now()
				err := ops[i](rctx)
				if rctx.Err() != nil {
					return
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				lats[i] = append(lats[i], time.Since(t0))
				done.Add(1)
			}
		}(i)
	}
	stopProgress := progress(cfg, &done, start)
	wg.Wait()
	stopProgress()
	elapsed := time.Since(start)
	r := summarize(cfg, lats, elapsed)
	if cfg.CPU != nil && r.Ops > 0 {
		r.ClientCPUPerOp = (cfg.CPU() - cpu0) / time.Duration(r.Ops)
	}
	if srvOK && r.Ops > 0 {
		// A node that went away in the run fails the reading: no figure
		// then, rather than a wrong one.
		if srv1, err := cfg.ServerCPU(); err == nil {
			r.ServerCPUPerOp = (srv1 - srv0) / time.Duration(r.Ops)
		}
	}
	r.Errors = errs.Load()
	if v := firstErr.Load(); v != nil {
		r.FirstErr = v.(string)
	}
	return r, nil
}

func progress(cfg Config, done *atomic.Int64, start time.Time) func() {
	if cfg.Progress == nil {
		return func() {}
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				cfg.Progress(done.Load(), time.Since(start))
			}
		}
	}()
	return func() { close(stop); <-finished }
}

func summarize(cfg Config, lats [][]time.Duration, elapsed time.Duration) *Result {
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := &Result{Workload: cfg.Workload, Clients: cfg.Clients, Ops: int64(len(all)), Elapsed: elapsed, Latencies: all}
	r.OpsPerSec = float64(len(all)) / elapsed.Seconds()
	if len(all) > 0 {
		pick := func(q float64) time.Duration { return all[min(len(all)-1, int(q*float64(len(all))))] }
		r.P50, r.P90, r.P99, r.Max = pick(0.50), pick(0.90), pick(0.99), all[len(all)-1]
	}
	return r
}

func setup(ctx context.Context, c *client.Client, cfg Config, i int) (op, error) {
	holder := fmt.Sprintf("%s/h%d", cfg.Prefix, i)
	ttl := cfg.TTL.String()
	n := 0
	switch cfg.Workload {
	case Acquire:
		return func(ctx context.Context) error {
			n++
			_, err := c.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("%s/a/%d/%d", cfg.Prefix, i, n), Holder: holder, TTL: ttl})
			return err
		}, nil
	case Cycle:
		return cycle(c, cfg, i, holder), nil
	case Verify:
		g, err := c.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("%s/v/%d", cfg.Prefix, i), Holder: holder, TTL: "10m"})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			v, err := c.Verify(ctx, g.Key, g.Token.String(), holder)
			if err == nil && !v.Allow {
				err = fmt.Errorf("verify refused: %s", v.Reason)
			}
			return err
		}, nil
	case Keepalive:
		for k := 0; k < 4; k++ {
			if _, err := c.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("%s/k/%d/%d", cfg.Prefix, i, k), Holder: holder, TTL: ttl}); err != nil {
				return nil, err
			}
		}
		return func(ctx context.Context) error {
			_, err := c.Keepalive(ctx, holder)
			return err
		}, nil
	case Contended:
		return waitCycle(c, client.AcquireRequest{Key: cfg.Prefix + "/contended", Holder: holder, TTL: ttl, Wait: "1m"}), nil
	case Mix:
		return mix(ctx, c, cfg, i, holder)
	case SemCycle:
		return waitCycle(c, client.AcquireRequest{Key: cfg.Prefix + "/sem", Holder: holder, TTL: ttl, Wait: "1m", Limit: SemLimit}), nil
	case SharedCycle:
		return waitCycle(c, client.AcquireRequest{Key: cfg.Prefix + "/shared", Holder: holder, TTL: ttl, Wait: "1m", Mode: client.ModeShared}), nil
	case MultiCycle:
		return multiCycle(c, client.AcquireMultiRequest{Keys: MultiKeys(cfg.Prefix, i), Holder: holder, TTL: ttl, Wait: "1m"}), nil
	}
	return nil, fmt.Errorf("unknown workload %q (one of %v)", cfg.Workload, Workloads)
}

func cycle(c *client.Client, cfg Config, i int, holder string) op {
	n := 0
	return func(ctx context.Context) error {
		n++
		g, err := c.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("%s/c/%d/%d", cfg.Prefix, i, n%64), Holder: holder, TTL: cfg.TTL.String()})
		if err != nil {
			return err
		}
		_, err = c.Release(ctx, client.ReleaseRequest{Key: g.Key, Holder: holder, Token: g.Token})
		return err
	}
}

// waitCycle is one operation of a client taking turns on a key with
// others: an acquire that waits for its grant (a lock's, a permit, a shared
// grant, as req asks), then the release of that grant.
func waitCycle(c *client.Client, req client.AcquireRequest) op {
	// Acquire takes req by value and makes a request id per call.
	return func(ctx context.Context) error {
		g, err := c.Acquire(ctx, req)
		if err != nil {
			return err
		}
		_, err = c.Release(ctx, client.ReleaseRequest{Key: g.Key, Holder: req.Holder, Token: g.Token})
		return err
	}
}

// MultiKeys is the two-key set of multi-cycle's client i: keys i and i+1 of
// the ring (mod MultiRing), in ring order.
func MultiKeys(prefix string, i int) []string {
	return []string{fmt.Sprintf("%s/multi/%d", prefix, i%MultiRing), fmt.Sprintf("%s/multi/%d", prefix, (i+1)%MultiRing)}
}

// multiCycle is one operation of multi-cycle: an all-or-nothing acquire of
// req's keys that waits for the set, then the release of each grant (a set
// is released key by key; fenced has no set release to call).
func multiCycle(c *client.Client, req client.AcquireMultiRequest) op {
	return func(ctx context.Context) error {
		set, err := c.AcquireMulti(ctx, req)
		if err != nil {
			return err
		}
		for _, g := range set.Grants {
			if _, err := c.Release(ctx, client.ReleaseRequest{Key: g.Key, Holder: req.Holder, Token: g.Token}); err != nil {
				return err
			}
		}
		return nil
	}
}

func mix(ctx context.Context, c *client.Client, cfg Config, i int, holder string) (op, error) {
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("%s/m/%d", cfg.Prefix, i), Holder: holder, TTL: "10m"})
	if err != nil {
		return nil, err
	}
	cyc := cycle(c, cfg, i, holder+"/cycle")
	n := 0
	return func(ctx context.Context) error {
		n++
		switch {
		case n%10 == 0:
			return cyc(ctx)
		case n%10 < 3:
			_, err := c.Keepalive(ctx, holder)
			return err
		}
		v, err := c.Verify(ctx, g.Key, g.Token.String(), holder)
		if err == nil && !v.Allow {
			return errors.New("verify refused: " + v.Reason)
		}
		return err
	}, nil
}
