//go:build unix

package guard

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// flock takes an exclusive flock(2) on f, waiting until ctx ends. A blocking
// flock cannot be abandoned, so it polls with a short backoff that grows to
// 10ms; the lock is usually held for one write and a few fsyncs.
func flock(ctx context.Context, f *os.File) error {
	backoff := 100 * time.Microsecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 10*time.Millisecond)
	}
}
