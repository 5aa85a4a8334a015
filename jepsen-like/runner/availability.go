package runner

import (
	"fmt"
	"io"
	"time"

	"github.com/fenced/fenced/jepsen-like/checker"
	"github.com/fenced/fenced/jepsen-like/nemesis"
)

// DefaultAvailabilityMargin is added to the election timeout to bound a
// client's time without service while a quorum is healthy. It covers what
// comes on top of fenced's --election-timeout before a client is served
// again: raft's randomised timers (a follower waits up to twice the
// heartbeat timeout before it stands), the new leader's first commit, one
// attempt abandoned on the frozen node, the client's retry backoff, and a
// loaded two-core machine.
const DefaultAvailabilityMargin = 1500 * time.Millisecond

// availability is the availability checker's configuration for a run.
func availability(cfg Config) checker.AvailabilityOptions {
	return checker.AvailabilityOptions{Nemeses: nemesis.QuorumHealthy, ElectionTimeout: cfg.ElectionTimeout, Margin: cfg.AvailabilityMargin}
}

// printUnavailability prints the availability checker's figures, one line
// per nemesis.
func printUnavailability(out io.Writer, us []checker.Unavailability) {
	for _, u := range us {
		fmt.Fprintf(out, "    %-16s time without service: max %v, p99 %v, median %v over %d client gaps in %d faults (bound %v, target %v); worst: %s\n",
			u.Nemesis, u.Max.Round(time.Millisecond), u.P99.Round(time.Millisecond), u.P50.Round(time.Millisecond),
			u.Samples, u.Faults, u.Bound, u.Target, u.Worst)
	}
}
