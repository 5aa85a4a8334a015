package cluster

import "github.com/fenced/fenced/client"

// The node's reports are the wire types of the HTTP API, defined once in the
// client module so the server and its clients cannot drift apart.
type (
	// Status is this node's view of the cluster (GET /v1/cluster).
	Status = client.Status
	// Member is one server of the Raft configuration.
	Member = client.Member
	// CredentialStatus is what a node reports, in its Status, about the
	// credentials it authenticates requests with.
	CredentialStatus = client.CredentialStatus
	// DataDirStatus is a node's data dir use and free space (diskspace.go).
	DataDirStatus = client.DataDirStatus
	// BackupMeta describes a backup; it is also the header of a backup file.
	BackupMeta = client.BackupMeta
	// RestoreResult says what a restore did.
	RestoreResult = client.RestoreResult
)
