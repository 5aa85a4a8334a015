package cluster

// Raft connections bound to server ids.
//
// hashicorp/raft dials a server by its address, and the peer certificate
// tells nodes apart from other holders of the CA only by its OU. Whoever
// controls a member's name or address (DNS, with --peers-from-dns or names in
// --peers) could then answer for it with another member's certificate, and
// that member would count twice in the votes and commits of the cluster. So,
// with peer TLS:
//
//   - each dial carries the server id raft means to reach, and the answering
//     certificate must name it (as its CN or a subject alternative name, the
//     rule a follower applies to the leader it forwards to); the id travels
//     inside the address given to the transport (boundAddr), which keys its
//     connection pool by address, so a connection proven for one id never
//     carries an RPC meant for another, even at the same address;
//   - every RPC received must come from the server its connection's
//     certificate names (its header's ID), or the connection is dropped
//     before raft sees the RPC (NetworkTransportConfig.CheckRPC, a patch of
//     third_party/raft).

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/metrics"
	"github.com/fenced/fenced/tlsutil"
)

// ErrPeerIdentity is the error, under errors.Is, of a Raft connection whose
// peer certificate does not name the server at the other end: the server
// dialed, or the sender of an RPC.
var ErrPeerIdentity = errors.New("the peer's certificate does not name the server")

// peerIDError says which server was meant and what the certificate names.
type peerIDError struct {
	serverID string
	cert     *x509.Certificate
	dialed   bool // the server dialed, not an RPC's sender
}

func (e *peerIDError) Error() string {
	role := "the sender of its RPC"
	if e.dialed {
		role = "the server dialed"
	}
	return fmt.Sprintf("%v: %s is %q, the certificate is %q (names %s)", ErrPeerIdentity, role, e.serverID,
		e.cert.Subject.CommonName, strings.Join(certNameList(e.cert), ", "))
}

func (e *peerIDError) Unwrap() error { return ErrPeerIdentity }

// certNameList lists the names a certificate gives, for log lines and errors.
func certNameList(c *x509.Certificate) []string {
	names := append([]string{c.Subject.CommonName}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	seen := map[string]bool{}
	return slices.DeleteFunc(names, func(n string) bool {
		dup := seen[n]
		seen[n] = true
		return dup
	})
}

// checkNames returns a *peerIDError unless cert names id.
func checkNames(cert *x509.Certificate, id string, dialed bool) error {
	if tlsutil.CertNames(cert, id) {
		return nil
	}
	return &peerIDError{serverID: id, cert: cert, dialed: dialed}
}

// boundAddrMark starts every bound address: no host name or IP starts with a
// NUL byte.
const boundAddrMark = "\x00"

// boundAddr is addr with the server id raft dials it for: NUL, the length of
// id in decimal, NUL, id, addr. The length makes it unambiguous whatever
// bytes id and addr hold.
func boundAddr(id raft.ServerID, addr raft.ServerAddress) raft.ServerAddress {
	return raft.ServerAddress(boundAddrMark + strconv.Itoa(len(id)) + boundAddrMark + string(id) + string(addr))
}

// unbindAddr splits what boundAddr made; ok is false for any other address
// (which is returned whole).
func unbindAddr(a raft.ServerAddress) (id, addr string, ok bool) {
	s, found := strings.CutPrefix(string(a), boundAddrMark)
	if !found {
		return "", string(a), false
	}
	n, rest, found := strings.Cut(s, boundAddrMark)
	l, err := strconv.Atoi(n)
	if !found || err != nil || l < 0 || l > len(rest) || strconv.Itoa(l) != n {
		return "", string(a), false
	}
	return rest[:l], rest[l:], true
}

// boundTransport is the network transport with every dial bound to the id of
// the server raft means: it hands the transport bound addresses, which the
// stream layer's Dial checks the answering certificate against. Everything
// else is the network transport's.
type boundTransport struct {
	*raft.NetworkTransport
}

var (
	_ raft.Transport   = boundTransport{}
	_ raft.WithClose   = boundTransport{}
	_ raft.WithPreVote = boundTransport{}
)

// AppendEntriesPipeline implements raft.Transport.
func (t boundTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	return t.NetworkTransport.AppendEntriesPipeline(id, boundAddr(id, target))
}

// AppendEntries implements raft.Transport.
func (t boundTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.NetworkTransport.AppendEntries(id, boundAddr(id, target), args, resp)
}

// RequestVote implements raft.Transport.
func (t boundTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.NetworkTransport.RequestVote(id, boundAddr(id, target), args, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (t boundTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.NetworkTransport.RequestPreVote(id, boundAddr(id, target), args, resp)
}

// InstallSnapshot implements raft.Transport.
func (t boundTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.NetworkTransport.InstallSnapshot(id, boundAddr(id, target), args, resp, data)
}

// TimeoutNow implements raft.Transport.
func (t boundTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.NetworkTransport.TimeoutNow(id, boundAddr(id, target), args, resp)
}

// peerConn is an accepted TLS connection with the leaf of the certificate
// its handshake verified.
type peerConn struct {
	*tls.Conn
	leaf *x509.Certificate
}

// dialTLS dials addr for server id: the handshake fails unless the answering
// certificate passes the client configuration's own verification (chain,
// usage, peer OU) and names id.
func (s *StreamLayer) dialTLS(d *net.Dialer, id, addr string) (net.Conn, error) {
	cfg := s.client.Clone()
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if verify != nil {
			if err := verify(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: the server at %s presented no certificate", ErrPeerIdentity, addr)
		}
		return checkNames(cs.PeerCertificates[0], id, true)
	}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	var wrong *peerIDError
	if errors.As(err, &wrong) {
		metrics.RaftPeerRefusals.WithLabelValues("dial").Inc()
		s.wrongPeer.add(s.logger, "refused a raft connection: the server that answered is not the one dialed",
			"server-id", id, "address", addr, "certificate", wrong.cert.Subject.CommonName,
			"certificate-names", certNameList(wrong.cert))
	}
	return conn, err
}

// CheckRPC refuses an RPC whose sender (its header's ID) is not named by the
// certificate of the connection it arrived on: the raft transport then drops
// the connection without processing the RPC. Without TLS on the listener,
// nothing can be checked and every RPC passes.
func (s *StreamLayer) CheckRPC(conn net.Conn, header raft.RPCHeader) error {
	if s.server == nil || s.skipIDCheck {
		return nil
	}
	pc, ok := conn.(*peerConn)
	if !ok {
		// Accept hands out only connections whose handshake verified a
		// certificate; anything else cannot prove a sender.
		err := fmt.Errorf("%w: the connection from %s has no verified certificate", ErrPeerIdentity, conn.RemoteAddr())
		metrics.RaftPeerRefusals.WithLabelValues("rpc").Inc()
		s.logger.Warn("dropped a raft connection", "sender", string(header.ID), "error", err)
		return err
	}
	if pc.leaf.Subject.CommonName == string(header.ID) {
		return nil
	}
	err := checkNames(pc.leaf, string(header.ID), false)
	if err != nil {
		metrics.RaftPeerRefusals.WithLabelValues("rpc").Inc()
		s.wrongSender.add(s.logger, "dropped a raft connection: its RPC's sender is not the server its certificate names",
			"sender", string(header.ID), "remote", conn.RemoteAddr().String(), "certificate", pc.leaf.Subject.CommonName,
			"certificate-names", certNameList(pc.leaf))
	}
	return err
}
