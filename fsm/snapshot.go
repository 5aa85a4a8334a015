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
// give equal bytes. Version 2 appends the log clock and the retired request
// ids; version 1 (without them) is still read.
const (
	snapMagic    = "FNCD"
	snapVersion1 = 1
	snapVersion2 = 2
	// snapVersion3 appends the holders' values (key, value, in key order,
	// keys with a value only). A state without values is still written as
	// version 2, which a node that knows only version 2 can install.
	snapVersion3  = 3
	minKeyRecord  = 11
	minRetiredRec = 4
)

// ErrBadSnapshot reports snapshot bytes that fail their checksum or framing.
// Restore leaves the FSM unchanged when it returns it.
var ErrBadSnapshot = errors.New("fsm: bad snapshot")

// Image is a point-in-time copy of the whole state, detached from the FSM:
// what a snapshot holds, and what a backup carries.
type Image struct {
	// Applied is the index of the last entry applied to this state.
	Applied uint64
	// Floor is the epoch floor.
	Floor uint64
	// ClusterID names the cluster that made the state.
	ClusterID string
	// Members maps server IDs to HTTP addresses.
	Members map[string]string
	// Keys holds every key, in name order once encoded.
	Keys []KeyState
	// Clock is the log clock: the highest append time (ms since the Unix
	// epoch) of any applied entry.
	Clock uint64
	// Retired holds the request ids remembered beyond their key's last
	// grant, oldest first.
	Retired []Retired
}

// MaxEpoch returns the highest epoch of any key's last grant.
func (img *Image) MaxEpoch() uint64 {
	var m uint64
	for _, k := range img.Keys {
		m = max(m, k.Token.Epoch())
	}
	return m
}

// Snapshot implements raft.FSM. It copies the state; Persist encodes it off the
// apply goroutine.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return f.Image(), nil
}

// Image copies the state.
func (f *FSM) Image() *Image {
	f.mu.RLock()
	img := &Image{Applied: f.applied, Floor: f.floor, ClusterID: f.clusterID, Members: make(map[string]string, len(f.members)), Keys: make([]KeyState, 0, len(f.keys)),
		Clock: f.hist.clock, Retired: f.hist.list()}
	for id, a := range f.members {
		img.Members[id] = a
	}
	for name, e := range f.keys {
		img.Keys = append(img.Keys, e.keyState(name))
	}
	f.mu.RUnlock()
	return img
}

// sort puts the keys in name order. It runs in Persist, off the apply
// goroutine, because sorting a million keys takes longer than an apply should.
func (img *Image) sort() *Image {
	sort.Slice(img.Keys, func(i, j int) bool { return img.Keys[i].Key < img.Keys[j].Key })
	return img
}

// Persist implements raft.FSMSnapshot.
func (img *Image) Persist(sink raft.SnapshotSink) error {
	if err := img.Encode(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (img *Image) Release() {}

// Encode writes the image in the snapshot layout, keys in name order.
func (img *Image) Encode(w io.Writer) error {
	img.sort()
	crc := crc32.NewIEEE()
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	var b []byte
	b = append(b, snapMagic...)
	b = append(b, img.version())
	b = binary.AppendUvarint(b, img.Applied)
	b = binary.AppendUvarint(b, img.Floor)
	b = appendString(b, img.ClusterID)
	b = binary.AppendUvarint(b, uint64(len(img.Members)))
	ids := make([]string, 0, len(img.Members))
	for id := range img.Members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		b = appendString(b, id)
		b = appendString(b, img.Members[id])
	}
	b = binary.AppendUvarint(b, uint64(len(img.Keys)))
	for _, k := range img.Keys {
		b = appendKey(b, k)
		if len(b) > 32<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = binary.AppendUvarint(b, img.Clock)
	b = binary.AppendUvarint(b, uint64(len(img.Retired)))
	for _, r := range img.Retired {
		b = appendString(b, r.Key)
		b = appendString(b, r.RequestID)
		b = binary.AppendUvarint(b, uint64(r.Token))
		b = binary.AppendUvarint(b, r.At)
		if len(b) > 32<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	if img.version() >= snapVersion3 {
		b = appendValues(b, img.Keys)
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
	b = binary.AppendUvarint(b, k.Armed)
	return binary.AppendUvarint(b, uint64(k.LockDelay))
}

// Restore implements raft.FSM: it replaces the whole state with the snapshot's.
// The snapshot is read and checked completely before anything changes.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	img, err := DecodeImage(data)
	if err != nil {
		return err
	}
	keys := make(map[string]entry, len(img.Keys))
	for _, k := range img.Keys {
		keys[k.Key] = entryOf(k)
	}
	f.mu.Lock()
	f.keys = keys
	f.members = img.Members
	f.floor = img.Floor
	f.clusterID = img.ClusterID
	f.hist = loadHistory(img.Clock, img.Retired)
	f.applied = img.Applied
	f.appliedFast.Store(img.Applied)
	f.wake()
	f.mu.Unlock()
	f.feed.reset(img.Applied)
	if f.obs != nil {
		f.obs.Restored()
	}
	return nil
}

// DecodeImage checks and decodes snapshot bytes, without touching any FSM.
func DecodeImage(data []byte) (*Image, error) {
	if len(data) < len(snapMagic)+1+4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadSnapshot, len(data))
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrBadSnapshot)
	}
	version := body[4]
	if string(body[:4]) != snapMagic || version < snapVersion1 || version > snapVersion3 {
		return nil, fmt.Errorf("%w: unknown format", ErrBadSnapshot)
	}
	d := decoder{buf: body[5:]}
	img := &Image{Applied: d.uvarint(), Floor: d.uvarint(), ClusterID: d.str(), Members: map[string]string{}}
	n := d.count(2)
	for i := uint64(0); i < n && d.err == nil; i++ {
		id := d.str()
		img.Members[id] = d.str()
	}
	n = d.count(minKeyRecord)
	img.Keys = make([]KeyState, 0, n)
	prev := ""
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.key()
		if d.err == nil && (i > 0 && k.Key <= prev || !validKeyState(k)) {
			d.fail("key record")
		}
		prev = k.Key
		img.Keys = append(img.Keys, k)
	}
	img.Retired = make([]Retired, 0)
	if version >= snapVersion2 {
		d.history(img)
	}
	if version >= snapVersion3 {
		d.values(img)
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	return img, nil
}

// history decodes the log clock and the retired request ids. They must be
// in retirement order, none later than the clock, and each named once: what
// Apply itself could have produced.
func (d *decoder) history(img *Image) {
	img.Clock = d.uvarint()
	n := d.count(minRetiredRec)
	img.Retired = make([]Retired, 0, n)
	seen := make(map[retiredID]bool, n)
	var prev uint64
	for i := uint64(0); i < n && d.err == nil; i++ {
		r := Retired{Key: d.str(), RequestID: d.str(), Token: fence.Token(d.uvarint()), At: d.uvarint()}
		id := retiredID{r.Key, r.RequestID}
		if d.err == nil && (r.Key == "" || r.RequestID == "" || r.Token.Seq() == 0 || r.Token > fence.MaxToken ||
			r.At < prev || r.At > img.Clock || seen[id]) {
			d.fail("retired request record")
		}
		seen[id], prev = true, r.At
		img.Retired = append(img.Retired, r)
	}
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
	k.LockDelay = time.Duration(d.int64())
	return k
}

func validKeyState(k KeyState) bool {
	return k.Key != "" && k.Holder != "" && k.TTL >= time.Millisecond && k.TTL <= maxMs && k.TTL%time.Millisecond == 0 &&
		k.LockDelay >= 0 && k.LockDelay <= maxMs && k.LockDelay%time.Millisecond == 0 && k.Token.Seq() != 0 && k.Token <= fence.MaxToken &&
		(k.State == Held || k.State == Released || k.State == Expired)
}

// version is the oldest snapshot format that holds the image.
func (img *Image) version() byte {
	for _, k := range img.Keys {
		if k.Value != "" {
			return snapVersion3
		}
	}
	return snapVersion2
}

// appendValues writes the values of the keys that have one; keys are in
// name order already.
func appendValues(b []byte, keys []KeyState) []byte {
	n := 0
	for _, k := range keys {
		if k.Value != "" {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, k := range keys {
		if k.Value != "" {
			b = appendString(b, k.Key)
			b = appendString(b, k.Value)
		}
	}
	return b
}

// values decodes the values section: each names a key of the image, in
// name order, once, with a non-empty value of at most MaxValueLen bytes.
func (d *decoder) values(img *Image) {
	n := d.count(3)
	i := 0
	for j := uint64(0); j < n && d.err == nil; j++ {
		key, value := d.str(), d.str()
		for i < len(img.Keys) && img.Keys[i].Key < key {
			i++
		}
		if d.err != nil || i == len(img.Keys) || img.Keys[i].Key != key || value == "" || len(value) > MaxValueLen {
			d.fail("value record")
			return
		}
		img.Keys[i].Value = value
		i++
	}
	if d.err == nil && n == 0 {
		d.fail("empty values section") // version 2 is the encoding of a state without values
	}
}
