// Package testutil holds the waiting and port helpers shared by fenced's tests.
package testutil

import (
	"fmt"
	"testing"
	"time"

	"github.com/fenced/fenced/internal/freeport"
)

// Eventually polls cond until it returns nil or the timeout passes, then fails
// the test with cond's last error. Tests wait with it, never with bare sleeps.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("condition not met within %v: %v", timeout, err)
	}
}

// Poll polls cond until it returns nil or the timeout passes, and returns its
// last error.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	wait := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// FreeAddrs returns n loopback addresses whose ports were free a moment
// ago, below the ephemeral range (freeport.Addrs).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	out, err := freeport.Addrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Errorf is fmt.Errorf, for conditions.
func Errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
