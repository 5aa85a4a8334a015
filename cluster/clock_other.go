//go:build !linux

package cluster

import "time"

// contactClock is nil where no clock counts a suspended machine's sleep:
// every renewal then waits for a confirmation round.
var contactClock func() time.Time
