package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// The workloads, named as fencectl bench's counterparts.
const (
	Acquire            = "acquire"
	Cycle              = "cycle"
	Verify             = "verify"
	VerifyLinearizable = "verify-linearizable"
)

// Workloads lists every workload.
var Workloads = []string{Acquire, Cycle, Verify, VerifyLinearizable}

// cycleKeys is how many lock nodes a cycle client takes turns on, as
// fencectl bench cycle does.
const cycleKeys = 64

// errNotLowest means a lock child was not the lowest under its lock node:
// the lock was not acquired (another holder was there first).
var errNotLowest = errors.New("lock child is not the lowest: the lock is held by another")

var openACL = zk.WorldACL(zk.PermAll)

// Result is one run's figures.
type Result struct {
	Workload  string
	Clients   int
	Ops       int
	Errors    int
	FirstErr  error
	Elapsed   time.Duration
	P50, P99  time.Duration
	OpsPerSec float64
}

// String is the line scripts/bench-vs-etcd.sh prints after the system's
// name: WORKLOAD CLIENTS OPS_PER_SEC P50_MS P99_MS.
func (r *Result) String() string {
	return fmt.Sprintf("%s %d %d %.2f %.2f", r.Workload, r.Clients, int(r.OpsPerSec+0.5), ms(r.P50), ms(r.P99))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// op is one measured operation of a client.
type op func() error

// connect opens a session to ep and waits until it is established.
func connect(ep string) (*zk.Conn, error) {
	c, events, err := zk.Connect([]string{ep}, 30*time.Second,
		zk.WithLogger(log.New(io.Discard, "", 0)), zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return c, nil
			}
		case <-deadline:
			c.Close()
			return nil, fmt.Errorf("no session with %s after 10s", ep)
		}
	}
}

// Bench runs workload w with n clients, each its own session with ep, for
// warmup unmeasured (the servers' JIT compiler at work, as in a server that
// has been up a while) and then for d.
func Bench(w string, n int, d, warmup time.Duration, ep string) (*Result, error) {
	if !slices.Contains(Workloads, w) {
		return nil, fmt.Errorf("unknown workload %q (one of %v)", w, Workloads)
	}
	if n < 1 {
		return nil, fmt.Errorf("clients must be at least 1, not %d", n)
	}
	conns := make([]*zk.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	// A prefix of its own per run, so runs against one ensemble do not meet.
	root := fmt.Sprintf("/locks/r%d", time.Now().UnixNano())
	ops := make([]op, n)
	c, err := connect(ep)
	if err != nil {
		return nil, fmt.Errorf("client 0: %w", err)
	}
	conns[0] = c
	if err := ensure(c, root); err != nil {
		return nil, err
	}
	// The clients connect and set up at once: with 64 cycle clients that is
	// 4,096 lock nodes, a minute one after another on a busy machine.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if conns[i] == nil {
				if conns[i], errs[i] = connect(ep); errs[i] != nil {
					errs[i] = fmt.Errorf("client %d: %w", i, errs[i])
					return
				}
			}
			if ops[i], errs[i] = setup(conns[i], w, fmt.Sprintf("%s/c%d", root, i)); errs[i] != nil {
				errs[i] = fmt.Errorf("setup of client %d: %w", i, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if warmup > 0 {
		run(w, ops, warmup)
	}
	return run(w, ops, d), nil
}

// run drives ops, one goroutine each, until d passes.
func run(w string, ops []op, d time.Duration) *Result {
	lats := make([][]time.Duration, len(ops))
	errs := make([]error, len(ops))
	nerr := make([]int, len(ops))
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i, o := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := o(); err != nil {
					nerr[i]++
					if errs[i] == nil {
						errs[i] = err
					}
					continue
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	r := &Result{Workload: w, Clients: len(ops), Elapsed: time.Since(start)}
	var all []time.Duration
	for i, l := range lats {
		all = append(all, l...)
		r.Errors += nerr[i]
		if r.FirstErr == nil {
			r.FirstErr = errs[i]
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r.Ops = len(all)
	r.OpsPerSec = float64(len(all)) / r.Elapsed.Seconds()
	if len(all) > 0 {
		pick := func(q float64) time.Duration { return all[min(len(all)-1, int(q*float64(len(all))))] }
		r.P50, r.P99 = pick(0.50), pick(0.99)
	}
	return r
}

// ensure creates the persistent node p and its parents if absent.
func ensure(c *zk.Conn, p string) error {
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		if _, err := c.Create(p[:i], nil, zk.FlagPersistent, openACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", p[:i], err)
		}
	}
	return nil
}

// createAll creates the persistent nodes base/k0 to base/k(n-1), the
// requests pipelined on the one session.
func createAll(c *zk.Conn, base string, n int) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = ensure(c, fmt.Sprintf("%s/k%d", base, k))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// setup prepares one client of workload w under its own node base and
// returns its operation.
func setup(c *zk.Conn, w, base string) (op, error) {
	if err := ensure(c, base); err != nil {
		return nil, err
	}
	switch w {
	case Acquire:
		n := 0
		return func() error {
			n++
			lock := fmt.Sprintf("%s/a%d", base, n)
			res, err := c.Multi(
				&zk.CreateRequest{Path: lock, Acl: openACL, Flags: zk.FlagPersistent},
				&zk.CreateRequest{Path: lock + "/lock-", Acl: openACL, Flags: zk.FlagEphemeralSequential})
			if err != nil {
				return err
			}
			return lowest(c, lock, res[1].String)
		}, nil
	case Cycle:
		if err := createAll(c, base, cycleKeys); err != nil {
			return nil, err
		}
		n := 0
		return func() error {
			n++
			child, err := acquire(c, fmt.Sprintf("%s/k%d", base, n%cycleKeys))
			if err != nil {
				return err
			}
			return c.Delete(child, -1)
		}, nil
	case Verify, VerifyLinearizable:
		child, err := acquire(c, base)
		if err != nil {
			return nil, err
		}
		_, st, err := c.Get(child)
		if err != nil {
			return nil, err
		}
		if w == Verify {
			return func() error { return syncRead(c, child) }, nil
		}
		return func() error { return checkHeld(c, child, st.Version) }, nil
	}
	return nil, fmt.Errorf("unknown workload %q", w)
}

// acquire is the lock recipe's acquire of lock when no one else holds it:
// an ephemeral-sequential child, then getChildren to see it is the lowest.
func acquire(c *zk.Conn, lock string) (string, error) {
	child, err := c.Create(lock+"/lock-", nil, zk.FlagEphemeralSequential, openACL)
	if err != nil {
		return "", err
	}
	return child, lowest(c, lock, child)
}

// lowest checks that child is the lowest-numbered child of lock, that is
// that its creator holds the lock.
func lowest(c *zk.Conn, lock, child string) error {
	kids, _, err := c.Children(lock)
	if err != nil {
		return err
	}
	if len(kids) == 0 {
		return fmt.Errorf("%s: no children after creating %s", lock, child)
	}
	// Sequence numbers are zero-padded to ten digits: the names sort.
	if lock+"/"+slices.Min(kids) != child {
		return errNotLowest
	}
	return nil
}

// syncRead is the read a holder makes to see its lock child still exists:
// sync (the server catches up with the leader) then getData.
func syncRead(c *zk.Conn, child string) error {
	if _, err := c.Sync(child); err != nil {
		return err
	}
	_, _, err := c.Get(child)
	return err
}

// checkHeld confirms through a committed transaction that child still
// exists at version: a multi holding only a version check.
func checkHeld(c *zk.Conn, child string, version int32) error {
	res, err := c.Multi(&zk.CheckVersionRequest{Path: child, Version: version})
	if err != nil {
		return err
	}
	return res[0].Error
}
