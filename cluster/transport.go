package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// StreamLayer is the Raft transport's connection layer: plain TCP, or TLS when
// configured, so that mutual TLS between peers needs no change elsewhere.
type StreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	client    *tls.Config
}

var _ raft.StreamLayer = (*StreamLayer)(nil)

// NewStreamLayer listens on bind and advertises advertise (bind when empty).
// With a non-nil server TLS config, accepted connections are TLS; with a
// non-nil client config, dialed ones are.
func NewStreamLayer(bind, advertise string, server, client *tls.Config) (*StreamLayer, error) {
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
	if server != nil {
		ln = tls.NewListener(ln, server)
	}
	return &StreamLayer{ln: ln, advertise: adv, client: client}, nil
}

// Accept implements net.Listener.
func (s *StreamLayer) Accept() (net.Conn, error) { return s.ln.Accept() }

// Close implements net.Listener.
func (s *StreamLayer) Close() error { return s.ln.Close() }

// Addr returns the advertised address, which peers dial.
func (s *StreamLayer) Addr() net.Addr { return s.advertise }

// Dial implements raft.StreamLayer.
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 15 * time.Second}
	if s.client == nil {
		return d.Dial("tcp", string(address))
	}
	conn, err := tls.DialWithDialer(d, "tcp", string(address), s.client)
	if err != nil {
		var rec tls.RecordHeaderError
		if errors.As(err, &rec) {
			return nil, fmt.Errorf("peer %s does not speak TLS: %w", address, err)
		}
		return nil, err
	}
	return conn, nil
}
