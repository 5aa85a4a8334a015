package api

import (
	"bufio"
	"net"
	"net/http"
	"strings"
)

// ServerProtocols returns the protocols a node's plain-HTTP API server
// accepts on one port: HTTP/1.1, and HTTP/2 without TLS (h2c) from clients
// that know the server speaks it (prior knowledge, no Upgrade dance). Many
// concurrent requests then share one connection, and the server reads and
// writes many of them per system call instead of one each.
func ServerProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// WithHTTP2 makes the client speak HTTP/2 without TLS (h2c, prior knowledge)
// to plain-http endpoints: all concurrent requests to a node share one
// connection, which costs the node (and the client) fewer system calls per
// request than HTTP/1.1's connection per request in flight. Every node must
// then serve h2c, as fenced does on a plain-HTTP port. It has no effect when
// any endpoint is https (TLS connections stay HTTP/1.1), or when the HTTP
// client's transport is not an *http.Transport. It applies to the HTTP
// client in effect after all options, and never changes a transport given
// with WithHTTPClient: it uses a copy.
func WithHTTP2() ClientOption { return func(c *Client) { c.http2 = true } }

// useHTTP2 switches the client's transport to h2c if WithHTTP2 asked for it
// and every endpoint is plain http.
func (c *Client) useHTTP2() {
	if !c.http2 {
		return
	}
	for _, e := range c.endpoints {
		if !strings.HasPrefix(e, "http://") {
			return
		}
	}
	tr, ok := c.hc.Transport.(*http.Transport)
	if !ok {
		return
	}
	tr = tr.Clone()
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr.Protocols = p
	hc := *c.hc
	hc.Transport = tr
	c.hc = &hc
}

// BufferedListener wraps a plain-TCP listener of the API so that every
// connection's reads go through a buffer. Go's HTTP/2 server reads each
// frame straight from the connection, its 9-byte header and its payload
// with a system call each, so a request (a HEADERS and a DATA frame) costs
// four reads; through the buffer, one read takes in every frame that has
// arrived. HTTP/1.1 connections are unaffected: net/http reads them through
// a buffer of its own, as large as this one, which bufio bypasses.
func BufferedListener(ln net.Listener) net.Listener { return bufferedListener{ln} }

type bufferedListener struct{ net.Listener }

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, connReadBuffer)}, nil
}

// connReadBuffer is net/http's own read buffer size.
const connReadBuffer = 4 << 10

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the connection as net/http does before it closes
// one it answered with an error (so the client reads the answer, not a
// reset).
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
