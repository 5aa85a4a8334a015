package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft-wal/types"
)

// Peer is one member of the initial cluster: a server ID and a Raft address.
type Peer struct {
	ID   string
	Addr string
}

// ParsePeers reads "id=host:port,id=host:port". IDs and addresses must be
// unique, because every node must bootstrap the identical configuration.
func ParsePeers(s string) ([]Peer, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var peers []Peer
	ids, addrs := map[string]bool{}, map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("peer %q: want id=host:port", part)
		}
		if ids[id] || addrs[addr] {
			return nil, fmt.Errorf("peer %q: duplicate id or address", part)
		}
		ids[id], addrs[addr] = true, true
		peers = append(peers, Peer{ID: id, Addr: addr})
	}
	return peers, nil
}

// Config configures a Node.
type Config struct {
	// ID is the node's Raft server ID, unique and stable for its data dir.
	ID string
	// DataDir holds the log and stable store (wal/ or raft.db) and snapshots/.
	DataDir string
	// RaftBind is the address the Raft transport listens on.
	RaftBind string
	// RaftAdvertise is the address peers dial; RaftBind when empty.
	RaftAdvertise string
	// SigningKeyFile is the node's Ed25519 signing key (PKCS #8 PEM); when
	// empty, signing.key in DataDir, made on first start.
	SigningKeyFile string
	// HTTPAdvertise is the address of this node's HTTP API, recorded in the
	// replicated state so followers can forward to the leader.
	HTTPAdvertise string
	// Peers bootstraps a fresh cluster; ignored when state exists.
	Peers []Peer
	// Bootstrap makes a fresh node a single-node cluster (dev mode).
	Bootstrap bool

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// VerifyConfirm is how a verify proves this node still leads:
	// VerifyByContact (the default when empty) or VerifyByRound
	// (verifyread.go says what each rests on).
	VerifyConfirm string
	// ApplyTimeout bounds how long a proposal waits to be queued.
	ApplyTimeout time.Duration
	// SnapshotThreshold is the number of log entries between snapshots.
	SnapshotThreshold uint64
	// SnapshotInterval is how often raft checks whether to snapshot.
	SnapshotInterval time.Duration
	// TrailingLogs is how many entries stay in the log after a snapshot.
	TrailingLogs uint64
	// MaxSeq lowers the per-epoch seq limit (tests); 0 is the full 32 bits.
	MaxSeq uint64
	// Store is the kind of Raft log store: StoreAuto (the default: the kind
	// the data dir holds, StoreWAL for a new one, StoreBolt for a new one
	// with NoSync), StoreBolt or StoreWAL. A data dir keeps the kind it was
	// created with.
	Store string
	// NoSync turns off fsync of the log. Never in production: an
	// acknowledged grant could be lost by a power failure.
	NoSync bool

	// RaftServerTLS and RaftClientTLS turn on TLS between peers.
	RaftServerTLS *tls.Config
	RaftClientTLS *tls.Config

	// Limits bound what one client may take (keys per holder, waiters per
	// key); the zero value is no limit.
	Limits Limits

	// KeyRetention is how long the leader keeps a key after its last grant
	// ended before it reclaims the key (reclaim.go); 0 never reclaims.
	KeyRetention time.Duration
	// LeaseRearmFull makes a new leader re-arm every live lease for a full
	// TTL from its takeover, as if no earlier takeover had happened, and
	// renew every lease without a Touch entry: the positive control of the
	// bound on a dead holder's lease under changing leaders (a lease whose
	// holder stopped renewing is kept for as long as leaders keep
	// changing). Never set it outside such a test.
	LeaseRearmFull bool
	// ReclaimIgnoresEpoch is fsm.Config.ReclaimIgnoresEpoch: a positive
	// control for the chaos suite, never for production.
	ReclaimIgnoresEpoch bool

	// WALSegmentSize is the size of the WAL's segment files; raft-wal's
	// 64 MiB when zero. Smaller only in tests, to rotate segments (and run
	// a small file system out of space) quickly.
	WALSegmentSize int
	// AckUnwrittenLog makes the log store report a failed append (no
	// space, a failed fsync) as a success: the positive control of the
	// chaos suite's disk nemesis. Never set it outside such a test.
	AckUnwrittenLog bool

	// WALFileSystem, when set, wraps the file system of the WAL's segment
	// files: chaos builds inject slow fsyncs with it. Never in production.
	WALFileSystem func(types.VFS) types.VFS
	// LogStallBound is how long a leader's own log write (its fsync) may
	// take before the leader stops leading (stall.go); DefaultLogStallBound
	// when zero, negative turns it off.
	LogStallBound time.Duration

	// DataDirMinFree and DataDirMinFreePercent are the data dir's
	// free-space floor: below the larger of the two (bytes, and percent of
	// its file system) the leader refuses new keys with ErrNoSpace and
	// hands leadership to a voter with space (diskspace.go). Both zero
	// refuse only after a log write failed for lack of space.
	DataDirMinFree        uint64
	DataDirMinFreePercent float64
	// DiskCheckInterval is how often the free space is measured; 1s when
	// zero.
	DiskCheckInterval time.Duration
	// PeerHasSpace asks a voter (by id and recorded HTTP address) whether
	// its data dir has space; a leader without space hands leadership to
	// one that says so. Nil never hands leadership on for lack of space.
	PeerHasSpace func(ctx context.Context, id, httpAddr string) bool

	Logger hclog.Logger

	// raftResolve, in tests, stands in for DNS: it maps a Raft address to
	// the address dialed.
	raftResolve func(addr string) string
	// raftSkipIDCheck turns off the checks of server ids against peer
	// certificates (peerid.go): the positive control of tests, never for
	// production.
	raftSkipIDCheck bool
	// storeVFS, in tests, wraps the file system of the WAL's segment files
	// (Config.WALFileSystem is the same for chaos builds)
	// to inject faults (failed or slow fsyncs, a full disk).
	storeVFS func(types.VFS) types.VFS
	// freeSpace measures the data dir's file system (statfs); tests replace
	// it to fill a disk without filling one.
	freeSpace freeSpaceFunc
	// noSpaceBackoff spaces out the leadership hand-offs of a leader without
	// space; noSpaceTransferBackoff when zero.
	noSpaceBackoff time.Duration
}

func (c *Config) setDefaults() {
	if c.LogStallBound == 0 {
		c.LogStallBound = DefaultLogStallBound
	}
	if c.DiskCheckInterval == 0 {
		c.DiskCheckInterval = defaultDiskCheckInterval
	}
	if c.freeSpace == nil {
		c.freeSpace = statFS
	}
	if c.noSpaceBackoff == 0 {
		c.noSpaceBackoff = noSpaceTransferBackoff
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = time.Second
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = time.Second
	}
	if c.LeaderLeaseTimeout == 0 {
		c.LeaderLeaseTimeout = c.HeartbeatTimeout / 2
	}
	if c.ApplyTimeout == 0 {
		c.ApplyTimeout = 5 * time.Second
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = 30 * time.Second
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 10240
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

func (c *Config) validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: node id is required", ErrBadRequest)
	case c.DataDir == "":
		return fmt.Errorf("%w: data dir is required", ErrBadRequest)
	case c.RaftBind == "":
		return fmt.Errorf("%w: raft address is required", ErrBadRequest)
	}
	if err := checkVerifyConfirm(c.VerifyConfirm); err != nil {
		return err
	}
	if len(c.Peers) > 0 {
		found := false
		for _, p := range c.Peers {
			found = found || p.ID == c.ID
		}
		if !found {
			return fmt.Errorf("%w: --peers does not name this node's id %q", ErrBadRequest, c.ID)
		}
	}
	return nil
}

// walFileSystem is the wrapper of the WAL's file system: the test's, else
// WALFileSystem, else none.
func (c *Config) walFileSystem() func(types.VFS) types.VFS {
	if c.storeVFS != nil {
		return c.storeVFS
	}
	return c.WALFileSystem
}
