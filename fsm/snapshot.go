package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fence"
)

// Snapshot layout: magic, version, then uvarint-framed fields, then a CRC-32
// (IEEE) of everything before it. Keys are written in name order so equal states
// give equal bytes.
const (
	snapMagic   = "FNCD"
	snapVersion = 1
)

// ErrBadSnapshot reports snapshot bytes that fail their checksum or framing.
// Restore leaves the FSM unchanged when it returns it.
var ErrBadSnapshot = errors.New("fsm: bad snapshot")

// image is a point-in-time copy of the state, detached from the FSM.
type image struct {
	applied uint64
	floor   uint64
	members map[string]string
	keys    []KeyState
}

// Snapshot implements raft.FSM. It copies the state; Persist encodes it off the
// apply goroutine.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return f.image(), nil
}

func (f *FSM) image() *image {
	f.mu.RLock()
	img := &image{applied: f.applied, floor: f.floor, members: make(map[string]string, len(f.members)), keys: make([]KeyState, 0, len(f.keys))}
	for id, a := range f.members {
		img.members[id] = a
	}
	for _, k := range f.keys {
		img.keys = append(img.keys, k)
	}
	f.mu.RUnlock()
	return img
}

// sort puts the keys in name order. It runs in Persist, off the apply
// goroutine, because sorting a million keys takes longer than an apply should.
func (img *image) sort() *image {
	sort.Slice(img.keys, func(i, j int) bool { return img.keys[i].Key < img.keys[j].Key })
	return img
}

// Persist implements raft.FSMSnapshot.
func (img *image) Persist(sink raft.SnapshotSink) error {
	if err := img.encode(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (img *image) Release() {}

// encode writes the image in the snapshot layout.
func (img *image) encode(w io.Writer) error {
	img.sort()
	crc := crc32.NewIEEE()
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	var b []byte
	b = append(b, snapMagic...)
	b = append(b, snapVersion)
	b = binary.AppendUvarint(b, img.applied)
	b = binary.AppendUvarint(b, img.floor)
	b = binary.AppendUvarint(b, uint64(len(img.members)))
	ids := make([]string, 0, len(img.members))
	for id := range img.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		b = appendString(b, id)
		b = appendString(b, img.members[id])
	}
	b = binary.AppendUvarint(b, uint64(len(img.keys)))
	for _, k := range img.keys {
		b = appendKey(b, k)
		if len(b) > 32<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	if _, err := bw.Write(b); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return binary.Write(w, binary.BigEndian, crc.Sum32())
}

func appendKey(b []byte, k KeyState) []byte {
	b = appendString(b, k.Key)
	b = appendString(b, k.Holder)
	b = binary.AppendUvarint(b, uint64(k.Token))
	b = binary.AppendUvarint(b, uint64(k.TTL))
	b = append(b, byte(k.State))
	b = appendString(b, k.RequestID)
	b = binary.AppendUvarint(b, k.Index)
	return binary.AppendUvarint(b, k.Armed)
}

// Restore implements raft.FSM: it replaces the whole state with the snapshot's.
// The snapshot is read and checked completely before anything changes.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	img, err := decodeImage(data)
	if err != nil {
		return err
	}
	keys := make(map[string]KeyState, len(img.keys))
	for _, k := range img.keys {
		keys[k.Key] = k
	}
	f.mu.Lock()
	f.keys = keys
	f.members = img.members
	f.floor = img.floor
	f.applied = img.applied
	f.wake()
	f.mu.Unlock()
	if f.obs != nil {
		f.obs.Restored()
	}
	return nil
}

// DecodeSnapshot checks and decodes snapshot bytes into a summary of the state
// they hold, without touching any FSM. Backup tooling uses it.
func DecodeSnapshot(data []byte) (applied, floor uint64, keys []KeyState, err error) {
	img, err := decodeImage(data)
	if err != nil {
		return 0, 0, nil, err
	}
	return img.applied, img.floor, img.keys, nil
}

func decodeImage(data []byte) (*image, error) {
	if len(data) < len(snapMagic)+1+4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadSnapshot, len(data))
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrBadSnapshot)
	}
	if string(body[:4]) != snapMagic || body[4] != snapVersion {
		return nil, fmt.Errorf("%w: unknown format", ErrBadSnapshot)
	}
	d := decoder{buf: body[5:]}
	img := &image{applied: d.uvarint(), floor: d.uvarint(), members: map[string]string{}}
	n := d.count(2)
	for i := uint64(0); i < n && d.err == nil; i++ {
		id := d.str()
		img.members[id] = d.str()
	}
	n = d.count(10)
	img.keys = make([]KeyState, 0, n)
	prev := ""
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.key()
		if d.err == nil && (i > 0 && k.Key <= prev || !validKeyState(k)) {
			d.fail("key record")
		}
		prev = k.Key
		img.keys = append(img.keys, k)
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	return img, nil
}

// count reads a record count and refuses one that the remaining bytes cannot
// hold, so a hostile count cannot make Restore allocate without bound.
func (d *decoder) count(minRecord uint64) uint64 {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.buf))/minRecord {
		d.fail("count")
		return 0
	}
	return n
}

func (d *decoder) key() KeyState {
	k := KeyState{Key: d.str(), Holder: d.str(), Token: fence.Token(d.uvarint()), TTL: time.Duration(d.int64())}
	if d.err == nil && len(d.buf) > 0 {
		k.State = State(d.buf[0])
		d.buf = d.buf[1:]
	} else {
		d.fail("state")
	}
	k.RequestID = d.str()
	k.Index = d.uvarint()
	k.Armed = d.uvarint()
	return k
}

func validKeyState(k KeyState) bool {
	return k.Key != "" && k.Holder != "" && k.TTL > 0 && k.Token.Seq() != 0 && k.Token <= fence.MaxToken &&
		(k.State == Held || k.State == Released || k.State == Expired)
}
