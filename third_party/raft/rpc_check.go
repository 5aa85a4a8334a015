package raft

import (
	"errors"
	"fmt"
	"net"
)

// errRPCRefused wraps the error of NetworkTransportConfig.CheckRPC: the
// connection is closed without the "failed to decode" log line, the check
// having said why.
var errRPCRefused = errors.New("RPC refused")

// checkIncoming runs the configured check of an incoming RPC, command being
// the decoded request.
func (n *NetworkTransport) checkIncoming(conn net.Conn, command interface{}) error {
	if n.checkRPC == nil {
		return nil
	}
	wh, ok := command.(WithRPCHeader)
	if !ok {
		return fmt.Errorf("%w: %T has no header", errRPCRefused, command)
	}
	if err := n.checkRPC(conn, wh.GetRPCHeader()); err != nil {
		return fmt.Errorf("%w: %w", errRPCRefused, err)
	}
	return nil
}
