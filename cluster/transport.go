package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Defaults of the Raft port's TLS handshakes.
const (
	// DefaultHandshakeTimeout bounds a TLS handshake on the Raft port, as
	// the HTTP API bounds a request's headers.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultMaxHandshakes bounds the connections that may be handshaking
	// at once; more are closed as they arrive.
	DefaultMaxHandshakes = 64
)

// StreamLayer is the Raft transport's connection layer: plain TCP, or TLS when
// configured, so that mutual TLS between peers needs no change elsewhere.
//
// With TLS, Accept returns only connections that completed their handshake
// (the peer's certificate verified). Handshakes run off the accept loop, each
// bounded by a deadline, and only so many at once: a connection that sends
// nothing, or half a ClientHello, holds a file descriptor for the handshake
// timeout at most, and cannot hold up other peers' connections.
type StreamLayer struct {
	ln        net.Listener // TCP
	advertise net.Addr
	client    *tls.Config
	server    *tls.Config // nil: plain TCP

	resolve     func(addr string) string // a stand-in for DNS in tests; nil in production
	skipIDCheck bool                     // the positive control of tests: server ids unchecked

	handshakeTimeout time.Duration
	slots            chan struct{} // one per handshake in progress
	logger           hclog.Logger
	overCap, failed  sparseLog // connections closed for want of a slot, failed handshakes
	wrongPeer        sparseLog // dialed servers whose certificate names another server
	wrongSender      sparseLog // RPCs whose sender is not the server their certificate names

	ready     chan net.Conn   // connections that completed their handshake
	ctx       context.Context // canceled by Close
	cancel    context.CancelFunc
	done      <-chan struct{} // ctx.Done()
	closeOnce sync.Once
	closeErr  error

	// muted, while set, fails every write on the connections this node
	// dialed, and every new dial: its Raft RPCs (heartbeats included) stop
	// reaching its peers (stall.go).
	muted atomic.Bool
}

var _ raft.StreamLayer = (*StreamLayer)(nil)

// errMuted fails the Raft RPCs of a node whose leader's log write stalled.
var errMuted = errors.New("raft transport muted: this node's log write stalled")

// mutableConn is a dialed connection that fails writes while its layer is
// muted.
type mutableConn struct {
	net.Conn
	layer *StreamLayer
}

func (c mutableConn) Write(p []byte) (int, error) {
	if c.layer.muted.Load() {
		return 0, errMuted
	}
	return c.Conn.Write(p)
}

// StreamOption configures a StreamLayer.
type StreamOption func(*StreamLayer)

// WithHandshakeTimeout bounds each TLS handshake on the listener
// (DefaultHandshakeTimeout when not given or not positive).
func WithHandshakeTimeout(d time.Duration) StreamOption {
	return func(s *StreamLayer) {
		if d > 0 {
			s.handshakeTimeout = d
		}
	}
}

// WithMaxHandshakes bounds the TLS handshakes in progress at once
// (DefaultMaxHandshakes when not given or not positive).
func WithMaxHandshakes(n int) StreamOption {
	return func(s *StreamLayer) {
		if n > 0 {
			s.slots = make(chan struct{}, n)
		}
	}
}

// WithStreamLogger logs refused connections and failed handshakes.
func WithStreamLogger(l hclog.Logger) StreamOption {
	return func(s *StreamLayer) {
		if l != nil {
			s.logger = l
		}
	}
}

// withResolver makes Dial dial resolve(address) instead of address: a
// stand-in for DNS in tests.
func withResolver(resolve func(addr string) string) StreamOption {
	return func(s *StreamLayer) { s.resolve = resolve }
}

// withoutIDCheck turns off the checks of server ids against certificates
// (peerid.go): the positive control of the tests that show what they stop.
func withoutIDCheck(off bool) StreamOption {
	return func(s *StreamLayer) { s.skipIDCheck = off }
}

// NewStreamLayer listens on bind and advertises advertise (bind when empty).
// With a non-nil server TLS config, accepted connections are TLS; with a
// non-nil client config, dialed ones are.
func NewStreamLayer(bind, advertise string, server, client *tls.Config, opts ...StreamOption) (*StreamLayer, error) {
	if advertise == "" {
		advertise = bind
	}
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("raft advertise address %q: %w", advertise, err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft advertise address %q is not routable: give --raft-advertise", advertise)
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raft listen %q: %w", bind, err)
	}
	if adv.Port == 0 {
		adv.Port = ln.Addr().(*net.TCPAddr).Port
	}
	s := &StreamLayer{
		ln: ln, advertise: adv, client: client, server: server,
		handshakeTimeout: DefaultHandshakeTimeout,
		slots:            make(chan struct{}, DefaultMaxHandshakes),
		logger:           hclog.NewNullLogger(),
		ready:            make(chan net.Conn),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.done = s.ctx.Done()
	for _, o := range opts {
		o(s)
	}
	if server != nil {
		go s.acceptLoop()
	}
	return s, nil
}

// Accept implements net.Listener: the next connection, with its TLS
// handshake completed when the layer speaks TLS. CheckRPC checks the RPCs
// that arrive on it against its certificate.
func (s *StreamLayer) Accept() (net.Conn, error) {
	if s.server == nil {
		return s.ln.Accept()
	}
	select {
	case c := <-s.ready:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener. Handshakes in progress are abandoned and
// their connections closed.
func (s *StreamLayer) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.closeErr = s.ln.Close()
	})
	return s.closeErr
}

// Addr returns the advertised address, which peers dial.
func (s *StreamLayer) Addr() net.Addr { return s.advertise }

// acceptLoop accepts TCP connections and starts a handshake for each while
// a slot is free; a connection that finds none is closed at once.
func (s *StreamLayer) acceptLoop() {
	var delay time.Duration
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if s.closed() {
				return
			}
			// Out of file descriptors, typically: wait, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.logger.Warn("raft accept failed", "error", err, "retry-in", delay)
			select {
			case <-time.After(delay):
				continue
			case <-s.done:
				return
			}
		}
		delay = 0
		select {
		case s.slots <- struct{}{}:
			go s.handshake(conn)
		default:
			_ = conn.Close()
			s.overCap.add(s.logger, "too many raft connections handshaking at once; closed new ones", "max-handshakes", cap(s.slots))
		}
	}
}

// sparseLog logs one kind of event at most once a second, with the number
// of events since the last line, so that a flood of connections is not also
// a flood of log lines.
type sparseLog struct {
	mu     sync.Mutex
	n      int
	logged time.Time
}

// add counts an event and logs msg with args if a second has passed since
// the last line.
func (l *sparseLog) add(logger hclog.Logger, msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if time.Since(l.logged) < time.Second {
		return
	}
	logger.Warn(msg, append(args, "count", l.n)...)
	l.n, l.logged = 0, time.Now()
}

// handshake runs the TLS handshake of conn within the handshake timeout,
// frees its slot, and hands the connection to Accept.
func (s *StreamLayer) handshake(conn net.Conn) {
	tc, err := s.runHandshake(conn)
	<-s.slots
	if err != nil {
		if s.closed() {
			_ = conn.Close()
			return
		}
		s.failed.add(s.logger, "raft TLS handshakes failed (the latest given)", "remote", conn.RemoteAddr().String(), "error", err)
		_ = conn.Close()
		return
	}
	var peer net.Conn = tc
	if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
		peer = &peerConn{Conn: tc, leaf: certs[0]}
	}
	select {
	case s.ready <- peer:
	case <-s.done:
		_ = peer.Close()
	}
}

// runHandshake handshakes conn under a deadline, cleared once it is done so
// that the Raft transport's own timeouts govern the connection. Close
// interrupts it.
func (s *StreamLayer) runHandshake(conn net.Conn) (*tls.Conn, error) {
	tc := tls.Server(conn, s.server)
	if err := conn.SetDeadline(time.Now().Add(s.handshakeTimeout)); err != nil {
		return nil, err
	}
	if err := tc.HandshakeContext(s.ctx); err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return tc, nil
}

func (s *StreamLayer) closed() bool {
	select {
	case <-s.done:
		return true
	default:
	}
	return false
}

// Dial implements raft.StreamLayer. With TLS, address must be one that
// boundTransport made: the server's certificate must name the server id it
// carries (peerid.go), and an address without one is refused.
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.muted.Load() {
		return nil, errMuted
	}
	conn, err := s.dial(address, timeout)
	if err != nil {
		return nil, err
	}
	return mutableConn{Conn: conn, layer: s}, nil
}

func (s *StreamLayer) dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 15 * time.Second}
	id, addr, bound := unbindAddr(address)
	if s.resolve != nil {
		addr = s.resolve(addr)
	}
	if s.client == nil {
		return d.Dial("tcp", addr)
	}
	var conn net.Conn
	var err error
	switch {
	case s.skipIDCheck:
		conn, err = tls.DialWithDialer(d, "tcp", addr, s.client)
	case !bound:
		return nil, fmt.Errorf("%w: no server id to check the certificate at %s against", ErrPeerIdentity, addr)
	default:
		conn, err = s.dialTLS(d, id, addr)
	}
	if err != nil {
		var rec tls.RecordHeaderError
		if errors.As(err, &rec) {
			return nil, fmt.Errorf("peer %s does not speak TLS: %w", addr, err)
		}
		return nil, err
	}
	return conn, nil
}
