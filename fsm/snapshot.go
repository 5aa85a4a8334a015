package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

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
	snapVersion3 = 3
	// snapVersion4 appends, after the values (written even when there are
	// none), the log clock's rule state (logClock) and each retired
	// request id's kind and owner, in the order of the ids. Every state
	// whose log clock has been advanced is written in it.
	snapVersion4 = 4
	// snapVersion5 appends, after version 4's section, the semaphore keys'
	// live permits (appendSemaphores). A state without live permits is
	// still written in an older version, which a node that does not know
	// semaphores can install.
	snapVersion5 = 5
	// snapVersion6 appends, after version 5's section (written even when
	// there are no permits), the members' public signing keys
	// (appendSigningKeys). A state with none is written as before.
	snapVersion6 = 6
	// snapVersion7 appends, after version 6's section (written even when
	// there are no signing keys), the live permits' lock-delays and the
	// delayed slots (appendPermitDelays). A state with neither is written
	// as before.
	snapVersion7  = 7
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
	// Clock is the log clock (ms; see logClock): the request-id history's
	// time. ClockTerm and ClockLast are the term and append time (ms) of
	// the entry that last advanced it, and ClockElapsed says it advances by
	// elapsed time only (entries of the current version were applied).
	Clock, ClockTerm, ClockLast uint64
	ClockElapsed                bool
	// Retired holds the request ids remembered beyond their key's last
	// grant, oldest first.
	Retired []Retired
	// Semaphores holds the live permits of the semaphore keys, in key
	// order; nil when there are none.
	Semaphores []Semaphore
	// SigningKeys holds the members' public signing keys, in registration
	// order.
	SigningKeys []SigningKeyState
	// SlotDelays holds the delayed slots of permits and shared grants that
	// expired with a lock-delay (State Expired, Limit or Shared set), in
	// key then token order; nil when there are none.
	SlotDelays []KeyState
}

// MaxEpoch returns the highest epoch of any key's last grant.
func (img *Image) MaxEpoch() uint64 {
	var m uint64
	for _, k := range img.Keys {
		m = max(m, k.Token.Epoch())
	}
	return m
}

// Snapshot implements raft.FSM. It shares the key table's pages with the
// table (keyview.go) instead of copying the keys; Persist sorts and encodes
// them off the apply goroutine, and Release lets the table write to the
// pages without copying them again.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	// The write lock: taking a view changes the table's record of its
	// views, and it is brief, a list of pages.
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshotLocked(), nil
}

// snapshotLocked takes a snapshot. The caller holds f.mu for writing.
func (f *FSM) snapshotLocked() *snapshot {
	s := &snapshot{f: f, head: f.head(), view: f.keys.view()}
	if len(f.extras) > 0 {
		s.extras = make(map[string]extra, len(f.extras))
		for name, x := range f.extras {
			s.extras[name] = x
		}
	}
	return s
}

// head copies everything but the keys. The caller holds f.mu.
func (f *FSM) head() *Image {
	c := f.hist.clock
	img := &Image{Applied: f.applied, Floor: f.floor, ClusterID: f.clusterID, Members: make(map[string]string, len(f.members)),
		Clock: c.ms, ClockTerm: c.term, ClockLast: c.last, ClockElapsed: c.elapsed, Retired: f.hist.list(), Semaphores: f.semaphores(),
		SigningKeys: cloneSigningKeys(f.signing), SlotDelays: f.allSlotDelays()}
	for id, a := range f.members {
		img.Members[id] = a
	}
	return img
}

// Image copies the state.
func (f *FSM) Image() *Image {
	f.mu.RLock()
	defer f.mu.RUnlock()
	img := f.head()
	img.Keys = make([]KeyState, 0, f.keys.len())
	for name, e := range f.keys.all() {
		img.Keys = append(img.Keys, f.keyState(name, e))
	}
	return img
}

// snapshot is the raft snapshot of an FSM: its image without the keys, and
// a view of the key table as it was.
type snapshot struct {
	f      *FSM
	head   *Image
	view   *keyView
	extras map[string]extra
	// order is the view's keys in name order, once Persist sorted them.
	order []keyRef
	idBuf []byte
	once  sync.Once
}

// keyState returns the key of the snapshot numbered i, in name order. Its
// request id, when packed, is unpacked into a buffer the next call reuses:
// encodeState is done with each key before it asks for the next.
func (s *snapshot) keyState(i int) KeyState {
	r := s.order[i]
	return expandInto(r.key(), s.view.at(r.slot).e, s.extras, &s.idBuf)
}

// Persist implements raft.FSMSnapshot.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.encode(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// encode writes the snapshot in the snapshot layout, keys in name order: the
// bytes Image().Encode writes for the same state.
func (s *snapshot) encode(w io.Writer) error {
	s.sort()
	values := false
	for _, x := range s.extras {
		values = values || x.value != ""
	}
	return encodeState(w, s.head, s.head.versionFor(values), len(s.order), s.keyState)
}

// sort puts the view's keys in name order, once. It sorts references to
// the keys with their slot numbers (16 bytes a key), not the slots: the
// view's pages are the table's, read-only, and a comparison that went
// through the slot to the key took twice as long as one that reads the
// key's bytes (BenchmarkSnapshotPersistShuffled1M).
func (s *snapshot) sort() {
	if s.order != nil {
		return
	}
	s.order = make([]keyRef, s.view.n)
	for i := range s.order {
		k := s.view.at(uint32(i)).key()
		s.order[i] = keyRef{unsafe.StringData(k), uint32(len(k)), uint32(i)}
	}
	slices.SortFunc(s.order, func(a, b keyRef) int { return strings.Compare(a.key(), b.key()) })
}

// keyRef is a key of a view, by its bytes (the table's own string), and its
// slot number.
type keyRef struct {
	p    *byte
	n    uint32
	slot uint32
}

func (r keyRef) key() string { return unsafe.String(r.p, r.n) }

// Release implements raft.FSMSnapshot: the key table no longer keeps the
// view's pages from its writes. Raft calls it once Persist has returned;
// the snapshot must not be persisted after it.
func (s *snapshot) Release() {
	s.once.Do(func() {
		s.f.mu.Lock()
		s.view.release()
		s.f.mu.Unlock()
	})
}

// sort puts the keys in name order.
func (img *Image) sort() *Image {
	slices.SortFunc(img.Keys, func(a, b KeyState) int { return strings.Compare(a.Key, b.Key) })
	sortSemaphores(img.Semaphores)
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
	return encodeState(w, img, img.version(), len(img.Keys), func(i int) KeyState { return img.Keys[i] })
}

// encodeState writes head's fields and the n keys that key returns, in
// name order, in the snapshot layout of version.
func encodeState(w io.Writer, head *Image, version byte, n int, key func(int) KeyState) error {
	crc := crc32.NewIEEE()
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	var b []byte
	b = append(b, snapMagic...)
	b = append(b, version)
	b = binary.AppendUvarint(b, head.Applied)
	b = binary.AppendUvarint(b, head.Floor)
	b = appendString(b, head.ClusterID)
	b = binary.AppendUvarint(b, uint64(len(head.Members)))
	ids := make([]string, 0, len(head.Members))
	for id := range head.Members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		b = appendString(b, id)
		b = appendString(b, head.Members[id])
	}
	b = binary.AppendUvarint(b, uint64(n))
	values := 0
	for i := 0; i < n; i++ {
		k := key(i)
		if k.Value != "" {
			values++
		}
		b = appendKey(b, k)
		if len(b) > 32<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = binary.AppendUvarint(b, head.Clock)
	b = binary.AppendUvarint(b, uint64(len(head.Retired)))
	for _, r := range head.Retired {
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
	if version >= snapVersion3 {
		// The values of the keys that have one, in name order.
		b = binary.AppendUvarint(b, uint64(values))
		for i := 0; i < n; i++ {
			if k := key(i); k.Value != "" {
				b = appendString(b, k.Key)
				b = appendString(b, k.Value)
			}
		}
	}
	if version >= snapVersion4 {
		b = binary.AppendUvarint(b, head.ClockTerm)
		b = binary.AppendUvarint(b, head.ClockLast)
		b = append(b, boolByte(head.ClockElapsed))
		for _, r := range head.Retired {
			b = append(b, byte(r.Kind))
			b = appendString(b, r.Owner)
		}
	}
	if version >= snapVersion5 {
		b = appendSemaphores(b, head.Semaphores)
	}
	if version >= snapVersion6 {
		b = appendSigningKeys(b, head.SigningKeys)
	}
	if version >= snapVersion7 {
		b = appendPermitDelays(b, head.Semaphores, head.SlotDelays)
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
// The snapshot is read and checked completely before anything changes. It is
// decoded as it is read (decodeStream), never held whole: the keys go from
// the reader's bytes straight into a new key table, one allocation a key,
// and the table's index is built once they are all in.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var t *FSM
	indexed := false
	index := func() {
		if !indexed {
			t.keys.indexLoaded()
			indexed = true
		}
	}
	head, err := decodeStream(rc, func(n int) { t = &FSM{}; t.keys.reservePages(n) },
		func(r *rawKey) bool {
			// decodeStream gives the keys in strictly increasing order (it
			// refuses the snapshot otherwise, before this is called): no
			// key can be there already, and none is looked up.
			names, packed := joinNameBytes(r.holder, r.requestID, r.key)
			t.load(r.keyState(names, packed), names, packed)
			return true
		},
		func(key, value []byte) bool {
			index()
			e, ok := t.keys.get(string(key))
			if !ok {
				return false
			}
			k := t.keyState(string(key), e)
			k.Value = string(value)
			t.store(k, e.names, e.packedID())
			return true
		})
	if err != nil {
		return err
	}
	index()
	if !checkSemaphores(head.Semaphores, func(key string) (KeyState, bool) { return t.get(key) }) ||
		!checkSlotDelays(head.Semaphores, head.SlotDelays, func(key string) (KeyState, bool) { return t.get(key) }) {
		return fmt.Errorf("%w: semaphore record", ErrBadSnapshot)
	}
	t.sems = loadSemaphores(head.Semaphores)
	f.mu.Lock()
	f.keys, f.extras, f.sems, f.slots = t.keys, t.extras, t.sems, loadSlotDelays(head.SlotDelays)
	f.members = head.Members
	f.floor = head.Floor
	f.clusterID = head.ClusterID
	f.signing = head.SigningKeys
	f.hist = loadHistory(logClock{ms: head.Clock, term: head.ClockTerm, last: head.ClockLast, elapsed: head.ClockElapsed}, head.Retired)
	f.applied = head.Applied
	f.appliedFast.Store(head.Applied)
	f.wake()
	f.mu.Unlock()
	f.feed.reset(head.Applied)
	if f.obs != nil {
		f.obs.Restored()
	}
	return nil
}

// DecodeImage checks and decodes snapshot bytes, without touching any FSM.
func DecodeImage(data []byte) (*Image, error) {
	var img *Image
	head, err := decodeState(data, func(n int) { img = &Image{Keys: make([]KeyState, 0, n)} },
		func(r *rawKey) bool {
			names := string(r.holder) + string(r.requestID) + string(r.key)
			img.Keys = append(img.Keys, r.keyState(names, false))
			return true
		},
		func(key, value []byte) bool {
			// Both are in name order: the key is at or after i.
			i, _ := slices.BinarySearchFunc(img.Keys, key, func(k KeyState, key []byte) int { return strings.Compare(k.Key, string(key)) })
			if i == len(img.Keys) || img.Keys[i].Key != string(key) {
				return false
			}
			img.Keys[i].Value = string(value)
			return true
		})
	if err != nil {
		return nil, err
	}
	head.Keys = img.Keys
	last := func(key string) (KeyState, bool) {
		i, found := slices.BinarySearchFunc(head.Keys, key, func(k KeyState, key string) int { return strings.Compare(k.Key, key) })
		if !found {
			return KeyState{}, false
		}
		return head.Keys[i], true
	}
	if !checkSemaphores(head.Semaphores, last) || !checkSlotDelays(head.Semaphores, head.SlotDelays, last) {
		return nil, fmt.Errorf("%w: semaphore record", ErrBadSnapshot)
	}
	return head, nil
}

// decodeState checks snapshot bytes and decodes them: the image without
// its keys is returned, the keys go to begin (their number, before the
// first), key (each, in name order) and value (the values, in name order).
// A false from key or value refuses the snapshot.
func decodeState(data []byte, begin func(n int), key func(*rawKey) bool, value func(key, value []byte) bool) (*Image, error) {
	if len(data) < len(snapMagic)+1+trailer {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadSnapshot, len(data))
	}
	body, sum := data[:len(data)-trailer], binary.BigEndian.Uint32(data[len(data)-trailer:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrBadSnapshot)
	}
	return decodeVersioned(&decoder{buf: body}, begin, key, value)
}

// decodeVersioned decodes a snapshot's magic, version and fields from d, for
// decodeState (the whole snapshot, its checksum checked) and decodeStream
// (which checks the checksum once it has read it).
func decodeVersioned(d *decoder, begin func(n int), key func(*rawKey) bool, value func(key, value []byte) bool) (*Image, error) {
	if !d.fill(len(snapMagic) + 1) {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadSnapshot, len(d.buf))
	}
	version := d.buf[len(snapMagic)]
	if string(d.buf[:len(snapMagic)]) != snapMagic || version < snapVersion1 || version > snapVersion7 {
		return nil, fmt.Errorf("%w: unknown format", ErrBadSnapshot)
	}
	d.buf = d.buf[len(snapMagic)+1:]
	img := &Image{Applied: d.uvarint(), Floor: d.uvarint(), ClusterID: d.str(), Members: map[string]string{}}
	n := d.count(2)
	for i := uint64(0); i < n && d.err == nil; i++ {
		id := d.str()
		img.Members[id] = d.str()
	}
	n = d.count(minKeyRecord)
	begin(d.sized(n))
	var prev []byte
	var r rawKey
	for i := uint64(0); i < n && d.err == nil; i++ {
		d.key(&r)
		if d.err == nil && (i > 0 && bytes.Compare(r.key, prev) <= 0 || !r.valid() || !key(&r)) {
			d.fail("key record")
		}
		prev = append(prev[:0], r.key...)
	}
	img.Retired = make([]Retired, 0)
	if version >= snapVersion2 {
		d.history(img, version)
	}
	if version >= snapVersion3 {
		d.values(value, version)
	}
	if version >= snapVersion4 {
		d.clockAndOwners(img)
	}
	if version >= snapVersion5 {
		img.Semaphores = d.semaphores(version)
	}
	if version >= snapVersion6 {
		d.signingKeys(img, version)
	}
	if version >= snapVersion7 {
		d.permitDelays(img)
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	return img, nil
}

// history decodes the log clock and the retired request ids. They must be
// in retirement order, none later than the clock, and each named once: what
// Apply itself could have produced. (From version 4 an id is named once per
// kind, which clockAndOwners checks once it has read the kinds.)
func (d *decoder) history(img *Image, version byte) {
	img.Clock = d.uvarint()
	n := d.count(minRetiredRec)
	img.Retired = make([]Retired, 0, d.sized(n))
	seen := make(map[retiredID]bool, d.sized(n))
	var prev uint64
	for i := uint64(0); i < n && d.err == nil; i++ {
		r := Retired{Key: d.str(), RequestID: d.str(), Token: fence.Token(d.uvarint()), At: d.uvarint()}
		id := retiredID{r.Key, r.RequestID, KindAcquire}
		if d.err == nil && (r.Key == "" || r.RequestID == "" || r.Token.Seq() == 0 || r.Token > fence.MaxToken ||
			r.At < prev || r.At > img.Clock || version < snapVersion4 && seen[id]) {
			d.fail("retired request record")
		}
		seen[id], prev = true, r.At
		img.Retired = append(img.Retired, r)
	}
}

// clockAndOwners decodes version 4's section: the log clock's rule state
// and each retired id's kind and owner. Two ids of one key and request id
// must then differ in kind.
func (d *decoder) clockAndOwners(img *Image) {
	img.ClockTerm, img.ClockLast = d.uvarint(), d.uvarint()
	img.ClockElapsed = d.bool()
	seen := make(map[retiredID]bool, len(img.Retired))
	for i := range img.Retired {
		if d.err != nil || !d.fill(1) || d.buf[0] > byte(KindRelease) {
			d.fail("retired request kind")
			return
		}
		r := &img.Retired[i]
		r.Kind = RequestKind(d.buf[0])
		d.buf = d.buf[1:]
		r.Owner = d.str()
		id := retiredID{r.Key, r.RequestID, r.Kind}
		if seen[id] || len(r.Owner) > maxOwnerLen {
			d.fail("retired request owner")
			return
		}
		seen[id] = true
	}
}

// count reads a record count and refuses one that the remaining bytes cannot
// hold, so a hostile count cannot make Restore allocate without bound. A
// stream knows the bytes left only once it has read them all: until then
// the records' room is sized, not taken on the count's word.
func (d *decoder) count(minRecord uint64) uint64 {
	n := d.uvarint()
	if d.err == nil && (d.s == nil || d.s.eof) && n > uint64(len(d.buf))/minRecord {
		d.fail("count")
		return 0
	}
	return n
}

// rawKey is a key record as the snapshot holds it, its names still the
// snapshot's bytes (or, read from a stream, the record's copy of them).
type rawKey struct {
	key, holder, requestID []byte
	token                  fence.Token
	ttl, lockDelay         time.Duration
	state                  State
	index, armed           uint64
}

func (d *decoder) key(r *rawKey) {
	d.record()
	r.key, r.holder, r.token, r.ttl = d.bytes(), d.bytes(), fence.Token(d.uvarint()), time.Duration(d.int64())
	if d.err == nil && d.fill(1) {
		r.state = State(d.buf[0])
		d.buf = d.buf[1:]
	} else {
		d.fail("state")
	}
	r.requestID = d.bytes()
	r.index = d.uvarint()
	r.armed = d.uvarint()
	r.lockDelay = time.Duration(d.int64())
}

// keyState returns the record as a KeyState whose names point into names,
// the holder, the request id and the key joined.
func (r *rawKey) keyState(names string, packed bool) KeyState {
	hl, kl := len(r.holder), len(r.key)
	k := KeyState{Key: names[len(names)-kl:], Holder: names[:hl], Token: r.token, TTL: r.ttl, State: r.state,
		Index: r.index, Armed: r.armed, LockDelay: r.lockDelay}
	if !packed {
		// Packed, the request id stays in names only: a restore's load
		// reads everything of the key's state but it.
		k.RequestID = names[hl : len(names)-kl]
	}
	return k
}

func (r *rawKey) valid() bool {
	return len(r.key) > 0 && len(r.holder) > 0 && r.ttl >= time.Millisecond && r.ttl <= maxMs && r.ttl%time.Millisecond == 0 &&
		r.lockDelay >= 0 && r.lockDelay <= maxMs && r.lockDelay%time.Millisecond == 0 && r.token.Seq() != 0 && r.token <= fence.MaxToken &&
		(r.state == Held || r.state == Released || r.state == Expired)
}

// version is the oldest snapshot format that holds the image.
func (img *Image) version() byte {
	values := false
	for _, k := range img.Keys {
		values = values || k.Value != ""
	}
	return img.versionFor(values)
}

// versionFor returns the oldest layout that holds the image: version 7
// with permits' lock-delays or delayed slots, version 6
// with signing keys, version 5 with live permits, version 4 once the log
// clock was advanced or an id has a kind or an owner, else version 3 with
// values, else 2.
func (img *Image) versionFor(values bool) byte {
	if len(img.SlotDelays) > 0 || permitDelayed(img.Semaphores) {
		return snapVersion7
	}
	if len(img.SigningKeys) > 0 {
		return snapVersion6
	}
	if len(img.Semaphores) > 0 {
		return snapVersion5
	}
	if img.ClockTerm != 0 || img.ClockLast != 0 || img.ClockElapsed {
		return snapVersion4
	}
	for _, r := range img.Retired {
		if r.Kind != KindAcquire || r.Owner != "" {
			return snapVersion4
		}
	}
	if values {
		return snapVersion3
	}
	return snapVersion2
}

// values decodes the values section: each names a key of the image, in
// name order, once, with a non-empty value of at most MaxValueLen bytes.
func (d *decoder) values(value func(key, value []byte) bool, version byte) {
	n := d.count(3)
	var prev []byte
	for j := uint64(0); j < n && d.err == nil; j++ {
		d.record()
		key, v := d.bytes(), d.bytes()
		if d.err != nil || j > 0 && bytes.Compare(key, prev) <= 0 || len(v) == 0 || len(v) > MaxValueLen || !value(key, v) {
			d.fail("value record")
			return
		}
		prev = append(prev[:0], key...)
	}
	if d.err == nil && n == 0 && version == snapVersion3 {
		d.fail("empty values section") // version 2 is the encoding of a state without values
	}
}
