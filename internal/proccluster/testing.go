package proccluster

import (
	"context"
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
