package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
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

// Bounds of a backup's header. A field beyond them cannot come from a real
// cluster, and would make the floor arithmetic or raft's index overflow.
const (
	// maxBackupHeader bounds the JSON header.
	maxBackupHeader = 64 << 10
	// maxBackupIndex bounds the raft index a backup names: far above any
	// real log, far below the point where index arithmetic wraps.
	maxBackupIndex = 1 << 62
	// restoreHeadroom is the epoch space a restore must leave above the new
	// floor and the current term, for the elections that follow it.
	restoreHeadroom = 1024
)

// BackupStream is a consistent backup held for writing out. Its metadata,
// checksum and size are known before its bytes are written, so an answer
// can carry them in its headers; its bytes are written from the state
// machine's frozen key table (fsm.Frozen), not from a copy of the state, so
// a backup of a million keys costs its node tens of megabytes instead of
// several times its state, and holds the apply loop back only while the
// table is frozen.
type BackupStream struct {
	// Meta describes the backup; Meta.SHA256 is its checksum.
	Meta BackupMeta
	// Size is the number of bytes WriteTo writes.
	Size int64
	z    *fsm.Frozen
	hdr  []byte
	key  *BackupKey
	sum  [sha256.Size]byte
	once sync.Once
}

// OpenBackup takes a consistent backup of the state, linearizably (every
// grant acknowledged before the call is in it), and holds it for writing
// out; with a key, the backup is wrapped in an authenticated envelope, the
// bytes SignBackup makes of it. The caller must Close it: until then the
// key table copies each page before its first write to it.
func (n *Node) OpenBackup(ctx context.Context, key *BackupKey) (*BackupStream, error) {
	if err := n.linearizable(ctx); err != nil {
		return nil, err
	}
	z := n.fsm.Freeze()
	return openFrozen(z, n.cfg.ID, n.r().CurrentTerm(), time.Now().UTC(), key)
}

// openFrozen makes the backup of z, taken by node id in term at the time
// at; it releases z when it fails.
func openFrozen(z *fsm.Frozen, id string, term uint64, at time.Time, key *BackupKey) (*BackupStream, error) {
	head := z.Head()
	meta := BackupMeta{
		ClusterID: head.ClusterID, NodeID: id, Term: term, Index: head.Applied, Keys: z.Len(),
		Floor: head.Floor, MaxEpoch: z.MaxEpoch(), Epoch: term + head.Floor, CreatedAt: at,
	}
	hdr, err := json.Marshal(meta)
	if err != nil {
		z.Release()
		return nil, err
	}
	b := &BackupStream{Meta: meta, z: z, hdr: hdr, key: key}
	// A first pass, into nothing, gives the size and checksum the headers
	// need: the frozen table writes the same bytes every time.
	if b.sum, b.Size, err = b.write(io.Discard); err != nil {
		b.Close()
		return nil, err
	}
	b.Meta.SHA256 = hex.EncodeToString(b.sum[:])
	return b, nil
}

// WriteTo writes the backup: Size bytes, whose checksum is Meta.SHA256.
func (b *BackupStream) WriteTo(w io.Writer) (int64, error) {
	sum, n, err := b.write(w)
	if err == nil && (sum != b.sum || n != b.Size) {
		// A frozen table cannot change; if its bytes did, none of them may
		// pass for the backup the headers described.
		err = fmt.Errorf("%w: %d bytes written where %d were measured, or another checksum", ErrBadBackup, n, b.Size)
	}
	return n, err
}

// Close releases the frozen state. It may be called more than once.
func (b *BackupStream) Close() { b.once.Do(b.z.Release) }

// write writes the backup to w: the envelope when there is a key, the
// magic, the header's length and the header, the state, and the checksum of
// all of them. It returns that checksum and the bytes written.
func (b *BackupStream) write(w io.Writer) (sum [sha256.Size]byte, n int64, err error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	cw := &countWriter{w: bw}
	var out io.Writer = cw
	var mac hash.Hash
	if b.key != nil {
		mac = hmac.New(sha256.New, b.key.secret)
		out = io.MultiWriter(cw, mac)
		io.WriteString(out, backupAuthMagic)
	}
	plain := sha256.New()
	pw := io.MultiWriter(out, plain)
	io.WriteString(pw, backupMagic)
	pw.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b.hdr))))
	pw.Write(b.hdr)
	if err := b.z.Encode(pw); err != nil {
		return sum, cw.n, err
	}
	plain.Sum(sum[:0])
	out.Write(sum[:])
	if b.key != nil {
		out.Write(b.key.id[:])
		cw.Write(mac.Sum(nil))
	}
	if cw.err == nil {
		cw.err = bw.Flush()
	}
	return sum, cw.n, cw.err
}

// countWriter counts the bytes written through it and keeps the first
// error, after which it writes nothing.
type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

// DecodeBackup checks a backup's checksum and decodes it. An authenticated
// backup is decoded too, without checking its HMAC (see CheckBackupAuth).
func DecodeBackup(data []byte) (BackupMeta, *fsm.Image, error) {
	var meta BackupMeta
	data, _, _, _, err := unwrap(data)
	if err != nil {
		return meta, nil, err
	}
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
	if hlen > maxBackupHeader || uint64(hlen) > uint64(len(rest)) {
		return meta, nil, fmt.Errorf("%w: header length %d in %d bytes", ErrBadBackup, hlen, len(rest))
	}
	if err := decodeHeader(rest[:hlen], &meta); err != nil {
		return meta, nil, fmt.Errorf("%w: header: %v", ErrBadBackup, err)
	}
	img, err := fsm.DecodeImage(rest[hlen:])
	if err != nil {
		return meta, nil, fmt.Errorf("%w: %v", ErrBadBackup, err)
	}
	if err := checkHeader(meta, img); err != nil {
		return meta, nil, fmt.Errorf("%w: header: %v", ErrBadBackup, err)
	}
	sum := sha256.Sum256(body)
	meta.SHA256 = hex.EncodeToString(sum[:])
	return meta, img, nil
}

// decodeHeader decodes the JSON header strictly: one object, known fields.
func decodeHeader(b []byte, meta *BackupMeta) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(meta); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data")
	}
	return nil
}

// checkHeader checks every header field against the bounds of an epoch and
// of an index, and against the image it describes: Backup writes them from
// that image, so a header that disagrees was not written by Backup.
func checkHeader(meta BackupMeta, img *fsm.Image) error {
	for _, f := range []struct {
		name string
		v    uint64
	}{{"term", meta.Term}, {"epoch_floor", meta.Floor}, {"max_epoch", meta.MaxEpoch}, {"epoch", meta.Epoch}, {"image epoch floor", img.Floor}} {
		if f.v > fence.MaxEpoch {
			return fmt.Errorf("%s %d is above the highest epoch %d", f.name, f.v, uint64(fence.MaxEpoch))
		}
	}
	switch {
	case meta.Index > maxBackupIndex:
		return fmt.Errorf("index %d is out of range", meta.Index)
	case meta.Index != img.Applied:
		return fmt.Errorf("index %d, the state's is %d", meta.Index, img.Applied)
	case meta.Keys < 0 || meta.Keys != len(img.Keys):
		return fmt.Errorf("keys %d, the state holds %d", meta.Keys, len(img.Keys))
	case meta.Floor != img.Floor:
		return fmt.Errorf("epoch_floor %d, the state's is %d", meta.Floor, img.Floor)
	case meta.MaxEpoch != img.MaxEpoch():
		return fmt.Errorf("max_epoch %d, the state's is %d", meta.MaxEpoch, img.MaxEpoch())
	case meta.Epoch != meta.Term+meta.Floor:
		return fmt.Errorf("epoch %d is not term %d plus epoch_floor %d", meta.Epoch, meta.Term, meta.Floor)
	case meta.ClusterID != img.ClusterID:
		return fmt.Errorf("cluster_id %q, the state's is %q", meta.ClusterID, img.ClusterID)
	}
	return nil
}

// addEpochs adds epochs, refusing a sum above fence.MaxEpoch (and so any
// uint64 overflow: every operand is checked first).
func addEpochs(vs ...uint64) (uint64, bool) {
	var sum uint64
	for _, v := range vs {
		if v > fence.MaxEpoch || sum > fence.MaxEpoch-v {
			return 0, false
		}
		sum += v
	}
	return sum, true
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
	res, err := n.restorePlan(meta, img, r.CurrentTerm(), r.LastIndex(), o)
	if err != nil {
		return res, err
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

// restorePlan edits the image for this cluster and picks the new floor. All
// epoch arithmetic is checked: a sum beyond fence.MaxEpoch refuses the
// restore before anything changes, never wraps to a lower floor.
func (n *Node) restorePlan(meta BackupMeta, img *fsm.Image, term, lastIndex uint64, o RestoreOptions) (RestoreResult, error) {
	res := RestoreResult{Meta: meta, OldFloor: n.fsm.Floor(), SameCluster: meta.ClusterID != "" && meta.ClusterID == n.fsm.ClusterID()}
	if o.AboveEpoch > fence.MaxEpoch || o.Margin > fence.MaxEpoch {
		return res, fmt.Errorf("%w: above_epoch and margin must be at most %d", ErrBadRequest, uint64(fence.MaxEpoch))
	}
	attested := max(meta.Epoch, meta.MaxEpoch, img.MaxEpoch(), o.AboveEpoch)
	if !res.SameCluster && o.AboveEpoch == 0 {
		margin := o.Margin
		if margin == 0 {
			margin = DefaultRestoreMargin
		}
		var ok bool
		if attested, ok = addEpochs(attested, margin); !ok {
			return res, fmt.Errorf("%w: the backup's epoch %d plus the margin %d leaves no epoch space", ErrBadRequest, attested, margin)
		}
	}
	// Everything this cluster itself issued so far had an epoch of at most
	// its current term plus its current floor.
	issued, ok := addEpochs(term, res.OldFloor)
	if !ok {
		return res, fmt.Errorf("%w: this cluster's epoch space is exhausted", ErrBadRequest)
	}
	attested = max(attested, issued)
	res.Attested = attested
	// A grant's epoch is its entry's term (at least 1) plus the floor.
	res.NewFloor = max(attested, res.OldFloor)
	if _, ok := addEpochs(res.NewFloor, term, restoreHeadroom); !ok {
		return res, fmt.Errorf("%w: epoch floor %d leaves no epoch space", ErrBadRequest, res.NewFloor)
	}
	img.Floor = res.NewFloor
	// The image becomes a state of this cluster's log: its applied index is
	// this log's, not the one the backup had where it was taken, so raft
	// keeps its own index and the FSM never reports an index raft has not
	// reached. It is one past the last entry: raft installs the snapshot
	// after that entry, and a watcher that saw the state at the last entry
	// and resumes from there is refused (it would miss the restore). The
	// feed moves the label up again past any entry raft appended meanwhile
	// (fsm.Feed.anchor).
	img.Applied = lastIndex + 1
	img.ClusterID = n.fsm.ClusterID()
	img.Members = n.fsm.Members()
	res.Expired += img.EndPermits()
	// The signing keys are this cluster's members', as the members are: a
	// backup never brings back keys another cluster (or an older state of
	// this one) published.
	img.SigningKeys = n.fsm.SigningKeys()
	for i, k := range img.Keys {
		if k.State == fsm.Held {
			img.Keys[i].State = fsm.Expired
			res.Expired++
		}
	}
	return res, nil
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
