package cluster

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/tlsutil"
)

// peerTLS returns the Raft port's server and client TLS configurations of a
// fresh development PKI.
func peerTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	p, err := tlsutil.WriteDevPKI(filepath.Join(t.TempDir(), "tls"), tlsutil.DevOptions{Nodes: []string{"n1", "n2"}})
	if err != nil {
		t.Fatal(err)
	}
	n1, err := tlsutil.Load(p.Nodes["n1"].Peer)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := tlsutil.Load(p.Nodes["n2"].Peer)
	if err != nil {
		t.Fatal(err)
	}
	return tlsutil.PeerServerConfig(n1, ""), tlsutil.PeerClientConfig(n2, "")
}

// echoLayer listens with TLS on a free loopback port and echoes one line at
// a time on every connection Accept returns, as the Raft transport reads
// RPCs from them.
func echoLayer(t *testing.T, server, client *tls.Config) *StreamLayer {
	t.Helper()
	l, err := NewStreamLayer("127.0.0.1:0", "", server, client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l
}

// echo sends a line on c and reads it back.
func echo(c net.Conn, line string) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return errors.New("echoed " + got)
	}
	return nil
}

// idle opens a TCP connection to addr that sends hello (possibly nothing)
// and then waits; closed is incremented when the server closes it.
func idle(t *testing.T, addr string, hello []byte, closed *atomic.Int64) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if len(hello) > 0 {
		if _, err := c.Write(hello); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		buf := make([]byte, 1)
		for {
			if _, err := c.Read(buf); err != nil {
				closed.Add(1)
				return
			}
		}
	}()
}

// partialHello is the start of a TLS ClientHello record.
var partialHello = []byte{0x16, 0x03, 0x01, 0x00, 0xc8, 0x01}

// The Raft port cuts connections that do not complete a TLS handshake in
// time, refuses more than a bounded number of handshakes at once, handshakes
// off the accept loop (a peer gets through while others stall), and clears
// the deadline of a connection that completed its handshake.
func TestStreamLayerCutsStalledHandshakes(t *testing.T) {
	server, client := peerTLS(t)
	l := echoLayer(t, server, client)
	addr := l.Addr().String()

	var closed atomic.Int64
	half := DefaultMaxHandshakes / 2
	for i := 0; i < half; i++ {
		hello := []byte(nil)
		if i%2 == 1 {
			hello = partialHello
		}
		idle(t, addr, hello, &closed)
	}
	// A peer completes its handshake while those stall.
	peer, err := l.Dial(boundAddr("n1", raft.ServerAddress(addr)), 10*time.Second)
	if err != nil {
		t.Fatalf("a peer could not connect while %d connections stalled their handshakes: %v", half, err)
	}
	defer peer.Close()
	if err := echo(peer, "first"); err != nil {
		t.Fatal(err)
	}

	// More stalled connections than handshakes allowed at once.
	total := DefaultMaxHandshakes + 16
	for i := half; i < total; i++ {
		idle(t, addr, nil, &closed)
	}
	testutil.Eventually(t, 60*time.Second, func() error {
		if n := closed.Load(); n < int64(total) {
			return testutil.Errorf("the server closed %d of %d connections that never completed a handshake", n, total)
		}
		return nil
	})

	// Every stalled connection was cut, so the handshake timeout has passed
	// since the peer's handshake too: its connection must still work.
	if err := echo(peer, "after the handshake timeout"); err != nil {
		t.Fatalf("the peer's connection failed after the handshake timeout: %v", err)
	}
}

// Connections beyond the cap on handshakes in progress are closed as they
// arrive, the ones within it are left to their deadline, and a slot freed by
// a finished handshake takes a peer again.
func TestStreamLayerCapsHandshakesInProgress(t *testing.T) {
	server, client := peerTLS(t)
	const max = 4
	l, err := NewStreamLayer("127.0.0.1:0", "", server, client, WithMaxHandshakes(max), WithHandshakeTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	addr := l.Addr().String()

	var held []net.Conn
	for i := 0; i < max; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	var closed atomic.Int64
	for i := 0; i < max; i++ {
		idle(t, addr, partialHello, &closed)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := closed.Load(); n != max {
			return testutil.Errorf("%d of %d connections over the cap closed", n, max)
		}
		return nil
	})
	if _, err := l.Dial(boundAddr("n1", raft.ServerAddress(addr)), 5*time.Second); err == nil {
		t.Fatal("a connection over the cap completed its handshake")
	}

	// One stalled connection goes away: its slot takes a peer.
	held[0].Close()
	testutil.Eventually(t, 30*time.Second, func() error {
		c, err := l.Dial(boundAddr("n1", raft.ServerAddress(addr)), 5*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}
