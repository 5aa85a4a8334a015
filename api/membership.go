package api

import "fmt"

// memberNode is a node that knows whether it is a member of its cluster
// (cluster.Node is one).
type memberNode interface {
	// MemberErr returns cluster.ErrNotMember, saying why, when the node is
	// not in its cluster's configuration.
	MemberErr() error
}

// memberErr returns why this node is not a member of the cluster, or nil.
func (s *Server) memberErr() error {
	if m, ok := s.node.(memberNode); ok {
		return m.MemberErr()
	}
	return nil
}

// noLeader is the answer of a node that cannot serve a request itself and
// knows no leader to forward it to: not_member when it is not in the
// cluster, so clients go to another node at once, unavailable otherwise.
func (s *Server) noLeader() error {
	if err := s.memberErr(); err != nil {
		return err
	}
	return fmt.Errorf("%w: no known leader", ErrUnavailable)
}
