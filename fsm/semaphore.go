package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/fence"
)

// typeSemAcquire is the command type of an Acquire with a Limit: a request
// for one of a semaphore key's permits.
const typeSemAcquire byte = 13

// typeSharedAcquire is the command type of an Acquire with Shared set: a
// request for a shared grant of a key.
const typeSharedAcquire byte = 14

// MaxLimit is the most permits a semaphore key may have live at once, and
// the most shared grants of a key.
const MaxLimit = 1024

// ErrLimitMismatch: the key has live grants made with another limit (a
// plain lock has limit 0 here). The key's shape is set by its first live
// grant and holds while any grant of it is live; see LimitMismatchError.
var ErrLimitMismatch = errors.New("the key is held with another limit")

// LimitMismatchError names the key's limit. errors.Is(err,
// ErrLimitMismatch) is true.
type LimitMismatchError struct {
	Key string
	// Limit is the limit of the key's live grants; 0 means a plain lock
	// (an exclusive grant), or shared grants when Shared is set.
	Limit  int
	Shared bool
}

func (e *LimitMismatchError) Error() string {
	if e.Shared {
		return fmt.Sprintf("key %q has shared grants, not a semaphore's permits", e.Key)
	}
	if e.Limit == 0 {
		return fmt.Sprintf("key %q is held as a lock, not a semaphore", e.Key)
	}
	return fmt.Sprintf("key %q is held as a semaphore of limit %d", e.Key, e.Limit)
}

// Is makes errors.Is(err, ErrLimitMismatch) true.
func (e *LimitMismatchError) Is(target error) bool { return target == ErrLimitMismatch }

// semaphore is the side record of a key with live permits: its limit and
// its live permits in token (grant) order. A key with live shared grants
// has one too, with shared set and limit 0 (at most MaxLimit of them). The key's entry in the key table
// stays what it is for every key, the key's last grant (its high-water
// mark), which is the last permit while that one is live; so a key that is
// not a semaphore pays nothing for them, and every rule that reads the
// high-water mark (nextToken, Reclaim's epoch check, MaxEpoch) reads the
// same field as for a lock.
type semaphore struct {
	limit   int
	shared  bool
	permits []KeyState
}

// capacity is the most grants s may have live.
func (s *semaphore) capacity() int {
	if s.shared {
		return MaxLimit
	}
	return s.limit
}

// mismatch is the refusal of an acquire of another shape than s's.
func (s *semaphore) mismatch(key string) *LimitMismatchError {
	return &LimitMismatchError{Key: key, Limit: s.limit, Shared: s.shared}
}

// stamp marks a grant of s as one of its permits (or shared grants).
func (s *semaphore) stamp(k KeyState) KeyState {
	k.Limit, k.Shared = uint16(s.limit), s.shared
	return k
}

// byToken returns the position of the permit with token tok, or -1.
func (s *semaphore) byToken(tok fence.Token) int {
	for i := range s.permits {
		if s.permits[i].Token == tok {
			return i
		}
	}
	return -1
}

// byHolder returns the position of holder's permit, or -1.
func (s *semaphore) byHolder(holder string) int {
	for i := range s.permits {
		if s.permits[i].Holder == holder {
			return i
		}
	}
	return -1
}

// encodePermit writes an Acquire with a Limit: type 13, every field of the
// acquire and the limit last; with Shared, type 14, the same fields (a
// shared acquire with a limit is invalid, refused when applied). Version 1
// has no lock-delay; version 2, the same layout, has one: a node that
// does not know a permit's lock-delay (it refused one as invalid) stops at
// such an entry instead of applying it differently from the others.
func (c Acquire) encodePermit(b []byte) []byte {
	typ, version := typeSemAcquire, version1
	if c.Shared {
		typ = typeSharedAcquire
	}
	if c.LockDelay != 0 {
		version = version2
	}
	b = append(b, typ, version)
	b = appendString(b, c.Key)
	b = appendString(b, c.Holder)
	b = binary.AppendUvarint(b, uint64(c.TTL))
	b = appendString(b, c.RequestID)
	b = binary.AppendUvarint(b, uint64(c.LockDelay))
	b = appendString(b, c.Value)
	return binary.AppendUvarint(b, uint64(c.Limit))
}

// permitAcquire decodes the body of a type-13 entry, or of a type-14 one
// (shared). A limit of 0 in type 13 is the encoding of a plain acquire
// (type 1), so it is refused here: one command, one encoding; so is a
// lock-delay in version 1 and none in version 2.
func (d *decoder) permitAcquire(shared bool, version byte) Acquire {
	a := Acquire{Key: d.str(), Holder: d.str(), TTL: time.Duration(d.int64()), RequestID: d.str(), LockDelay: time.Duration(d.int64()), Value: d.str(), Shared: shared}
	limit := d.uvarint()
	if d.err == nil && (limit == 0 && !shared || limit > 1<<31-1) {
		d.fail("limit")
	}
	if d.err == nil && (a.LockDelay != 0) != (version == version2) {
		d.fail("lock-delay")
	}
	a.Limit = int(limit)
	return a
}

// shapeOf returns the semaphore record of key, nil for a key without live
// permits. A state that never had one pays a nil check.
func (f *FSM) shapeOf(key string) *semaphore {
	if f.sems == nil {
		return nil
	}
	return f.sems[key]
}

// acquirePermit decides a semaphore acquire (an Acquire with a Limit). It
// follows acquire's rules, per permit:
//
//   - a request id already answered is answered with its own permit
//     (renewed) while that is live, ErrGrantEnded once it ended, never a
//     second permit;
//   - the key's shape is set by its first live grant: while any grant is
//     live, an acquire naming another limit (or any limit, on a key held
//     as a lock) is ErrLimitMismatch;
//   - a holder that has a live permit renews it (the token stays);
//   - with limit permits live, the acquire is ErrHeld, naming the oldest;
//   - otherwise a new permit, whose token is the key's next (nextToken):
//     tokens strictly increase across the permits of a key as across the
//     grants of a lock.
//
// A permit's lock-delay keeps its slot after an expiry (slotdelay.go).
func (f *FSM) acquirePermit(c Acquire, pos logPos) *Result {
	if c.Key == "" || c.Holder == "" || c.TTL < time.Millisecond || c.TTL > maxMs || c.LockDelay < 0 || c.LockDelay > maxMs || len(c.Value) > MaxValueLen ||
		(c.Limit < 1 || c.Limit > MaxLimit) && !c.Shared || c.Shared && c.Limit != 0 || c.rules != rulesCurrent {
		return &Result{Err: fmt.Errorf("%w: key, holder, a ttl of 1ms to 49 days, a lock-delay of at most 49 days and a limit of 1 to %d or shared (not both) are required", ErrInvalid, MaxLimit)}
	}
	c.TTL, c.LockDelay = c.TTL.Truncate(time.Millisecond), c.LockDelay.Truncate(time.Millisecond)
	f.tick(pos, true)
	last, exists := f.get(c.Key)
	s := f.shapeOf(c.Key)
	if r, answered := f.recallPermit(c, last, exists, s, pos); answered {
		return r
	}
	switch {
	case s == nil && exists && last.State == Held && c.Shared:
		// An exclusive grant excludes every other grant.
		return &Result{Key: last, Err: &HeldError{Key: c.Key, Holder: last.Holder, Token: last.Token}}
	case s == nil && exists && last.State == Held:
		return &Result{Key: last, Err: &LimitMismatchError{Key: c.Key}}
	case s != nil && (s.shared != c.Shared || s.limit != c.Limit):
		return &Result{Key: s.permits[0], Err: s.mismatch(c.Key)}
	case s != nil:
		if i := s.byHolder(c.Holder); i >= 0 {
			return f.renewPermit(s, i, c, pos, true)
		}
		if len(s.permits) >= s.capacity() {
			p := s.permits[0]
			return &Result{Key: p, Err: &HeldError{Key: c.Key, Holder: p.Holder, Token: p.Token}}
		}
	}
	live, capacity := 0, c.Limit
	if c.Shared {
		capacity = MaxLimit
	}
	if s != nil {
		live = len(s.permits)
	}
	if err := f.slotRefusal(c.Key, live, capacity); err != nil {
		return &Result{Key: last, Err: err}
	}
	tok, err := f.nextToken(last, exists, pos.term)
	if err != nil {
		return &Result{Key: last, Err: err}
	}
	if exists {
		// The replaced last grant's request id is remembered, as for a lock
		// (a permit still live among the others is found by it there).
		f.hist.retire(Retired{Key: c.Key, RequestID: last.RequestID, Token: last.Token, Owner: OwnerOf(last.Holder)}, f.policy(true))
	}
	k := f.putPermit(KeyState{Key: c.Key, Holder: c.Holder, Token: tok, TTL: c.TTL, State: Held, RequestID: c.RequestID, Index: pos.index, Armed: pos.index, LockDelay: c.LockDelay, Value: c.Value})
	if s == nil {
		s = &semaphore{limit: c.Limit, shared: c.Shared}
		if f.sems == nil {
			f.sems = make(map[string]*semaphore)
		}
		f.sems[c.Key] = s
	}
	k = s.stamp(k)
	s.permits = append(s.permits, k)
	return &Result{Key: k, Changed: true}
}

// recallPermit answers a semaphore acquire whose request id was already
// answered: with its own permit, renewed, while that is live; HeldError
// when the request id names another holder's permit; ErrGrantEnded when its
// permit ended. It reports false for a new request id.
func (f *FSM) recallPermit(c Acquire, last KeyState, exists bool, s *semaphore, pos logPos) (*Result, bool) {
	if c.RequestID == "" {
		return nil, false
	}
	i := -1
	if s != nil {
		for j := range s.permits {
			if s.permits[j].RequestID == c.RequestID {
				i = j
				break
			}
		}
	}
	if i < 0 {
		tok, known := last.Token, exists && last.RequestID == c.RequestID
		if !known {
			if tok, known = f.hist.lookup(c.Key, c.RequestID, KindAcquire); !known {
				return nil, false
			}
		}
		if s != nil {
			i = s.byToken(tok)
		}
		if i < 0 {
			return &Result{Key: last, Err: ErrGrantEnded}, true
		}
	}
	if p := s.permits[i]; p.Holder != c.Holder {
		return &Result{Key: p, Err: &HeldError{Key: c.Key, Holder: p.Holder, Token: p.Token}}, true
	}
	return f.renewPermit(s, i, c, pos, false), true
}

// renewPermit renews permit i of s for c (its TTL, armed index and value;
// the token stays). A new request answered with it is remembered with the
// permit's token, so its retry after the permit ended mints nothing.
func (f *FSM) renewPermit(s *semaphore, i int, c Acquire, pos logPos, newRequest bool) *Result {
	p := &s.permits[i]
	p.TTL, p.Armed, p.Value, p.LockDelay = c.TTL, pos.index, c.Value, c.LockDelay
	if last, _ := f.get(c.Key); last.Token == p.Token {
		*p = s.stamp(f.putPermit(*p))
	}
	if newRequest && c.RequestID != p.RequestID {
		f.hist.retire(Retired{Key: c.Key, RequestID: c.RequestID, Token: p.Token, Owner: OwnerOf(c.Holder)}, f.policy(true))
	}
	return &Result{Key: *p, Renewed: true, Changed: true}
}

// dropPermit ends permit i of key's semaphore s with state (Released or
// Expired) and returns it. The last grant's entry follows its permit; an
// earlier permit's request id goes to the history, as a replaced grant's
// does. The side record goes with the key's last live permit.
func (f *FSM) dropPermit(key string, s *semaphore, i int, state State) KeyState {
	p := s.permits[i]
	p.State = state
	s.permits = append(s.permits[:i:i], s.permits[i+1:]...)
	if last, _ := f.get(key); last.Token == p.Token {
		last.State = state
		f.put(last)
	} else {
		f.hist.retire(Retired{Key: key, RequestID: p.RequestID, Token: p.Token, Owner: OwnerOf(p.Holder)}, f.policy(true))
	}
	if len(s.permits) == 0 {
		delete(f.sems, key)
		if len(f.sems) == 0 {
			f.sems = nil
		}
	}
	return p
}

// permitEndable is endable for a key with live permits: the permit named
// by the release's token. A token that is no live permit is the key's ended
// last grant (answered as for a lock) or stale.
func (f *FSM) permitEndable(s *semaphore, c Release) (KeyState, bool, error) {
	i := s.byToken(c.Token)
	if i < 0 {
		last, _ := f.get(c.Key)
		if c.Token == last.Token {
			switch last.State {
			case Released:
				return last, false, nil
			case Expired:
				return last, false, ErrExpired
			}
		}
		return last, false, ErrStaleToken
	}
	if p := s.permits[i]; !c.Force && c.Holder != p.Holder {
		return p, false, ErrNotHolder
	}
	return s.permits[i], true, nil
}

// expirePermit is expire for a key with live permits: the permit with the
// expiry's token ends, unless it was renewed since the expiry was decided.
func (f *FSM) expirePermit(s *semaphore, c Expire) *Result {
	i := s.byToken(c.Token)
	if i < 0 || s.permits[i].Armed != c.Armed {
		last, _ := f.get(c.Key)
		return &Result{Key: last}
	}
	p := f.dropPermit(c.Key, s, i, Expired)
	f.delaySlot(p)
	return &Result{Key: p, Changed: true}
}

// touchPermit is a Touch of one permit: it is armed at the entry's index.
func (f *FSM) touchPermit(s *semaphore, tk TouchKey, index uint64) (KeyState, bool) {
	i := s.byToken(tk.Token)
	if i < 0 {
		return KeyState{}, false
	}
	p := &s.permits[i]
	p.Armed = index
	if last, _ := f.get(tk.Key); last.Token == p.Token {
		last.Armed = index
		f.put(last)
	}
	return *p, true
}

// Permits returns a semaphore key's limit and its live permits, in token
// order (copies); 0 and nil for a key without live permits.
func (f *FSM) Permits(key string) (limit int, permits []KeyState) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.shapeOf(key)
	if s == nil {
		return 0, nil
	}
	return s.limit, append([]KeyState(nil), s.permits...)
}

// Shape returns what a listing shows of a key's live permits or shared
// grants: the key's limit (0 for shared grants), whether they are shared,
// and how many are live; live is 0 for a lock. It copies nothing, so a page
// of keys costs a lookup each.
func (f *FSM) Shape(key string) (limit int, shared bool, live int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.shapeOf(key)
	if s == nil {
		return 0, false, 0
	}
	return s.limit, s.shared, len(s.permits)
}

// WalkPermits calls begin with the number of live permits of every
// semaphore key, then fn with each of them, under the state machine's read
// lock (as WalkLive, which yields no semaphore key).
func (f *FSM) WalkPermits(begin func(n int), fn func(KeyState)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	for _, s := range f.sems {
		n += len(s.permits)
	}
	begin(n)
	for _, s := range f.sems {
		for _, p := range s.permits {
			fn(p)
		}
	}
}

// Semaphore is a key's live permits, as a snapshot holds them.
type Semaphore struct {
	Key string
	// Limit is the semaphore's limit; 0 for a key's shared grants (at most
	// MaxLimit of them).
	Limit int
	// Permits are the live permits in token order; each has State Held and
	// Limit set.
	Permits []KeyState
}

// semaphores copies the side records, in key order. The caller holds f.mu.
func (f *FSM) semaphores() []Semaphore {
	if len(f.sems) == 0 {
		return nil
	}
	out := make([]Semaphore, 0, len(f.sems))
	for key, s := range f.sems {
		out = append(out, Semaphore{Key: key, Limit: s.limit, Permits: append([]KeyState(nil), s.permits...)})
	}
	sortSemaphores(out)
	return out
}

func boolUint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// sortSemaphores puts the side records in key order.
func sortSemaphores(sems []Semaphore) {
	slices.SortFunc(sems, func(a, b Semaphore) int { return strings.Compare(a.Key, b.Key) })
}

// appendSemaphores writes the snapshot's semaphore section (version 5):
// the count, then each key in key order with its limit and its live
// permits in token order.
func appendSemaphores(b []byte, sems []Semaphore) []byte {
	b = binary.AppendUvarint(b, uint64(len(sems)))
	for _, s := range sems {
		b = appendString(b, s.Key)
		b = binary.AppendUvarint(b, uint64(s.Limit))
		b = binary.AppendUvarint(b, uint64(len(s.Permits)))
		for _, p := range s.Permits {
			b = appendString(b, p.Holder)
			b = binary.AppendUvarint(b, uint64(p.Token))
			b = binary.AppendUvarint(b, uint64(p.TTL))
			b = appendString(b, p.RequestID)
			b = binary.AppendUvarint(b, p.Index)
			b = binary.AppendUvarint(b, p.Armed)
			b = appendString(b, p.Value)
		}
	}
	return b
}

// Smallest records of the semaphore section, for counts read from it: a
// key (its length and a byte), a limit and a count; a permit's eight
// fields.
const (
	minSemRecord    = 4
	minPermitRecord = 8
)

// semaphores decodes the semaphore section. An empty one is refused in
// version 5: a state without live permits is written in an older version.
func (d *decoder) semaphores(version byte) []Semaphore {
	n := d.count(minSemRecord)
	// Version 5 is written only for live permits; a later version carries
	// the section whatever it holds.
	if d.err == nil && n == 0 && version == snapVersion5 {
		d.fail("empty semaphore section")
	}
	if n == 0 {
		return nil
	}
	out := make([]Semaphore, 0, d.sized(n))
	for i := uint64(0); i < n && d.err == nil; i++ {
		s := Semaphore{Key: d.str()}
		limit := d.uvarint()
		m := d.count(minPermitRecord)
		if d.err == nil && (limit > MaxLimit || m < 1 || m > max(limit, MaxLimit*boolUint(limit == 0))) {
			d.fail("semaphore record")
			break
		}
		s.Limit = int(limit)
		s.Permits = make([]KeyState, 0, d.sized(m))
		for j := uint64(0); j < m && d.err == nil; j++ {
			s.Permits = append(s.Permits, KeyState{Key: s.Key, Holder: d.str(), Token: fence.Token(d.uvarint()), TTL: time.Duration(d.int64()), State: Held,
				RequestID: d.str(), Index: d.uvarint(), Armed: d.uvarint(), Value: d.str(), Limit: uint16(s.Limit), Shared: s.Limit == 0})
		}
		out = append(out, s)
	}
	return out
}

// checkSemaphores checks a snapshot's semaphores against its keys (last
// returns a key's last grant): only what Apply could have produced. Keys in
// strictly increasing order, each a key of the snapshot; 1 to limit
// permits, of distinct holders, tokens strictly increasing and none above
// the key's last grant; the last permit is the key's last grant exactly
// when that grant is held.
func checkSemaphores(sems []Semaphore, last func(key string) (KeyState, bool)) bool {
	for i, s := range sems {
		k, ok := last(s.Key)
		if !ok || i > 0 && s.Key <= sems[i-1].Key || s.Limit < 0 || s.Limit > MaxLimit || len(s.Permits) == 0 || len(s.Permits) > (&semaphore{limit: s.Limit, shared: s.Limit == 0}).capacity() {
			return false
		}
		holders := make(map[string]bool, len(s.Permits))
		for j, p := range s.Permits {
			if p.Holder == "" || holders[p.Holder] || p.Token.Seq() == 0 || p.Token > k.Token || j > 0 && p.Token <= s.Permits[j-1].Token ||
				p.TTL < time.Millisecond || p.TTL > maxMs || p.TTL%time.Millisecond != 0 || len(p.Value) > MaxValueLen {
				return false
			}
			holders[p.Holder] = true
		}
		lp := s.Permits[len(s.Permits)-1]
		switch {
		case k.State != Held && lp.Token >= k.Token:
			return false
		case k.State == Held && (lp.Token != k.Token || lp.Holder != k.Holder || lp.RequestID != k.RequestID || lp.TTL != k.TTL ||
			lp.Index != k.Index || lp.Armed != k.Armed || lp.Value != k.Value || k.LockDelay != 0):
			return false
		}
	}
	return true
}

// loadSemaphores builds the side records from checked snapshot records.
func loadSemaphores(sems []Semaphore) map[string]*semaphore {
	if len(sems) == 0 {
		return nil
	}
	out := make(map[string]*semaphore, len(sems))
	for _, s := range sems {
		out[s.Key] = &semaphore{limit: s.Limit, shared: s.Limit == 0, permits: append([]KeyState(nil), s.Permits...)}
	}
	return out
}

// WalkGrants is WalkLive and WalkPermits under one hold of the lock: begin
// hears the number of every live grant, locks' and permits', and fn each
// (a permit with its Limit set). A new leader re-arms its leases with it.
func (f *FSM) WalkGrants(begin func(n int), fn func(KeyState)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	for name, e := range f.keys.all() {
		if e.state == Held && f.shapeOf(name) == nil {
			n++
		}
	}
	for _, s := range f.sems {
		n += len(s.permits)
	}
	begin(n)
	for name, e := range f.keys.all() {
		if e.state == Held && f.shapeOf(name) == nil {
			fn(f.keyState(name, e))
		}
	}
	for _, s := range f.sems {
		for _, p := range s.permits {
			fn(p)
		}
	}
}

// Lookup returns a key's last grant and, for a key with live permits, its
// limit and permits (copies), under one hold of the lock: a verify reads a
// lock's grant as Get does, and a semaphore's permits with it.
func (f *FSM) Lookup(key string) (last KeyState, exists bool, limit int, permits []KeyState) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	last, exists = f.get(key)
	if s := f.shapeOf(key); s != nil {
		limit, permits = s.limit, append([]KeyState(nil), s.permits...)
	}
	return last, exists, limit, permits
}

// EndPermits ends every live permit of the image, as a restore from backup
// ends every live grant (the restored cluster's leader has no lease of
// them): the side records go, each key's last grant is left to the caller
// (it is a key like any other), and the request id of each permit that is
// not its key's last grant joins the history at the image's log time, so a
// retry of it is answered that its grant ended instead of minting another.
// A permit with a lock-delay leaves its slot delayed, as its expiry would.
// It returns the number of permits ended that were not a key's last grant.
func (img *Image) EndPermits() int {
	if len(img.Semaphores) == 0 {
		return 0
	}
	known := make(map[retiredID]bool, len(img.Retired))
	for _, r := range img.Retired {
		known[retiredID{r.Key, r.RequestID, r.Kind}] = true
	}
	ended := 0
	img.sort()
	for _, s := range img.Semaphores {
		for _, p := range s.Permits {
			img.delaySlot(p)
			if i, found := slices.BinarySearchFunc(img.Keys, p.Key, func(k KeyState, key string) int { return strings.Compare(k.Key, key) }); found && img.Keys[i].Token == p.Token {
				continue // the key's last grant: its entry stays
			}
			ended++
			if id := (retiredID{p.Key, p.RequestID, KindAcquire}); p.RequestID != "" && !known[id] {
				known[id] = true
				img.Retired = append(img.Retired, Retired{Key: p.Key, RequestID: p.RequestID, Token: p.Token, At: img.Clock, Kind: KindAcquire, Owner: OwnerOf(p.Holder)})
			}
		}
	}
	img.Semaphores = nil
	img.capSlots()
	return ended
}
