package main

import (
	"io"
	"net"
	"sync"
	"testing"
)

// proxy is a TCP proxy in front of a cluster. Cutting it closes its listener
// and every connection through it: whoever talks to the cluster through the
// proxy is cut off, while the cluster itself stays whole.
type proxy struct {
	ln       net.Listener
	backends []string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	next  int
	cut   bool
}

func startProxy(t *testing.T, backends []string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(p.Cut)
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

// pipe connects a client to the first backend that answers, in turn.
func (p *proxy) pipe(client net.Conn) {
	var backend net.Conn
	for i := 0; i < len(p.backends) && backend == nil; i++ {
		p.mu.Lock()
		addr := p.backends[p.next%len(p.backends)]
		p.next++
		p.mu.Unlock()
		backend, _ = net.Dial("tcp", addr)
	}
	if backend == nil || !p.track(client, backend) {
		client.Close()
		if backend != nil {
			backend.Close()
		}
		return
	}
	go func() {
		_, _ = io.Copy(backend, client)
		backend.Close()
	}()
	_, _ = io.Copy(client, backend)
	client.Close()
}

func (p *proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// Cut closes the listener and every connection: new connections are refused
// and requests in flight fail.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
}
