package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// lockTimingArgs is the lock timing of these tests: ttl 3s, grace 300ms, so
// margin = max(1s, 1.3s) = 1.3s. The command is sent SIGTERM 1.7s and SIGKILL
// 2s after the last renewal was sent; fenced cannot expire the grant before 3s.
var lockTimingArgs = []string{"--ttl", "3s", "--grace", "300ms"}

func lockArgs(eps, key, holder string, extra ...string) []string {
	args := append([]string{"--endpoints", eps, "lock", key, "--holder", holder}, lockTimingArgs...)
	args = append(args, extra...)
	return append(args, "--", os.Args[0])
}

// TestLockRunsCommandWithGrant: the command sees the grant in its
// environment, its exit code comes back, and the key is free afterwards.
func TestLockRunsCommandWithGrant(t *testing.T) {
	cl := shared.get(t)
	c, ctx := cl.Client(), testCtx(t, time.Minute)
	key, out := testKey(t), filepath.Join(t.TempDir(), "env")

	before := time.Now()
	code, stdout, stderr := runCtl(t, helperEnv("env", out, "HELPER_EXIT=7"), lockArgs(endpoints(cl), key, "h1")...)
	if code != 7 {
		t.Fatalf("exit code %d, want the command's 7\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	env := readEnvFile(t, out)
	if env["FENCE_KEY"] != key || env["FENCE_HOLDER"] != "h1" || env["FENCE_ENDPOINTS"] != endpoints(cl) {
		t.Fatalf("command environment %v", env)
	}
	tok, err := fence.Parse(env["FENCE_TOKEN"])
	if err != nil {
		t.Fatalf("FENCE_TOKEN: %v", err)
	}
	deadline, err := time.Parse(time.RFC3339Nano, env["FENCE_LEASE_DEADLINE"])
	if err != nil {
		t.Fatalf("FENCE_LEASE_DEADLINE: %v", err)
	}
	// The deadline is the acquire's send time + ttl - margin = +1.7s.
	if deadline.Before(before.Add(1700*time.Millisecond)) || deadline.After(time.Now().Add(1700*time.Millisecond)) {
		t.Fatalf("FENCE_LEASE_DEADLINE %v not 1.7s after the acquire (started %v)", deadline, before)
	}

	ki, err := c.Key(ctx, key)
	if err != nil || ki.State != "released" || ki.Token != tok {
		t.Fatalf("after lock: key %+v, %v; want token %v released", ki, err, tok)
	}
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: key, Holder: "h2", TTL: "3s"})
	if err != nil || g.Token <= tok {
		t.Fatalf("acquire after lock: %+v, %v", g, err)
	}
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: key, Holder: "h2", Token: g.Token}); err != nil {
		t.Fatal(err)
	}

	// A command ended by a signal exits 128+N; the default holder is
	// HOST/PID/RANDOM.
	args := []string{"--endpoints", endpoints(cl), "lock", key, "--shell", "--ttl", "3s", "--grace", "300ms", "--",
		"echo $FENCE_HOLDER >" + filepath.Join(t.TempDir(), "holder") + "; kill -9 $$"}
	code, _, stderr = runCtl(t, nil, args...)
	if code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit code %d, want %d\nstderr: %s", code, 128+int(syscall.SIGKILL), stderr)
	}
	ki, err = c.Key(ctx, key)
	host, _ := os.Hostname()
	if err != nil || ki.State != "released" || !strings.HasPrefix(ki.Holder, host+"/") {
		t.Fatalf("after a killed command: key %+v, %v; want released by a holder %s/PID/RANDOM", ki, err, host)
	}
}

func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		env[k] = v
	}
	return env
}

// TestLockKillsCommandWhenCutOff: fencectl loses its way to the cluster (a
// proxy in front of the cluster is closed) while a second holder waits for
// the key. The first command ignores SIGTERM, so it must be SIGKILLed; all
// it recorded must come before the second command started, which runs
// only once fenced granted the key to the second holder.
func TestLockKillsCommandWhenCutOff(t *testing.T) {
	t.Parallel()
	cl := shared.get(t)
	p := startProxy(t, cl.Endpoints())
	key, dir := testKey(t), t.TempDir()
	f1, f2 := filepath.Join(dir, "first"), filepath.Join(dir, "second")

	first := startCtl(t, helperEnv("ticker", f1, "HELPER_IGNORE_TERM=1"), lockArgs(p.Addr(), key, "first")...)
	killGroupAtCleanup(t, f1)
	waitEvent(t, f1, "start", 20*time.Second)
	p.Cut()
	second := startCtl(t, helperEnv("start", f2), lockArgs(endpoints(cl), key, "second", "--wait", "30s")...)

	if code := first.wait(t, 20*time.Second); code != exitLockLost {
		t.Fatalf("first fencectl exit %d, want %d\nstderr: %s", code, exitLockLost, first.stderr)
	}
	if !strings.Contains(first.stderr.String(), "lost") || !strings.Contains(first.stderr.String(), "SIGKILL") {
		t.Fatalf("first fencectl stderr does not say the lock was lost and SIGKILL was needed: %s", first.stderr)
	}
	if code := second.wait(t, 40*time.Second); code != 0 {
		t.Fatalf("second fencectl exit %d\nstderr: %s", code, second.stderr)
	}
	ev1, ev2 := readEvents(t, f1), readEvents(t, f2)
	start2, ok := findEvent(ev2, "start")
	if !ok {
		t.Fatal("second command never started")
	}
	if _, ok := findEvent(ev1, "term"); !ok {
		t.Fatal("first command never got SIGTERM")
	}
	last1 := ev1[len(ev1)-1]
	if !last1.at.Before(start2.at) {
		t.Fatalf("first command's last %s at %v is not before the second command started at %v",
			last1.kind, last1.at.Format(time.StampMicro), start2.at.Format(time.StampMicro))
	}
	tok1, _ := findEvent(ev1, "start")
	if t1, t2 := mustToken(t, tok1.rest), mustToken(t, start2.rest); t2 <= t1 {
		t.Fatalf("second token %v not above first %v", t2, t1)
	}
	t.Logf("first command's last write %v before the second started", start2.at.Sub(last1.at))
}

// TestLockKillsCommandAfterStop: the grant expires while fencectl is stopped
// with SIGSTOP and a second holder gets the key; on SIGCONT fencectl must
// stop its command at once, its deadline having passed.
func TestLockKillsCommandAfterStop(t *testing.T) {
	t.Parallel()
	cl := shared.get(t)

	// Only fencectl is stopped: its command keeps running, and nothing on
	// the client side can stop it until fencectl runs again. It must be
	// stopped as soon as fencectl wakes, and its token is refused from the
	// moment of the second grant: that refusal, at the resource, is the
	// protection.
	t.Run("fencectl stopped", func(t *testing.T) {
		t.Parallel()
		c, ctx := cl.Client(), testCtx(t, time.Minute)
		key, f1 := testKey(t), filepath.Join(t.TempDir(), "first")
		first := startCtl(t, helperEnv("ticker", f1), lockArgs(endpoints(cl), key, "first")...)
		killGroupAtCleanup(t, f1)
		start := waitEvent(t, f1, "start", 20*time.Second)
		stop(t, first.cmd.Process.Pid)

		g2 := acquireAfterExpiry(t, cl, key)
		if v, err := c.Verify(ctx, key, start.rest, ""); err != nil || v.Allow || v.Reason != string(cluster.ReasonSuperseded) {
			t.Fatalf("first token after the second grant: %+v, %v; want refused as superseded", v, err)
		}
		woke := time.Now()
		resume(t, first.cmd.Process.Pid)
		if code := first.wait(t, 10*time.Second); code != exitLockLost {
			t.Fatalf("fencectl exit %d, want %d\nstderr: %s", code, exitLockLost, first.stderr)
		}
		ev := readEvents(t, f1)
		term, ok := findEvent(ev, "term")
		if !ok {
			t.Fatalf("the command never got SIGTERM; stderr: %s", first.stderr)
		}
		// Not before fencectl woke (it was stopped), and promptly after:
		// no renewal attempt stands between waking and the kill.
		if term.at.Before(woke) || term.at.Sub(woke) > time.Second {
			t.Fatalf("SIGTERM reached the command %v after fencectl woke; want within 1s", term.at.Sub(woke))
		}
		if last := ev[len(ev)-1]; last.kind != "term" {
			t.Fatalf("the command wrote %q after its SIGTERM", last.kind)
		}
		t.Logf("second grant %v; command stopped %v after fencectl woke", g2.Token, term.at.Sub(woke))
	})

	// fencectl and its command are frozen together, like a paused VM or a
	// frozen cgroup. The command must be killed before it runs again: after
	// fencectl wakes, nothing of its process group may be left, and it
	// wrote nothing after the second holder asked for the key.
	t.Run("fencectl and command stopped", func(t *testing.T) {
		t.Parallel()
		key, f1 := testKey(t), filepath.Join(t.TempDir(), "first")
		first := startCtl(t, helperEnv("ticker", f1), lockArgs(endpoints(cl), key, "first")...)
		killGroupAtCleanup(t, f1)
		waitEvent(t, f1, "start", 20*time.Second)
		pgid := helperPID(t, f1)
		stop(t, -pgid)
		stop(t, first.cmd.Process.Pid)

		asked := time.Now()
		acquireAfterExpiry(t, cl, key)
		woke := time.Now()
		resume(t, first.cmd.Process.Pid)
		if code := first.wait(t, 10*time.Second); code != exitLockLost {
			t.Fatalf("fencectl exit %d, want %d\nstderr: %s", code, exitLockLost, first.stderr)
		}
		if took := time.Since(woke); took > 3*time.Second {
			t.Fatalf("fencectl took %v after waking to stop the command", took)
		}
		if err := syscall.Kill(-pgid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("the command's process group is still there after fencectl exited (kill: %v)", err)
		}
		_ = syscall.Kill(-pgid, syscall.SIGCONT) // were anything left, it would run now
		for _, ev := range readEvents(t, f1) {
			if !ev.at.Before(asked) {
				t.Fatalf("the command wrote %q at %v, after the second holder asked for the key at %v", ev.kind, ev.at, asked)
			}
		}
	})
}

// acquireAfterExpiry acquires key as "second", waiting until fenced expires
// the first holder's lease.
func acquireAfterExpiry(t *testing.T, cl *proccluster.Cluster, key string) *client.Grant {
	t.Helper()
	g, err := cl.Client().Acquire(testCtx(t, 40*time.Second), client.AcquireRequest{Key: key, Holder: "second", TTL: "30s", Wait: "30s"})
	if err != nil {
		t.Fatalf("second acquire: %v", err)
	}
	return g
}

func stop(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	// A signal takes effect when its process next enters the kernel: one
	// running on the other core may go on for a moment. Wait until every
	// process it was sent to is stopped.
	testutil.Eventually(t, 10*time.Second, func() error {
		if p := running(pid); p != 0 {
			return fmt.Errorf("process %d still runs after SIGSTOP to %d", p, pid)
		}
		return nil
	})
}

// running returns a process that pid names (-pid: its process group) and
// that is not stopped, or 0.
func running(pid int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		i := bytes.LastIndexByte(b, ')')
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:])) // state, ppid, pgrp, ...
		if len(f) < 3 {
			continue
		}
		pgrp, _ := strconv.Atoi(f[2])
		if (pid > 0 && p == pid || pid < 0 && pgrp == -pid) && f[0] != "T" && f[0] != "t" && f[0] != "Z" {
			return p
		}
	}
	return 0
}

func resume(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT %d: %v", pid, err)
	}
}

// helperPID is the pid of a ticker command, which is also its process group.
func helperPID(t *testing.T, path string) int {
	t.Helper()
	ev := waitEvent(t, path, "pid", 10*time.Second)
	pid, err := strconv.Atoi(ev.rest)
	if err != nil {
		t.Fatalf("pid %q: %v", ev.rest, err)
	}
	return pid
}

// killGroupAtCleanup kills what a failed test may leave of a ticker command.
func killGroupAtCleanup(t *testing.T, path string) {
	t.Cleanup(func() {
		data, _ := os.ReadFile(path)
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "pid" {
				if pid, err := strconv.Atoi(f[2]); err == nil {
					_ = syscall.Kill(-pid, syscall.SIGKILL)
					_ = syscall.Kill(-pid, syscall.SIGCONT)
				}
			}
		}
	})
}

func mustToken(t *testing.T, s string) fence.Token {
	t.Helper()
	tok, err := fence.Parse(strings.TrimSpace(s))
	if err != nil {
		t.Fatalf("token %q: %v", s, err)
	}
	return tok
}

// TestLockInterruptedWhileWaiting: a signal while lock waits for a held key
// ends fencectl with 128+N, never runs the command, and leaves no grant
// and no waiter behind: when the holder releases, the key stays free.
func TestLockInterruptedWhileWaiting(t *testing.T) {
	cl := shared.get(t)
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			c, ctx := cl.Client(), testCtx(t, time.Minute)
			key, out := testKey(t), filepath.Join(t.TempDir(), "waiter")
			g, err := c.Acquire(ctx, client.AcquireRequest{Key: key, Holder: "owner", TTL: "30s"})
			if err != nil {
				t.Fatal(err)
			}
			w := startCtl(t, helperEnv("start", out), lockArgs(endpoints(cl), key, "waiter", "--wait", "1m")...)
			waiters := func() (int, error) {
				leader, err := cl.Leader(ctx, 10*time.Second)
				if err != nil {
					return 0, err
				}
				st, err := c.NodeStatus(ctx, "http://"+leader.HTTPAddr)
				if err != nil {
					return 0, err
				}
				return st.Waiters, nil
			}
			testutil.Eventually(t, 10*time.Second, func() error {
				if n, err := waiters(); err != nil || n == 0 {
					return testutil.Errorf("no waiter yet (%d, %v)", n, err)
				}
				return nil
			})
			if err := w.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if code := w.wait(t, 15*time.Second); code != tc.code {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, tc.code, w.stderr)
			}
			if !strings.Contains(w.stderr.String(), "interrupted") {
				t.Fatalf("stderr: %s", w.stderr)
			}
			testutil.Eventually(t, 10*time.Second, func() error {
				if n, err := waiters(); err != nil || n != 0 {
					return testutil.Errorf("waiter still queued (%d, %v)", n, err)
				}
				return nil
			})
			if _, err := c.Release(ctx, client.ReleaseRequest{Key: key, Holder: "owner", Token: g.Token}); err != nil {
				t.Fatal(err)
			}
			if ki, err := c.Key(ctx, key); err != nil || ki.State != "released" || ki.Holder != "owner" {
				t.Fatalf("after the owner's release: %+v, %v; want released, not granted to the interrupted waiter", ki, err)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the command ran (%v)", err)
			}
		})
	}
}
