package testutil

import (
	"net"
	"sync"
	"testing"
)

// FrozenListener listens on a loopback port, accepts every connection and
// never answers, as a process stopped by SIGSTOP does once the kernel has
// queued the request. It returns the address (host:port) and the number of
// connections accepted so far, one per attempt of a client (a timed-out
// attempt closes its connection); the test's cleanup closes them all.
func FrozenListener(t testing.TB) (addr string, conns func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(held)
	}
}
