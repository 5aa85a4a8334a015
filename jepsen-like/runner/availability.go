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
// again after its node froze: raft's randomised timers (a follower waits
// between one and two heartbeat timeouts before it stands: up to 1 s in the
// suite), the new leader's readiness (its first commit and the re-arming of
// the leases: about 0.3 s), the attempt the client abandons on the frozen
// node (its deadline, two election timeouts), its retry backoff, and a
// loaded two-core machine. With the suite's 500 ms election timeout the
// bound is 2.5 s; the target reported beside it is the election timeout
// plus 1 s.
const DefaultAvailabilityMargin = 2 * time.Second

// attemptTimeout is the clients' deadline of one attempt on one node: twice
// the election timeout, the ratio of the API client's default (2 s for
// fenced's default election timeout of 1 s), and at most half an operation.
func attemptTimeout(cfg Config) time.Duration {
	return min(2*cfg.ElectionTimeout, cfg.OpTimeout/2)
}

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
