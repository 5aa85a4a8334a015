package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/fenced/fenced/fence"
)

// Command types. The first byte of every log entry the FSM applies; the second
// byte is the encoding version of that type, so a type can evolve without
// breaking a log written by an older node.
const (
	typeAcquire   byte = 1
	typeRelease   byte = 2
	typeExpire    byte = 3
	typeSetMember byte = 4
	// typeReserved (5) was a command that set the epoch floor to any higher
	// value. No fenced ever proposed one, so no log holds one; the type is
	// never reused, and Decode refuses it (see DESIGN.md, "The epoch
	// floor").
	typeReserved  byte = 5
	typeDelMember byte = 6
	typeBarrier   byte = 7
	typeClusterID byte = 8

	version1 byte = 1
	// version2 of an acquire: same fields, applied with the request id
	// checked first and remembered after its grant (see acquire). Entries
	// of version 1 keep the rules they were first applied with, so a log
	// replays the same way whichever version wrote it, and a node that
	// knows only version 1 stops at a version-2 entry instead of applying
	// it differently.
	version2 byte = 2
	// version3 of an acquire: version 2 with the holder's value appended.
	// An acquire without a value is still written as version 2, so a node
	// that knows only version 2 can apply every entry that does not use it.
	version3 byte = 3
	// version4 of an acquire (version 2 of a release and of a reclaim):
	// applied with the current rules (see rules). An acquire always carries
	// its value, empty or not. Every such entry is written in it: a node
	// that knows only the older versions stops at the first one, so upgrade
	// the followers first (docs/OPERATIONS.md).
	version4 byte = 4
)

// rules is the set of rules an entry is applied with, named by its encoding
// version: an entry keeps the rules it was first applied with, so a log
// replays the same way whichever version of fenced wrote it. The zero
// value is the current rules, which new entries are written with.
type rules uint8

const (
	// rulesCurrent: request ids checked first and remembered (releases'
	// too), in each owner's share of the history, on a log clock that
	// advances by the time that passed on one leader (logClock).
	rulesCurrent rules = iota
	// rulesV2: request ids checked first and remembered in one share for
	// every client, on a log clock that follows the append times.
	rulesV2
	// rulesV1: the holder first, and only the key's last grant remembered.
	rulesV1
)

// MaxValueLen bounds the value an acquire publishes with its grant.
const MaxValueLen = 1024

// ErrCorrupt reports bytes that are not a command this FSM knows. Apply panics
// on it: a committed entry that cannot be decoded means the log is corrupt, and
// guessing would break determinism.
var ErrCorrupt = errors.New("fsm: corrupt command")

// Command is one change of the replicated state. It is implemented by
// Acquire, Release, Expire, SetMember, DelMember, Barrier, SetClusterID,
// Reclaim, DelayEnd, Touch, SigningKey, AcquireMulti and ReleaseMulti.
type Command interface {
	encode(b []byte) []byte
}

// Acquire asks for a key on behalf of a holder. RequestID lets a client retry an
// acquire whose outcome is unknown without minting a second grant.
type Acquire struct {
	Key       string
	Holder    string
	TTL       time.Duration
	RequestID string
	// LockDelay keeps the key from other holders for this long after the
	// grant expires; 0 is off.
	LockDelay time.Duration
	// Value is published with the grant (an elected leader's address):
	// reads and watch events return it, and an acquire by the holder of
	// the grant replaces it. At most MaxValueLen bytes.
	Value string
	// Limit, from 1 to MaxLimit, asks for one of the key's permits as a
	// semaphore of that many (command type 13); 0 is a lock.
	Limit int
	// Shared asks for a shared grant (command type 14): shared grants of a
	// key coexist, an exclusive grant (a lock) excludes them all.
	Shared bool

	// rules are the rules of the entry's version (rulesCurrent for a new
	// acquire).
	rules rules
}

// Release ends a holder's grant. Force lets an operator end a grant without
// being its holder; the token must still be the current one.
type Release struct {
	Key    string
	Holder string
	Token  fence.Token
	Force  bool
	// RequestID names the release: applied once, a repeat of it is answered
	// with the grant the first one ended (KindRelease in the history),
	// never with an effect on a later grant.
	RequestID string
	// Next, when set, is the acquire of the first holder waiting for the key,
	// applied in the same entry once the key is free: a contended key passes
	// from holder to holder in one commit instead of two.
	Next *Acquire

	// legacy marks a release of a version-1 entry: no request id, and no
	// clock tick.
	legacy bool
}

// Expire ends a grant whose lease ran out on the leader's clock. It is proposed
// by the leader only, and ignored when Token is no longer the key's current
// grant or the grant was renewed by an acquire after Armed.
type Expire struct {
	Key   string
	Token fence.Token
	Armed uint64
	// Next, as in Release, hands the key to the first waiter.
	Next *Acquire
}

// SetMember records the HTTP address of a cluster member, so any node can
// forward a request to the leader.
type SetMember struct {
	ID       string
	HTTPAddr string
}

// DelMember forgets a member's HTTP address after it left the cluster.
type DelMember struct {
	ID string
}

// Barrier changes nothing. A new leader commits one before it serves: when
// its apply returns, every earlier entry is applied, and the FSM's applied
// index has caught up with the commit index (raft's own no-op and barrier
// entries never reach the FSM, so they cannot move that index).
type Barrier struct{}

// SetClusterID names the cluster, once: the first leader proposes a random
// ID, and later proposals are ignored. Backups carry it, so a restore can tell
// its own cluster from another.
type SetClusterID struct {
	ID string
}

// Encode returns the log-entry bytes of a command.
func Encode(c Command) []byte { return c.encode(make([]byte, 0, 64)) }

func (c Acquire) encode(b []byte) []byte {
	if c.Limit != 0 || c.Shared {
		return c.encodePermit(b)
	}
	version := version4
	switch {
	case c.rules == rulesV1:
		version = version1
	case c.rules == rulesV2 && c.Value != "":
		version = version3
	case c.rules == rulesV2:
		version = version2
	}
	b = append(b, typeAcquire, version)
	b = appendString(b, c.Key)
	b = appendString(b, c.Holder)
	b = binary.AppendUvarint(b, uint64(c.TTL))
	b = appendString(b, c.RequestID)
	b = binary.AppendUvarint(b, uint64(c.LockDelay))
	if version == version3 || version == version4 {
		b = appendString(b, c.Value)
	}
	return b
}

func (c Release) encode(b []byte) []byte {
	version := version2
	if c.legacy {
		version = version1
	}
	b = append(b, typeRelease, version)
	b = appendString(b, c.Key)
	b = appendString(b, c.Holder)
	b = binary.AppendUvarint(b, uint64(c.Token))
	b = append(b, boolByte(c.Force))
	if !c.legacy {
		b = appendString(b, c.RequestID)
	}
	return appendNext(b, c.Next)
}

// appendNext encodes an optional handoff: a presence byte, then the acquire's
// own encoding.
func appendNext(b []byte, next *Acquire) []byte {
	if next == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	return next.encode(b)
}

func (c Expire) encode(b []byte) []byte {
	b = append(b, typeExpire, version1)
	b = appendString(b, c.Key)
	b = binary.AppendUvarint(b, uint64(c.Token))
	b = binary.AppendUvarint(b, c.Armed)
	return appendNext(b, c.Next)
}

func (c SetMember) encode(b []byte) []byte {
	b = append(b, typeSetMember, version1)
	b = appendString(b, c.ID)
	return appendString(b, c.HTTPAddr)
}

func (c DelMember) encode(b []byte) []byte {
	b = append(b, typeDelMember, version1)
	return appendString(b, c.ID)
}

func (c Barrier) encode(b []byte) []byte { return append(b, typeBarrier, version1) }

func (c SetClusterID) encode(b []byte) []byte {
	b = append(b, typeClusterID, version1)
	return appendString(b, c.ID)
}

// Decode parses log-entry bytes into a command. Every byte must be consumed.
func Decode(b []byte) (Command, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	if b[0] == typeReserved {
		return nil, fmt.Errorf("%w: type %d is reserved (a floor raise no fenced proposes)", ErrCorrupt, b[0])
	}
	if !knownVersion(b[0], b[1]) {
		return nil, fmt.Errorf("%w: type %d version %d", ErrCorrupt, b[0], b[1])
	}
	d := decoder{buf: b[2:]}
	var c Command
	switch b[0] {
	case typeAcquire:
		c = d.acquire(b[1])
	case typeRelease:
		c = d.release(b[1])
	case typeExpire:
		c = Expire{Key: d.str(), Token: fence.Token(d.uvarint()), Armed: d.uvarint(), Next: d.next()}
	case typeSetMember:
		c = SetMember{ID: d.str(), HTTPAddr: d.str()}
	case typeDelMember:
		c = DelMember{ID: d.str()}
	case typeBarrier:
		c = Barrier{}
	case typeClusterID:
		c = SetClusterID{ID: d.str()}
	case typeReclaim:
		c = d.reclaim(b[1])
	case typeDelayEnd:
		c = d.delayEnd()
	case typeTouch:
		c = d.touch()
	case typeSigningKey:
		c = d.signingKey()
	case typeAcquireMulti:
		c = d.acquireMulti()
	case typeReleaseMulti:
		c = d.releaseMulti()
	case typeSemAcquire, typeSharedAcquire:
		c = d.permitAcquire(b[0] == typeSharedAcquire, b[1])
	default:
		return nil, fmt.Errorf("%w: unknown type %d", ErrCorrupt, b[0])
	}
	if err := d.done(); err != nil {
		return nil, err
	}
	return c, nil
}

// knownVersion reports whether this FSM knows the encoding version of a
// command type.
func knownVersion(typ, version byte) bool {
	switch typ {
	case typeAcquire:
		return version >= version1 && version <= version4
	case typeRelease, typeReclaim, typeSemAcquire, typeSharedAcquire:
		return version == version1 || version == version2
	}
	return version == version1
}

func (d *decoder) acquire(version byte) Acquire {
	a := Acquire{Key: d.str(), Holder: d.str(), TTL: time.Duration(d.int64()), RequestID: d.str(), LockDelay: time.Duration(d.int64())}
	switch version {
	case version1:
		a.rules = rulesV1
	case version2:
		a.rules = rulesV2
	case version3:
		a.rules = rulesV2
		// One command, one encoding: a version-3 entry has a value.
		if a.Value = d.str(); d.err == nil && a.Value == "" {
			d.fail("empty value")
		}
	case version4:
		a.Value = d.str()
	}
	return a
}

func (d *decoder) release(version byte) Release {
	r := Release{Key: d.str(), Holder: d.str(), Token: fence.Token(d.uvarint()), Force: d.bool(), legacy: version == version1}
	if !r.legacy {
		r.RequestID = d.str()
	}
	r.Next = d.next()
	return r
}

// next decodes an optional handoff; the nested acquire carries its own type
// and version bytes.
func (d *decoder) next() *Acquire {
	if !d.bool() {
		return nil
	}
	if d.err != nil || len(d.buf) < 2 || d.buf[0] != typeAcquire && d.buf[0] != typeSemAcquire && d.buf[0] != typeSharedAcquire || !knownVersion(d.buf[0], d.buf[1]) {
		d.fail("handoff")
		return nil
	}
	typ, version := d.buf[0], d.buf[1]
	d.buf = d.buf[2:]
	if typ == typeSemAcquire || typ == typeSharedAcquire {
		a := d.permitAcquire(typ == typeSharedAcquire, version)
		return &a
	}
	a := d.acquire(version)
	return &a
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// decoder reads fields in order and remembers the first error, so a caller
// decodes a whole record and checks once.
type decoder struct {
	buf []byte
	err error
	// s, if set, is the stream buf is a window of (snapstream.go): the
	// fields fill it as they need.
	s *stream
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: bad %s", ErrCorrupt, what)
	}
	d.buf = nil
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	d.fill(binary.MaxVarintLen64)
	v, n := binary.Uvarint(d.buf)
	// An overlong varint (a last byte of zero after a continuation) decodes
	// to the same value as the short one: refuse it, so that one command has
	// exactly one encoding.
	if n <= 0 || (n > 1 && d.buf[n-1] == 0) {
		d.fail("varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) int64() int64 {
	v := d.uvarint()
	if v > 1<<63-1 {
		d.fail("duration")
		return 0
	}
	return int64(v)
}

func (d *decoder) str() string {
	return string(d.view())
}

// bytes is str without the copy: the bytes stay the buffer's (from a
// stream, the record's: see decoder.record).
func (d *decoder) bytes() []byte {
	return d.stable(d.view())
}

// view returns the next string field's bytes in the buffer, valid until
// the next field is read.
func (d *decoder) view() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) && (n > 1<<62 || !d.fill(int(n))) {
		d.fail("string length")
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) bool() bool {
	if d.err != nil {
		return false
	}
	if !d.fill(1) || d.buf[0] > 1 {
		d.fail("bool")
		return false
	}
	v := d.buf[0] == 1
	d.buf = d.buf[1:]
	return v
}

func (d *decoder) done() error {
	if d.err == nil && d.fill(1) {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.buf))
	}
	return d.err
}
