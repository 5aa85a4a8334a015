package proccluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// StartTest starts a cluster for a test in a temp dir of the test's: it skips
// under -short, stops every process when the test ends, prints the tail of the
// node logs when the test failed, and waits until a leader is ready.
func StartTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real fenced processes; skipped with -short")
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	c, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Logs(40))
		}
		c.Stop()
	})
	if _, err := c.Leader(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

// WaitStopped waits until the process is in the stopped state. SIGSTOP is
// delivered asynchronously: a process can run on for a moment after kill(2)
// returns, and a test that acts as if it were frozen would race it.
func WaitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(data, ')'); i > 0 && i+2 < len(data) && (data[i+2] == 'T' || data[i+2] == 't') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped after %v", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
