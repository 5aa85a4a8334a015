package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// Backup file layout: magic, a big-endian uint32 header length, the JSON
// header (BackupMeta), the FSM snapshot bytes (with their own CRC), and a
// SHA-256 of everything before it.
const backupMagic = "FENCEDB1"

// DefaultRestoreMargin is added to the epoch a backup attests when it is
// restored into another cluster and the operator attests nothing higher: the
// old cluster may have gone on electing leaders after the backup was taken,
// and each election raised its epoch by one. A million elections after a
// backup is far beyond any real cluster, and 2^31 epochs leave room for two
// thousand such restores.
const DefaultRestoreMargin = 1 << 20

// ErrBadBackup: a backup that fails its checksum or cannot be decoded.
var ErrBadBackup = errors.New("bad backup")

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

// Backup takes a consistent copy of the state, linearizably: every grant
// acknowledged before the call is in it.
func (n *Node) Backup(ctx context.Context) ([]byte, BackupMeta, error) {
	if err := n.linearizable(ctx); err != nil {
		return nil, BackupMeta{}, err
	}
	img := n.fsm.Image()
	term := n.r().CurrentTerm()
	meta := BackupMeta{
		ClusterID: img.ClusterID, NodeID: n.cfg.ID, Term: term, Index: img.Applied, Keys: len(img.Keys),
		Floor: img.Floor, MaxEpoch: img.MaxEpoch(), Epoch: term + img.Floor, CreatedAt: time.Now().UTC(),
	}
	var snap bytes.Buffer
	if err := img.Encode(&snap); err != nil {
		return nil, meta, err
	}
	data, err := encodeBackup(meta, snap.Bytes())
	if err != nil {
		return nil, meta, err
	}
	sum := sha256.Sum256(data[:len(data)-sha256.Size])
	meta.SHA256 = hex.EncodeToString(sum[:])
	return data, meta, nil
}

func encodeBackup(meta BackupMeta, snap []byte) ([]byte, error) {
	hdr, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(backupMagic)
	_ = binary.Write(&b, binary.BigEndian, uint32(len(hdr)))
	b.Write(hdr)
	b.Write(snap)
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:])
	return b.Bytes(), nil
}

// DecodeBackup checks a backup's checksum and decodes it.
func DecodeBackup(data []byte) (BackupMeta, *fsm.Image, error) {
	var meta BackupMeta
	if len(data) < len(backupMagic)+4+sha256.Size || string(data[:len(backupMagic)]) != backupMagic {
		return meta, nil, fmt.Errorf("%w: not a fenced backup", ErrBadBackup)
	}
	body := data[:len(data)-sha256.Size]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], data[len(body):]) {
		return meta, nil, fmt.Errorf("%w: checksum mismatch", ErrBadBackup)
	}
	rest := body[len(backupMagic):]
	hlen := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(hlen) > uint64(len(rest)) {
		return meta, nil, fmt.Errorf("%w: header length", ErrBadBackup)
	}
	if err := json.Unmarshal(rest[:hlen], &meta); err != nil {
		return meta, nil, fmt.Errorf("%w: header: %v", ErrBadBackup, err)
	}
	img, err := fsm.DecodeImage(rest[hlen:])
	if err != nil {
		return meta, nil, fmt.Errorf("%w: %v", ErrBadBackup, err)
	}
	sum := sha256.Sum256(body)
	meta.SHA256 = hex.EncodeToString(sum[:])
	return meta, img, nil
}

// RestoreOptions tune a restore.
type RestoreOptions struct {
	// AboveEpoch is the highest epoch the operator attests the old cluster
	// may have issued (for example from its last status, or the highest
	// token any resource accepted). Every new token's epoch will exceed it.
	AboveEpoch uint64
	// Margin is added to the backup's epoch when restoring into another
	// cluster without AboveEpoch; DefaultRestoreMargin when zero.
	Margin uint64
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

// Restore replaces the cluster's state with a backup's. Every new token is
// higher than every token either cluster issued: the epoch floor is raised,
// in the same step that installs the state, above the highest epoch anyone
// can attest. Grants live in the backup are restored as expired, because the
// old cluster may have superseded them after the backup was taken.
func (n *Node) Restore(ctx context.Context, data []byte, o RestoreOptions) (RestoreResult, error) {
	meta, img, err := DecodeBackup(data)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if err := n.linearizable(ctx); err != nil {
		return RestoreResult{}, err
	}
	r := n.r()
	res := n.restorePlan(meta, img, r.CurrentTerm(), o)
	if res.NewFloor+r.CurrentTerm()+1024 > fence.MaxEpoch {
		return res, fmt.Errorf("%w: epoch floor %d leaves no epoch space", ErrBadRequest, res.NewFloor)
	}
	var snap bytes.Buffer
	if err := img.Encode(&snap); err != nil {
		return res, err
	}
	gen := n.ready.Swap(0) // nothing is served until the restored state is in place
	n.log.Warn("restoring from backup", "backup_cluster", meta.ClusterID, "backup_index", meta.Index,
		"keys", meta.Keys, "old_floor", res.OldFloor, "new_floor", res.NewFloor, "expired", res.Expired)
	rmeta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: max(img.Applied, 1), Term: max(meta.Term, 1), Size: int64(snap.Len())}
	if err := r.Restore(rmeta, &snap, 0); err != nil {
		n.reEstablish(gen)
		return res, translate(err)
	}
	n.reEstablish(gen)
	return res, nil
}

// restorePlan edits the image for this cluster and picks the new floor.
func (n *Node) restorePlan(meta BackupMeta, img *fsm.Image, term uint64, o RestoreOptions) RestoreResult {
	res := RestoreResult{Meta: meta, OldFloor: n.fsm.Floor(), SameCluster: meta.ClusterID != "" && meta.ClusterID == n.fsm.ClusterID()}
	attested := max(meta.Epoch, meta.MaxEpoch, img.MaxEpoch(), o.AboveEpoch)
	if !res.SameCluster && o.AboveEpoch == 0 {
		margin := o.Margin
		if margin == 0 {
			margin = DefaultRestoreMargin
		}
		attested += margin
	}
	// Everything this cluster itself issued so far had an epoch of at most
	// its current term plus its current floor.
	attested = max(attested, term+res.OldFloor)
	res.Attested = attested
	// A grant's epoch is its entry's term (at least 1) plus the floor.
	res.NewFloor = max(attested, res.OldFloor)
	img.Floor = res.NewFloor
	img.ClusterID = n.fsm.ClusterID()
	img.Members = n.fsm.Members()
	for i, k := range img.Keys {
		if k.State == fsm.Held {
			img.Keys[i].State = fsm.Expired
			res.Expired++
		}
	}
	return res
}

// reEstablish makes the leader ready again after a restore, through the same
// barrier and lease re-arming as after an election.
func (n *Node) reEstablish(gen uint64) {
	if gen == 0 || n.gen.Load() != gen {
		return
	}
	n.wg.Add(1)
	// The same leader throughout: no newer one can have answered anything,
	// so there is no takeover to wait for.
	n.establish(n.r(), gen, time.Time{})
}

// newClusterID returns a random cluster ID.
func newClusterID() string {
	var b [8]byte
	_, _ = io.ReadFull(rand.Reader, b[:])
	return hex.EncodeToString(b[:])
}
