// Package freeport finds loopback ports for tests and harnesses that must
// name an address before the process that listens on it starts.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// Below the kernel's ephemeral range the ports a test names are never taken
// by the local end of an outgoing connection (a raft dial, an HTTP client)
// between the moment they were found free and the moment a node binds them:
// a port from Listen(":0") is an ephemeral one, and on a busy machine the
// next outgoing connection took it often enough to fail a run now and then.
const (
	lowest = 10000
	// ephemeralDefault is Linux's default lower bound of
	// net.ipv4.ip_local_port_range, used where it cannot be read.
	ephemeralDefault = 32768
)

// Addrs returns n distinct 127.0.0.1 addresses whose ports were free a
// moment ago, chosen at random below the ephemeral range (from it, as
// Listen(":0") picks, where the range leaves no room below it).
func Addrs(n int) ([]string, error) {
	top := ephemeralLow()
	if top-lowest < 1000 {
		return ephemeral(n)
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	out := make([]string, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("freeport: no free port found below %d after %d tries", top, tries)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lowest+rand.IntN(top-lowest)))
		if err != nil {
			continue
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

// ephemeral returns n ports as Listen(":0") picks them.
func ephemeral(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

// ephemeralLow is the lower bound of the kernel's ephemeral port range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return ephemeralDefault
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil || low <= 0 {
		return ephemeralDefault
	}
	return low
}
