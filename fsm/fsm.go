// Package fsm is fenced's replicated state machine: per-key grants, fencing
// tokens derived from the Raft term of each entry, snapshots, and the rule by
// which an ended key is forgotten without a token ever going back.
package fsm

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fence"
)

// State is the state of a key's last grant.
type State uint8

// The states of a key. A key exists in the FSM from its first grant on until
// a Reclaim entry forgets it, which it does only when every later grant's
// token is higher than the key's high-water mark (see Reclaim).
const (
	Held     State = 1
	Released State = 2
	Expired  State = 3
)

// String returns the lower-case name used on the wire.
func (s State) String() string {
	switch s {
	case Held:
		return "held"
	case Released:
		return "released"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// KeyState is a key's last grant. Token is also the key's high-water mark:
// every later grant of the key gets a higher one.
type KeyState struct {
	Key    string
	Holder string
	Token  fence.Token
	TTL    time.Duration
	State  State
	// Limit is the key's limit when the grant is a semaphore permit (see
	// acquirePermit), 0 for a lock. The key table's entry never carries
	// it: a key's last grant reads as a lock's, and Permits lists a
	// semaphore's live permits with their limit. (Limit and Shared sit in
	// State's padding: a lock's KeyState is no larger for them.)
	Limit uint16
	// Shared marks a shared grant (see acquirePermit): any number of them
	// coexist, and none with an exclusive grant (a lock).
	Shared    bool
	RequestID string
	// Index is the Raft log index of the entry that made the grant.
	Index uint64
	// Armed is the index of the entry that last granted or renewed the grant
	// (an acquire by its holder). An expiry names it, so an expiry decided
	// before a renewal cannot end the renewed lease.
	Armed uint64
	// LockDelay is how long the leader keeps the key from other holders after
	// this grant expires (not after a release); 0 is off. A DelayEnd entry
	// sets it to 0 once the delay after the expiry ran out.
	LockDelay time.Duration
	// Value is what the holder published with the grant.
	Value string
}

// Permit reports whether k is a semaphore permit or a shared grant: one of
// several live grants of its key, kept beside the key table.
func (k KeyState) Permit() bool { return k.Limit > 0 || k.Shared }

// entry is a key's state as the FSM stores it: KeyState in 48 bytes, so
// that a million keys fit in well under two hundred megabytes (the key
// table keeps entries inline, 56 bytes a key with its length and hash).
// The holder, the request id and the key are one string, whose tail is
// the table's key: one allocation per key for all three names. What most
// keys do not have lives in FSM.extras: a value, a holder longer than
// 64 KiB, an armed index far from the grant's.
type entry struct {
	// names is the holder, then the request id, then the key; holderLen
	// splits the first two and the key's length the last.
	names string
	token fence.Token
	index uint64
	// armed is Armed - Index, when it fits (see extra).
	armed     uint32
	ttlMs     uint32
	delayMs   uint32
	holderLen uint16
	state     State
	// flags: flagExtra, flagPackedID.
	flags uint8
}

const (
	// flagExtra says that FSM.extras holds the key's value, holder length
	// and armed index, which then override holderLen and armed.
	flagExtra uint8 = 1 << iota
	// flagPackedID says that names holds the request id packed (names.go).
	flagPackedID
)

func (e *entry) extra() bool    { return e.flags&flagExtra != 0 }
func (e *entry) packedID() bool { return e.flags&flagPackedID != 0 }

// extra is what an entry cannot hold inline.
type extra struct {
	value     string
	armed     uint64
	holderLen int
}

// maxMs is the longest duration an entry holds (about 49 days).
const maxMs = time.Duration(1<<32-1) * time.Millisecond

// keyState expands the entry of key. key need only equal the table's key.
func (f *FSM) keyState(key string, e entry) KeyState { return expand(key, e, f.extras) }

// expand is keyState with the extras given.
func expand(key string, e entry, extras map[string]extra) KeyState {
	return expandInto(key, e, extras, nil)
}

// expandInto is expand; with buf, a packed request id is unpacked into
// *buf, valid until the next use of buf (unpackIDInto).
func expandInto(key string, e entry, extras map[string]extra, buf *[]byte) KeyState {
	k := KeyState{Key: e.names[len(e.names)-len(key):], Token: e.token, TTL: time.Duration(e.ttlMs) * time.Millisecond, State: e.state,
		Index: e.index, Armed: e.index + uint64(e.armed), LockDelay: time.Duration(e.delayMs) * time.Millisecond}
	hl := int(e.holderLen)
	if e.extra() {
		x := extras[key]
		k.Value, k.Armed, hl = x.value, x.armed, x.holderLen
	}
	k.Holder = e.names[:hl]
	if stored := e.names[hl : len(e.names)-len(key)]; buf != nil {
		k.RequestID = unpackIDInto(stored, e.packedID(), buf)
	} else {
		k.RequestID = unpackID(stored, e.packedID())
	}
	return k
}

// holderLen returns the length of the holder in e's names.
func (f *FSM) holderLen(key string, e entry) int {
	if e.extra() {
		return f.extras[key].holderLen
	}
	return int(e.holderLen)
}

// holderOf returns the holder of the entry of key.
func (f *FSM) holderOf(key string, e entry) string { return e.names[:f.holderLen(key, e)] }

// requestID returns the request id of the entry of key.
func (f *FSM) requestID(key string, e entry) string {
	return unpackID(e.names[f.holderLen(key, e):len(e.names)-len(key)], e.packedID())
}

// store puts k in the table with names (joinNames of k's names, packed as
// it says) and returns k with its key, holder and (unless packed) request
// id pointing into names.
func (f *FSM) store(k KeyState, names string, packed bool) KeyState {
	key, e := f.entryOf(k, names, packed)
	f.keys.put(key, e)
	hl := len(k.Holder)
	k.Key, k.Holder = key, names[:hl]
	if !packed {
		k.RequestID = names[hl : len(names)-len(key)]
	}
	return k
}

// load is store for a restore: it appends k's entry to the table without
// indexing it (keyTable.load). k must come after every key loaded before.
func (f *FSM) load(k KeyState, names string, packed bool) {
	key, e := f.entryOf(k, names, packed)
	f.keys.load(key, e)
}

// entryOf returns k's key (the tail of names) and the entry that holds k,
// and keeps in f.extras what the entry cannot hold.
func (f *FSM) entryOf(k KeyState, names string, packed bool) (string, entry) {
	key := names[len(names)-len(k.Key):]
	hl := len(k.Holder)
	e := entry{names: names, token: k.Token, index: k.Index, ttlMs: uint32(k.TTL / time.Millisecond),
		delayMs: uint32(k.LockDelay / time.Millisecond), state: k.State}
	if packed {
		e.flags |= flagPackedID
	}
	if k.Value == "" && hl <= 1<<16-1 && k.Armed >= k.Index && k.Armed-k.Index <= 1<<32-1 {
		e.armed, e.holderLen = uint32(k.Armed-k.Index), uint16(hl)
		if f.extras != nil {
			delete(f.extras, key)
		}
	} else {
		e.flags |= flagExtra
		if f.extras == nil {
			f.extras = make(map[string]extra)
		}
		f.extras[key] = extra{value: k.Value, armed: k.Armed, holderLen: hl}
	}
	return key, e
}

// forget deletes key.
func (f *FSM) forget(key string) {
	f.keys.delete(key)
	delete(f.extras, key)
}

func (f *FSM) get(key string) (KeyState, bool) {
	e, ok := f.keys.get(key)
	if !ok {
		return KeyState{}, false
	}
	return f.keyState(key, e), true
}

// put stores k and returns it with its key, holder and request id pointing
// into the stored names, so that the observers (the leader's lease table)
// share them instead of keeping copies. A put that keeps a key's names (a
// release, an expiry, a renewal by the same request) reuses them.
func (f *FSM) put(k KeyState) KeyState {
	var names string
	packed := false
	if old, ok := f.keys.get(k.Key); ok {
		if hl := f.holderLen(k.Key, old); old.names[:hl] == k.Holder && sameID(old.names[hl:len(old.names)-len(k.Key)], old.packedID(), k.RequestID) {
			names, packed = old.names, old.packedID()
		}
	}
	if names == "" {
		names, packed = joinNames(k.Holder, k.RequestID, k.Key)
	}
	return f.store(k, names, packed)
}

// Result is what Apply returns for a command; raft hands it to the proposer
// through ApplyFuture.Response.
type Result struct {
	// Key is the key after the command (for a refused acquire: its current grant).
	Key KeyState
	// Renewed is true when an acquire returned the holder's existing grant.
	Renewed bool
	// Changed is false when the command changed nothing (a stale expire, a
	// repeated release, a refusal).
	Changed bool
	// Err is the refusal, one of the errors of this package, or nil.
	Err error
	// Next is the result of a handoff's acquire, when the command carried one
	// and freed the key.
	Next *Result
	// Reclaim says what a Reclaim entry did; nil for other commands.
	Reclaim *ReclaimResult
	// Touched is the number of grants a Touch entry renewed.
	Touched int
	// Multi holds the grants an AcquireMulti entry made or renewed, in the
	// request's order (Key is the first of them); behind a pointer, so a
	// lock's Result is no larger for it.
	Multi *[]KeyState
	// Recalled is true when a release's request id had been applied
	// already: Key names the grant that first release ended (its key,
	// token and state); nothing changed and nothing was handed off.
	Recalled bool
}

// Observer hears of grants and of their ends, in log order, after the state
// changed. The leader uses it to arm and disarm lease timers. Calls come from
// the apply goroutine: they must not block.
type Observer interface {
	Granted(k KeyState, renewed bool)
	Ended(k KeyState)
	Restored()
}

// Config tunes an FSM. Every node of a cluster must use the same values, or
// their states diverge.
type Config struct {
	// MaxSeq is the highest seq granted inside one epoch; 0 means fence.MaxSeq.
	// Tests lower it to reach exhaustion.
	MaxSeq uint64
	// MaxRetired caps the request ids remembered beyond their key's last
	// grant; 0 means DefaultMaxRetired. Tests lower it.
	MaxRetired int
	// MaxRetiredPerOwner is each owner's share of them (Retired.Owner); 0
	// means DefaultMaxRetiredPerOwner. Tests lower it.
	MaxRetiredPerOwner int
	// Observer, if set, hears of grant changes.
	Observer Observer
	// ReclaimIgnoresEpoch makes Reclaim forget ended keys without the epoch
	// rule: a positive control that the token checkers must catch (a key
	// granted again in the same epoch restarts at seq 1). Never set it
	// outside such a test.
	ReclaimIgnoresEpoch bool
}

// FSM implements raft.FSM and raft.BatchingFSM.
type FSM struct {
	maxSeq             uint64
	maxRetired         int
	maxRetiredPerOwner int
	obs                Observer
	// reclaimIgnoresEpoch is Config.ReclaimIgnoresEpoch.
	reclaimIgnoresEpoch bool

	mu   sync.RWMutex
	keys keyTable
	// extras holds what some keys' entries cannot (see entry); nil while
	// no key needs it.
	extras map[string]extra
	// sems holds the live permits of the semaphore keys (semaphore.go);
	// nil while there are none, so a lock pays a nil check for them.
	sems map[string]*semaphore
	// slots holds the delayed slots of permits and shared grants that
	// expired with a lock-delay (slotdelay.go), per key in token order;
	// nil while there are none.
	slots     map[string][]KeyState
	members   map[string]string
	floor     uint64
	clusterID string
	// signing holds the members' public signing keys, in registration
	// order (signingkeys.go).
	signing []SigningKeyState
	applied uint64
	// hist remembers request ids that no longer name their key's last
	// grant, so a late retry is never granted twice.
	hist history
	// appliedFast mirrors applied for lock-free reads on the hot read path.
	appliedFast atomic.Uint64
	// notify is closed and replaced after an apply when someone waits on it.
	notify  chan struct{}
	waiting bool
	// feed hears of every change of a key, for watchers (events.go).
	feed *Feed
}

var _ raft.BatchingFSM = (*FSM)(nil)

// New returns an empty FSM.
func New(cfg Config) *FSM {
	if cfg.MaxSeq == 0 || cfg.MaxSeq > fence.MaxSeq {
		cfg.MaxSeq = fence.MaxSeq
	}
	if cfg.MaxRetired <= 0 {
		cfg.MaxRetired = DefaultMaxRetired
	}
	if cfg.MaxRetiredPerOwner <= 0 {
		cfg.MaxRetiredPerOwner = DefaultMaxRetiredPerOwner
	}
	return &FSM{
		maxSeq:              cfg.MaxSeq,
		maxRetired:          cfg.MaxRetired,
		maxRetiredPerOwner:  cfg.MaxRetiredPerOwner,
		obs:                 cfg.Observer,
		reclaimIgnoresEpoch: cfg.ReclaimIgnoresEpoch,
		keys:                newKeyTable(0),
		members:             make(map[string]string),
		hist:                newHistory(),
		notify:              make(chan struct{}),
		feed:                newFeed(),
	}
}

// SetObserver sets the observer. Call it before the FSM is handed to raft.
func (f *FSM) SetObserver(o Observer) { f.obs = o }

// notice is an Observer call (a grant, or the end of one) collected under
// the lock and delivered after it. It is not a watch Event: the watch feed
// has its own.
type notice struct {
	key     KeyState
	granted bool
	renewed bool
	// touched marks a Touch's renewal (Toucher).
	touched bool
	// barrier marks a Barrier entry, at key.Index in term key.Armed
	// (TakeoverObserver).
	barrier bool
}

// Apply applies one committed entry.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in order. Entries that are not
// commands (configuration changes, no-ops) are skipped, never decoded.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	var notices []notice
	var changes []Event
	f.mu.Lock()
	if len(logs) > 0 {
		f.feed.anchor(logs[0].Index)
	}
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		cmd, err := Decode(l.Data)
		if err != nil {
			f.mu.Unlock()
			panic(fmt.Sprintf("fsm: log entry %d (term %d) cannot be decoded, the log is corrupt: %v", l.Index, l.Term, err))
		}
		var res *Result
		res, notices = f.apply(cmd, logPos{term: l.Term, index: l.Index, appended: l.AppendedAt}, notices)
		out[i] = res
		changes = f.feed.note(changes, cmd, res, l.Index)
	}
	f.mu.Unlock()
	// The observer hears of the changes before the applied index moves, so a
	// reader that waited for this index also sees the leader's lease for it.
	f.deliver(notices)
	if len(logs) > 0 {
		// Watchers hear of the changes before the applied index moves.
		f.feed.publish(changes, logs[len(logs)-1].Index)
		f.mu.Lock()
		if last := logs[len(logs)-1].Index; last > f.applied {
			f.applied = last
			f.appliedFast.Store(last)
		}
		f.wake()
		f.mu.Unlock()
	}
	return out
}

// Reset empties the FSM, as if the process had just started, before raft
// replays its snapshot and log into it again.
func (f *FSM) Reset() {
	f.mu.Lock()
	f.keys = newKeyTable(0)
	f.extras = nil
	f.sems = nil
	f.slots = nil
	f.members = make(map[string]string)
	f.hist = newHistory()
	f.floor, f.applied, f.clusterID = 0, 0, ""
	f.signing = nil
	f.appliedFast.Store(0)
	f.mu.Unlock()
	f.feed.reset(0)
}

func (f *FSM) wake() {
	if f.waiting {
		close(f.notify)
		f.notify = make(chan struct{})
		f.waiting = false
	}
}

func (f *FSM) deliver(notices []notice) {
	if f.obs == nil {
		return
	}
	for _, e := range notices {
		if e.barrier {
			if o, ok := f.obs.(TakeoverObserver); ok {
				o.BarrierApplied(e.key.Index, e.key.Armed)
			}
			continue
		}
		if t, ok := f.obs.(Toucher); ok && e.touched {
			t.Touched(e.key)
			continue
		}
		if e.granted {
			f.obs.Granted(e.key, e.renewed)
		} else {
			f.obs.Ended(e.key)
		}
	}
}

// tick advances the log clock to the entry at pos, by the rule of its
// version (logClock), and forgets the request ids that left the window.
// The leader's append time, carried in the entry, is the only clock the FSM
// reads: every replica sees the same one.
func (f *FSM) tick(pos logPos, current bool) {
	f.hist.clock.tick(pos.term, pos.appended, current)
	f.hist.expire(RequestIDWindow)
}

// policy is what a retirement by an entry of the current rules (or of the
// older ones, with one share for every client) obeys.
func (f *FSM) policy(current bool) retirePolicy {
	if current {
		return retirePolicy{max: f.maxRetired, perOwner: f.maxRetiredPerOwner}
	}
	return retirePolicy{max: f.maxRetired}
}

// logPos is what apply reads of the entry being applied: its term and index,
// and the time the leader appended it.
type logPos struct {
	term, index uint64
	appended    time.Time
}

func (f *FSM) apply(cmd Command, pos logPos, notices []notice) (*Result, []notice) {
	switch c := cmd.(type) {
	case Acquire:
		r := f.acquire(c, pos)
		if r.Err == nil {
			notices = append(notices, notice{key: r.Key, granted: true, renewed: r.Renewed})
		}
		return r, notices
	case Release:
		r := f.release(c, pos)
		if r.Changed {
			notices = append(notices, notice{key: r.Key})
		}
		if r.Err == nil && !r.Recalled && c.Next != nil {
			notices = f.handoff(r, *c.Next, pos, notices)
		}
		return r, notices
	case Expire:
		r := f.expire(c)
		if r.Changed {
			notices = append(notices, notice{key: r.Key})
			if c.Next != nil {
				notices = f.handoff(r, *c.Next, pos, notices)
			}
		}
		return r, notices
	case SetMember:
		f.members[c.ID] = c.HTTPAddr
		return &Result{Changed: true}, notices
	case DelMember:
		delete(f.members, c.ID)
		f.forgetSigningKeys(c.ID)
		return &Result{Changed: true}, notices
	case Barrier:
		return &Result{}, append(notices, notice{key: KeyState{Index: pos.index, Armed: pos.term}, barrier: true})
	case SetClusterID:
		if f.clusterID == "" {
			f.clusterID = c.ID
			return &Result{Changed: true}, notices
		}
		return &Result{}, notices
	case Reclaim:
		return f.reclaim(c, pos), notices
	case DelayEnd:
		return f.delayEnd(c), notices
	case Touch:
		return f.touch(c, pos, notices)
	case SigningKey:
		return f.registerSigningKey(c, pos), notices
	case AcquireMulti:
		return f.acquireMulti(c, pos, notices)
	case ReleaseMulti:
		return f.releaseMulti(c, pos, notices)
	}
	panic(fmt.Sprintf("fsm: unhandled command %T", cmd))
}

// handoff applies a waiter's acquire in the entry that freed the key.
func (f *FSM) handoff(r *Result, next Acquire, pos logPos, notices []notice) []notice {
	if next.Key != r.Key.Key && r.Key.Key != "" {
		r.Next = &Result{Err: fmt.Errorf("%w: handoff of another key", ErrInvalid)}
		return notices
	}
	r.Next = f.acquire(next, pos)
	if r.Next.Err == nil {
		notices = append(notices, notice{key: r.Next.Key, granted: true, renewed: r.Next.Renewed})
	}
	return notices
}

// acquire decides a grant. The epoch is the term of the entry being applied
// plus the floor: never the node's current term, so every node computes the
// same token for the same entry.
//
// The request id is checked before the holder: a retry is answered with its
// own grant or ErrGrantEnded, never with a second grant, and never with a
// grant another request of the same holder made after its own ended. An
// acquire of a version-1 entry keeps version 1's rules (the holder first,
// and only the key's last grant remembered) and leaves the history alone,
// so an old log replays as it was first applied.
func (f *FSM) acquire(c Acquire, pos logPos) *Result {
	if c.Limit != 0 || c.Shared {
		return f.acquirePermit(c, pos)
	}
	term, index := pos.term, pos.index
	if c.Key == "" || c.Holder == "" || c.TTL < time.Millisecond || c.TTL > maxMs || c.LockDelay < 0 || c.LockDelay > maxMs || len(c.Value) > MaxValueLen {
		return &Result{Err: fmt.Errorf("%w: key, holder and a ttl of 1ms to 49 days are required", ErrInvalid)}
	}
	// Durations are kept to the millisecond; the result says what was kept.
	c.TTL, c.LockDelay = c.TTL.Truncate(time.Millisecond), c.LockDelay.Truncate(time.Millisecond)
	k, exists := f.get(c.Key)
	v1, current := c.rules == rulesV1, c.rules == rulesCurrent
	if !v1 {
		f.tick(pos, current)
	}
	if s := f.shapeOf(c.Key); s != nil {
		// A key with live permits is a semaphore until they end; one with
		// live shared grants excludes an exclusive grant until they end.
		if p := s.permits[0]; s.shared {
			return &Result{Key: p, Err: &HeldError{Key: c.Key, Holder: p.Holder, Token: p.Token}}
		}
		return &Result{Key: s.permits[0], Err: s.mismatch(c.Key)}
	}
	if !v1 {
		if r, answered := f.recall(c, k, exists); answered {
			return r
		}
	}
	if exists && k.State == Held {
		if k.Holder != c.Holder {
			return &Result{Key: k, Err: &HeldError{Key: k.Key, Holder: k.Holder, Token: k.Token}}
		}
		k.TTL, k.Armed, k.LockDelay, k.Value = c.TTL, index, c.LockDelay, c.Value
		k = f.put(k)
		// A new request answered with this grant owns it from now on: its
		// retry after the grant ended must not mint another.
		if !v1 && c.RequestID != k.RequestID {
			f.hist.retire(Retired{Key: c.Key, RequestID: c.RequestID, Token: k.Token, Owner: OwnerOf(c.Holder)}, f.policy(current))
		}
		return &Result{Key: k, Renewed: true, Changed: true}
	}
	if v1 && exists && c.RequestID != "" && k.RequestID == c.RequestID && k.Holder == c.Holder {
		return &Result{Key: k, Err: ErrGrantEnded}
	}
	if err := f.slotRefusal(c.Key, 0, 1); err != nil {
		return &Result{Key: k, Err: err}
	}
	tok, err := f.nextToken(k, exists, term)
	if err != nil {
		return &Result{Key: k, Err: err}
	}
	if exists && !v1 {
		// The replaced grant's request id is remembered for the window
		// (unless it already is: a version-1 entry may have reused it).
		f.hist.retire(Retired{Key: c.Key, RequestID: k.RequestID, Token: k.Token, Owner: OwnerOf(k.Holder)}, f.policy(current))
	}
	k = KeyState{Key: c.Key, Holder: c.Holder, Token: tok, TTL: c.TTL, State: Held, RequestID: c.RequestID, Index: index, Armed: index, LockDelay: c.LockDelay, Value: c.Value}
	k = f.put(k)
	return &Result{Key: k, Changed: true}
}

// nextToken returns the token of the next grant of a key: seq restarts at 1
// only when the epoch rises above the epoch of the key's last grant.
func (f *FSM) nextToken(last KeyState, exists bool, term uint64) (fence.Token, error) {
	// Checked before adding: a floor near 2^64 must not wrap to a low epoch.
	if f.floor > fence.MaxEpoch || term > fence.MaxEpoch-f.floor {
		return 0, ErrEpochExhausted
	}
	epoch := term + f.floor
	seq := uint64(1)
	if exists {
		switch lastEpoch := last.Token.Epoch(); {
		case epoch < lastEpoch:
			return 0, ErrEpochRegressed
		case epoch == lastEpoch:
			seq = last.Token.Seq() + 1
			if seq > f.maxSeq {
				return 0, ErrSeqExhausted
			}
		}
	}
	return fence.Compose(epoch, seq)
}

// release ends a holder's grant. A release with a request id is applied
// once: its repeat is answered with the grant the first one ended, and
// neither ends nor hands off a later grant, whatever token it names (a
// client that resolved "the current token" again for its retry names the
// next holder's).
func (f *FSM) release(c Release, pos logPos) *Result {
	if !c.legacy {
		f.tick(pos, true)
		if tok, known := f.hist.lookup(c.Key, c.RequestID, KindRelease); known && c.RequestID != "" {
			return &Result{Key: KeyState{Key: c.Key, Token: tok, State: Released}, Recalled: true}
		}
	}
	r := f.end(c)
	if r.Err == nil && !c.legacy && c.RequestID != "" {
		f.hist.retire(Retired{Key: c.Key, RequestID: c.RequestID, Token: r.Key.Token, Kind: KindRelease, Owner: OwnerOf(c.Holder)}, f.policy(true))
	}
	return r
}

// end is a release without its request id.
func (f *FSM) end(c Release) *Result {
	k, live, err := f.endable(c)
	if err != nil || !live {
		return &Result{Key: k, Err: err}
	}
	if s := f.shapeOf(c.Key); s != nil {
		return &Result{Key: f.dropPermit(c.Key, s, s.byToken(c.Token), Released), Changed: true}
	}
	k.State = Released
	k = f.put(k)
	return &Result{Key: k, Changed: true}
}

// endable decides a release without changing anything: the grant it names
// and whether that grant is live (the release ends it), or the refusal.
// A grant already released is no refusal and not live: a retried release.
func (f *FSM) endable(c Release) (KeyState, bool, error) {
	if s := f.shapeOf(c.Key); s != nil {
		return f.permitEndable(s, c)
	}
	k, ok := f.get(c.Key)
	switch {
	case !ok:
		return KeyState{}, false, ErrUnknownKey
	case c.Token != k.Token:
		return k, false, ErrStaleToken
	case !c.Force && c.Holder != k.Holder:
		return k, false, ErrNotHolder
	case k.State == Released:
		return k, false, nil // a retried release: already done
	case k.State == Expired:
		return k, false, ErrExpired
	}
	return k, true, nil
}

func (f *FSM) expire(c Expire) *Result {
	if s := f.shapeOf(c.Key); s != nil {
		return f.expirePermit(s, c)
	}
	k, ok := f.get(c.Key)
	if !ok || k.State != Held || k.Token != c.Token || k.Armed != c.Armed {
		return &Result{Key: k}
	}
	k.State = Expired
	k = f.put(k)
	return &Result{Key: k, Changed: true}
}

// Get returns a key's state as applied on this node (not a linearizable read).
func (f *FSM) Get(key string) (KeyState, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.get(key)
}

// Keys returns the keys with a prefix in name order, at most limit of them
// (limit <= 0: all).
func (f *FSM) Keys(prefix string, limit int) []KeyState {
	f.mu.RLock()
	out := make([]KeyState, 0)
	for name, e := range f.keys.all() {
		if strings.HasPrefix(name, prefix) {
			out = append(out, f.keyState(name, e))
		}
	}
	f.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Live returns every key whose last grant is held, semaphore keys aside
// (WalkPermits).
func (f *FSM) Live() []KeyState {
	var out []KeyState
	f.WalkLive(func(n int) { out = make([]KeyState, 0, n) }, func(k KeyState) { out = append(out, k) })
	return out
}

// WalkLive calls begin with the number of keys whose last grant is held,
// then fn with each of them, in no particular order, all under the state
// machine's read lock: no entry is applied meanwhile, and neither function
// may call the FSM. A new leader re-arms its leases with it without a list
// of every live grant. A semaphore key's permits are walked by WalkPermits,
// not here.
func (f *FSM) WalkLive(begin func(n int), fn func(KeyState)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	for name, e := range f.keys.all() {
		if e.state == Held && f.shapeOf(name) == nil {
			n++
		}
	}
	begin(n)
	for name, e := range f.keys.all() {
		if e.state == Held && f.shapeOf(name) == nil {
			fn(f.keyState(name, e))
		}
	}
}

// LockDelayed returns every expired key whose lock-delay is not recorded
// as ended (DelayEnd), and every delayed slot of a permit or a shared
// grant (with its Limit or Shared set): what a new leader keeps for a full
// lock-delay.
func (f *FSM) LockDelayed() []KeyState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []KeyState
	for name, e := range f.keys.all() {
		if e.state == Expired && e.delayMs > 0 {
			out = append(out, f.keyState(name, e))
		}
	}
	return append(out, f.allSlotDelays()...)
}

// Len returns the number of keys ever granted.
func (f *FSM) Len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.keys.len()
}

// Members returns the known HTTP address of each member by server ID.
func (f *FSM) Members() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]string, len(f.members))
	for id, a := range f.members {
		out[id] = a
	}
	return out
}

// Member returns the HTTP address recorded for member id, or "". Unlike
// Members it copies nothing: every HTTP answer names the leader's address.
func (f *FSM) Member(id string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.members[id]
}

// ClusterID returns the ID the cluster's first leader recorded.
func (f *FSM) ClusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.clusterID
}

// Floor returns the epoch floor.
func (f *FSM) Floor() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.floor
}

// MaxEpoch returns the highest epoch of any key's last grant.
func (f *FSM) MaxEpoch() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var m uint64
	for _, e := range f.keys.all() {
		m = max(m, e.token.Epoch())
	}
	return m
}

// Applied returns the index of the last entry applied.
func (f *FSM) Applied() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// WaitApplied blocks until the entry at index has been applied or ctx ends.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	if f.appliedFast.Load() >= index {
		return nil
	}
	for {
		f.mu.Lock()
		if f.applied >= index {
			f.mu.Unlock()
			return nil
		}
		f.waiting = true
		ch := f.notify
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
