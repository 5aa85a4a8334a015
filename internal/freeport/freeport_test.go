package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports are distinct, bindable, and below the ephemeral range, where no
// outgoing connection takes them.
func TestAddrsBelowTheEphemeralRange(t *testing.T) {
	addrs, err := Addrs(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	top := ephemeralLow()
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s returned twice in %v", a, addrs)
		}
		seen[a] = true
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if top-lowest >= 1000 && (port < lowest || port >= top) {
			t.Fatalf("port %d outside [%d, %d)", port, lowest, top)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s is not free: %v", a, err)
		}
		ln.Close()
	}
}
