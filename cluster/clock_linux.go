package cluster

import (
	"time"

	"golang.org/x/sys/unix"
)

// contactClock is CLOCK_BOOTTIME: like the monotonic clock, but it keeps
// counting while the machine is suspended, so a leader that wakes from a
// suspend sees its quorum contact as old as it is.
var contactClock = bootClock()

// bootClock returns CLOCK_BOOTTIME as a time.Time, or nil where the kernel
// lacks it (before Linux 2.6.39).
func bootClock() func() time.Time {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return nil
	}
	return func() time.Time {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) // it worked once: it cannot fail
		return time.Unix(ts.Unix())
	}
}
