package client

import "time"

// Member is one server of the Raft configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr,omitempty"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
}

// Status is this node's view of the cluster.
type Status struct {
	ID           string   `json:"id"`
	ClusterID    string   `json:"cluster_id,omitempty"`
	State        string   `json:"state"`
	Ready        bool     `json:"ready"`
	LeaderID     string   `json:"leader_id,omitempty"`
	LeaderHTTP   string   `json:"leader_http,omitempty"`
	Term         uint64   `json:"term"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	LastIndex    uint64   `json:"last_index"`
	EpochFloor   uint64   `json:"epoch_floor"`
	Keys         int      `json:"keys"`
	Waiters      int      `json:"waiters"`
	Members      []Member `json:"members"`
	// QuorumContactMS, on a leader, is how long ago it sent the latest
	// heartbeat a quorum accepted; renewals and verifies rest on it while
	// it is under 250 ms. Absent elsewhere.
	QuorumContactMS *float64 `json:"quorum_contact_ms,omitempty"`
	// FailoverMS is how long, at most, the cluster may serve no renewal
	// after its leader dies, by its timeouts: followers notice within two
	// heartbeat timeouts, elect within an election timeout, and the new
	// leader waits out its takeover. A lease renewed every third of its TTL
	// less its margin (as Lease and fencectl renew) survives a failover only
	// if two thirds of that exceed it: TTL - margin > 1.5 × failover.
	FailoverMS int64 `json:"failover_ms,omitempty"`
	// Auth says whether this node authenticates requests ("on") or not
	// ("off"). Nodes that differ judge the same request differently, and a
	// forward from a node with it off is refused by one with it on.
	Auth string `json:"auth,omitempty"`
	// Credentials describes the credentials (certificates, tokens) this
	// node uses; absent when it has none.
	Credentials *CredentialStatus `json:"credentials,omitempty"`
	// DataDir is this node's data dir use as its free-space watch last saw
	// it; absent before the first check.
	DataDir *DataDirStatus `json:"data_dir,omitempty"`
}

// DataDirStatus is a node's data dir use. Below its free-space floor (the
// larger of --data-dir-min-free and --data-dir-min-free-percent of the file
// system), or after a log write failed for lack of space, the node says
// NoSpace: as leader it refuses new keys with no_space (507) while renewals,
// releases, verifies and keepalives go on, and it hands leadership to a voter
// that has space. Freeing space is all it takes to end it.
type DataDirStatus struct {
	// Path is the data dir.
	Path string `json:"path"`
	// UsedBytes is the size of the files in the data dir (WAL segments
	// count at their preallocated size).
	UsedBytes uint64 `json:"used_bytes"`
	// FreeBytes and TotalBytes are those of the file system holding the
	// data dir (free: available to the node); 0 when unknown.
	FreeBytes  uint64 `json:"free_bytes"`
	TotalBytes uint64 `json:"total_bytes"`
	// FloorBytes is the free space below which the node refuses new keys.
	FloorBytes uint64 `json:"floor_bytes"`
	// NoSpace is set while the node refuses new keys for lack of space;
	// Reason says why.
	NoSpace bool   `json:"no_space,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// CredentialStatus is what a node reports, in its Status, about the
// credentials it authenticates requests with: which bearer tokens are in
// use, since when, and whether the latest reload (SIGHUP) failed. A node
// whose reload failed keeps the material it had, so a revoked token keeps
// working there: operators compare these across nodes.
type CredentialStatus struct {
	// TokensDigest names the bearer tokens in use: the first 16 hex
	// digits of the SHA-256 of the tokens file they were read from. Nodes
	// given the same file report the same digest. Empty without tokens.
	TokensDigest string `json:"tokens_digest,omitempty"`
	// ACLDigest names the key ACL file in use the same way; empty without
	// one. Nodes whose digests differ judge the same request differently.
	ACLDigest string `json:"acl_digest,omitempty"`
	// LoadedAt is when the material in use was last loaded successfully,
	// all of it (at start, or by a reload that succeeded).
	LoadedAt time.Time `json:"loaded_at"`
	// ReloadedAt is when the latest reload was tried; zero before the
	// first.
	ReloadedAt time.Time `json:"reloaded_at,omitzero"`
	// ReloadError says why the latest reload failed, for each material
	// that failed; empty when it succeeded.
	ReloadError string `json:"reload_error,omitempty"`
}

// BackupMeta describes a backup.
type BackupMeta struct {
	ClusterID string    `json:"cluster_id"`
	NodeID    string    `json:"node_id"`
	Term      uint64    `json:"term"`
	Index     uint64    `json:"index"`
	Keys      int       `json:"keys"`
	Floor     uint64    `json:"epoch_floor"`
	MaxEpoch  uint64    `json:"max_epoch"`
	Epoch     uint64    `json:"epoch"` // term + floor at backup time: the epoch of any grant made then
	CreatedAt time.Time `json:"created_at"`
	SHA256    string    `json:"sha256,omitempty"`
}

// RestoreResult says what a restore did.
type RestoreResult struct {
	Meta        BackupMeta `json:"backup"`
	SameCluster bool       `json:"same_cluster"`
	OldFloor    uint64     `json:"old_epoch_floor"`
	NewFloor    uint64     `json:"new_epoch_floor"`
	// Attested is the epoch every new token's epoch now exceeds.
	Attested uint64 `json:"attested_epoch"`
	Expired  int    `json:"grants_expired"`
}
