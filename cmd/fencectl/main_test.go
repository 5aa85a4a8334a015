package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// TestMain doubles as the command that lock runs in tests: with
// FENCECTL_TEST_HELPER set, the test binary is that command (see helperMain).
func TestMain(m *testing.M) {
	if mode := os.Getenv("FENCECTL_TEST_HELPER"); mode != "" {
		os.Exit(helperMain(mode))
	}
	code := m.Run()
	shared.stop()
	os.Exit(code)
}

// helperMain is the command lock runs in tests. It records what it sees and
// when, one line per event "KIND UNIXNANOS REST", into $HELPER_OUT, each
// line in one write so a SIGKILL never leaves half a line.
//
//	env     writes the FENCE_* variables and exits with $HELPER_EXIT
//	start   records its start and FENCE_TOKEN, and exits 0
//	ticker  records its pid and start, then a tick every 20ms until SIGTERM,
//	        which it records ("term") and exits on, or keeps ticking
//	        through when $HELPER_IGNORE_TERM is 1
func helperMain(mode string) int {
	f, err := os.OpenFile(os.Getenv("HELPER_OUT"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 99
	}
	record := func(kind, rest string) {
		_, _ = fmt.Fprintf(f, "%s %d %s\n", kind, time.Now().UnixNano(), rest)
	}
	switch mode {
	case "env":
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "FENCE_") {
				fmt.Fprintln(f, kv)
			}
		}
		code, _ := strconv.Atoi(os.Getenv("HELPER_EXIT"))
		return code
	case "start":
		record("start", os.Getenv("FENCE_TOKEN"))
		return 0
	case "ticker":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		record("pid", strconv.Itoa(os.Getpid()))
		record("start", os.Getenv("FENCE_TOKEN"))
		ignore := os.Getenv("HELPER_IGNORE_TERM") == "1"
		tick := time.NewTicker(20 * time.Millisecond)
		for {
			select {
			case <-term:
				record("term", "")
				if !ignore {
					return 143
				}
			case <-tick.C:
				record("tick", "")
			}
		}
	}
	fmt.Fprintln(os.Stderr, "helper: unknown mode", mode)
	return 99
}

// helperEnv is the environment that makes the test binary run helperMain.
func helperEnv(mode, out string, extra ...string) []string {
	return append([]string{"FENCECTL_TEST_HELPER=" + mode, "HELPER_OUT=" + out}, extra...)
}

// event is one line a helper recorded.
type event struct {
	kind string
	at   time.Time
	rest string
}

func readEvents(t *testing.T, path string) []event {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read helper events: %v", err)
	}
	var out []event
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 3)
		if len(parts) < 2 {
			t.Fatalf("bad helper line %q", sc.Text())
		}
		ns, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil {
			t.Fatalf("bad helper line %q", sc.Text())
		}
		ev := event{kind: parts[0], at: time.Unix(0, ns)}
		if len(parts) == 3 {
			ev.rest = parts[2]
		}
		out = append(out, ev)
	}
	return out
}

// findEvent returns the first event of a kind.
func findEvent(evs []event, kind string) (event, bool) {
	for _, ev := range evs {
		if ev.kind == kind {
			return ev, true
		}
	}
	return event{}, false
}

// waitEvent waits until the helper recorded an event of a kind.
func waitEvent(t *testing.T, path, kind string, timeout time.Duration) event {
	t.Helper()
	var found event
	testutil.Eventually(t, timeout, func() error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, kind+" ") {
				f := strings.SplitN(line, " ", 3)
				ns, _ := strconv.ParseInt(f[1], 10, 64)
				found = event{kind: kind, at: time.Unix(0, ns)}
				if len(f) == 3 {
					found.rest = f[2]
				}
				return nil
			}
		}
		return fmt.Errorf("no %q event yet in %s", kind, path)
	})
	return found
}

// shared is one 3-node cluster of real fenced processes for the tests that
// do not hurt its nodes; each test uses keys of its own.
var shared sharedCluster

type sharedCluster struct {
	once sync.Once
	dir  string
	c    *proccluster.Cluster
	err  error
}

func (s *sharedCluster) get(t *testing.T) *proccluster.Cluster {
	t.Helper()
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "fencectl-test-"); s.err != nil {
			return
		}
		if s.c, s.err = proccluster.Start(proccluster.Options{Nodes: 3, Dir: s.dir}); s.err != nil {
			return
		}
		_, s.err = s.c.Leader(context.Background(), 30*time.Second)
	})
	if s.err != nil {
		t.Fatalf("start the shared cluster: %v", s.err)
	}
	return s.c
}

func (s *sharedCluster) stop() {
	if s.c != nil {
		s.c.Stop()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// startCluster starts a cluster of the test's own, for tests that hurt nodes.
func startCluster(t *testing.T, nodes int) *proccluster.Cluster {
	t.Helper()
	c, err := proccluster.Start(proccluster.Options{Nodes: nodes, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if _, err := c.Leader(context.Background(), 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(30))
	}
	return c
}

func endpoints(c *proccluster.Cluster) string { return strings.Join(c.Endpoints(), ",") }

// testKey is a key no other test uses.
func testKey(t *testing.T) string {
	return "test/" + strings.ReplaceAll(t.Name(), "/", "-") + "/" + randomHex(3)
}

func fencectlBin(t *testing.T) string {
	t.Helper()
	_, ctl, err := proccluster.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	return ctl
}

// ctl is a running fencectl process.
type ctl struct {
	cmd    *exec.Cmd
	stdout *lockedBuffer
	stderr *lockedBuffer
	done   chan struct{}
	code   int
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startCtl starts fencectl with args and env added to an environment
// cleaned of FENCE_* variables, so the caller's shell does not leak in.
func startCtl(t *testing.T, env []string, args ...string) *ctl {
	t.Helper()
	cmd := exec.Command(fencectlBin(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCE_") && !strings.HasPrefix(kv, "FENCECTL_TEST_HELPER=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	c := &ctl{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.stdout, c.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	setDeathSignal(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			c.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				c.code = 128 + int(ws.Signal())
			}
		default:
			c.code = -1
		}
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

// wait waits for fencectl to exit and returns its exit code.
func (c *ctl) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-c.done:
		return c.code
	case <-time.After(timeout):
		t.Fatalf("fencectl %v still running after %v\nstdout: %s\nstderr: %s", c.cmd.Args[1:], timeout, c.stdout, c.stderr)
		return -1
	}
}

// runCtl runs fencectl to its end.
func runCtl(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	c := startCtl(t, env, args...)
	code = c.wait(t, 60*time.Second)
	return code, c.stdout.String(), c.stderr.String()
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
