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
// again after its node froze, as measured in the suite (500 ms heartbeat
// and election timeouts): raft's randomised timers (a follower stands one
// to two heartbeat timeouts after its last contact, up to 1 s, and later on
// a loaded machine), one split vote (up to another election timeout), the
// new leader's readiness (its first commit and the re-arming of the leases:
// about 0.3 s), and on the client's side the attempt in flight on the frozen
// node (its deadline is two election timeouts; half of that on a node that
// timed out before) and the retry backoff. With the suite's 500 ms election
// timeout the bound is 3.5 s, below the 4 s that one operation held by a
// frozen node costs a client without per-attempt deadlines; the target
// reported beside it is the election timeout plus 1 s.
const DefaultAvailabilityMargin = 3 * time.Second

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
