package cluster

import (
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/openaddr"
)

// The leader's view of every live grant is a deadline on its monotonic
// clock. Followers keep none; a new leader re-arms every live grant for a
// full TTL, so no lease ever ends early because of an election.
//
// A million leases must cost little memory and re-arm quickly, so the table
// allocates nothing per lease: leases live in a slab of fixed-size chunks,
// addressed by int32 index; the index by key is an open-addressed table of
// slab indices, each beside 32 bits of its key's hash; the deadline heap is
// a list of slab indices; each lease links to the previous and next lease
// of its holder by index. The only pointer in a lease is its key's bytes,
// which the state machine holds.

const (
	// chunkShift sets the size of the slab's chunks: 1024 leases, 64 KiB.
	// The slab grows a chunk at a time, so it never copies leases as it
	// grows, and holds at most one chunk it does not use.
	chunkShift = 10
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1
	// maxChunks keeps every slab index, and every index plus one (as the
	// key index keeps it), an int32.
	maxChunks = (math.MaxInt32 - 1) >> chunkShift
	// none ends a list, and marks a free slab slot (as its holder).
	none int32 = -1
	// activateBatch is how many grants activate hashes at a time.
	activateBatch = 64
	// minIndex is the smallest size of the key index.
	minIndex = 16
)

// leaseRec is one lease: 64 bytes, one cache line.
type leaseRec struct {
	// key and keyLen are the grant's key: the string the state machine
	// holds, shared and never copied (see keyString).
	key   *byte
	token fence.Token
	armed uint64
	// deadline is when the lease ends; due is when the heap next looks at
	// it. A renewal moves only deadline, so it costs no heap work: when due
	// comes, a lease whose deadline moved goes back in at its deadline.
	// Both are nanoseconds on the table's clock (see leases.now).
	deadline, due int64
	keyLen        uint32
	// ttlMs is in whole milliseconds, as the state machine keeps it. The few
	// leases with a lock-delay keep it in leases.grantDelays.
	ttlMs uint32
	// holder is the index of the lease's holder in leases.holders; none
	// marks a free slot.
	holder int32
	// prev and next link the leases of one holder; next also links the free
	// slots.
	prev, next int32
	// slot is the lease's index in the heap.
	slot int32
}

// keyString returns the lease's key: the state machine's own string.
func (r *leaseRec) keyString() string { return unsafe.String(r.key, r.keyLen) }

func (r *leaseRec) ttl() time.Duration { return time.Duration(r.ttlMs) * time.Millisecond }

// toMs converts a duration to whole milliseconds, rounding up: a lease is
// never shorter than its grant's TTL (the state machine's durations are
// whole milliseconds already).
func toMs(d time.Duration) uint32 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return uint32(min(max(ms, 0), 1<<32-1))
}

// lockDelayOf returns the lock-delay lease i's grant was made with: how
// long its key will be kept from others if it expires. The caller holds
// l.mu.
func (l *leases) lockDelayOf(i int32) time.Duration {
	if len(l.grantDelays) == 0 {
		return 0 // most tables: no lookup on a renewal
	}
	return time.Duration(l.grantDelays[i]) * time.Millisecond
}

// holderLeases is one holder's list of leases (slab indices), and their
// number.
type holderLeases struct {
	holder string
	first  int32
	n      int32
}

// leases is the leader's lease table. It is active only while the node leads
// and is ready; one timer, armed for the earliest due lease, belongs to the
// generation (leadership term) that armed it, so a timer of a lost term can
// never propose an expiry.
type leases struct {
	log    hclog.Logger
	expire func(gen uint64, e fsm.Expire, lockDelay time.Duration)
	// takeoverAt, if set, returns when this node applied the first
	// takeover after a log index (takeovers.after): a re-armed lease whose
	// grant was armed before an earlier takeover runs out a full TTL after
	// that takeover, not after this one (activateAt).
	takeoverAt func(armed uint64) (time.Time, bool)
	// touchBelow is the index of this leadership's takeover barrier: a
	// lease armed at or before it is renewed through a Touch entry first
	// (renewLease). 0: never.
	touchBelow uint64
	// room, if set, says how many more expiries the proposals take now
	// (fire takes no more leases than that out of the table).
	room func() int
	// endDelay, if set, proposes the end of a lock-delay that ran out.
	endDelay func(gen uint64, e fsm.DelayEnd)
	// base is the zero of the table's clock: deadlines are kept as
	// nanoseconds since base, read from the monotonic clock.
	base time.Time
	// clock, if set, replaces the monotonic clock (tests).
	clock func() int64
	// seed keys the hash of the key index: a client cannot choose keys that
	// collide in it.
	seed maphash.Seed

	mu  sync.Mutex
	gen uint64 // 0: inactive
	// chunks are the slab of leases: lease i is chunks[i>>chunkShift][i&chunkMask].
	// Slots [0, top) hold a lease or are free, linked from free.
	chunks []*[chunkSize]leaseRec
	top    int32
	free   int32
	// n is the number of leases.
	n int
	// index finds a lease by key (internal/openaddr), by slab index. Its
	// words are 64 bits: the whole hash beside the slab index, because a
	// lease has no room left in its cache line to keep its hash, and the
	// index must find a word's home without hashing the key again. So a
	// lookup reads a lease only when its hash matches, and a removal or a
	// resize reads none.
	index openaddr.Index[uint64]
	// byHolder finds a holder's list of leases in holders; freeHolders
	// are the unused entries of holders.
	byHolder    map[string]int32
	holders     []holderLeases
	freeHolders []int32
	// under counts the live leases of the holders below each namespace:
	// for holder "a/b/c", the namespaces "a" and "a/b" (namespaceCount).
	under map[string]int
	// heap orders the leases by due, earliest first.
	heap []int32
	// timer fires at the earliest due; timerAt is when (0: stopped).
	timer   *time.Timer
	timerAt int64
	// keyDelays holds the lock-delay in force on each key after an
	// expiry; delayQ orders their ends for the one timer of all of them,
	// delayTimer, armed for delayTimerAt (0: stopped). See delays.go.
	keyDelays map[string]keyDelay
	// slotDelays holds the lock-delays in force on the slots of permits
	// and shared grants that expired, per key and token: a semaphore
	// counts them against its limit, and an exclusive grant waits for all
	// of them (delays.go).
	slotDelays map[string]map[fence.Token]int64
	// reproposed is when the end of a slot's delay that the state still
	// records was last proposed again, by lease name (reproposeDue).
	reproposed   map[string]int64
	delayQ       delayQueue
	delayTimer   *time.Timer
	delayTimerAt int64
	// grantDelays holds the lock-delay (ms) of the leases whose grant has
	// one, by slab index; freeing a slot drops its entry.
	grantDelays map[int32]uint32
}

func newLeases(log hclog.Logger, expire func(gen uint64, e fsm.Expire, lockDelay time.Duration), endDelay func(gen uint64, e fsm.DelayEnd)) *leases {
	l := &leases{log: log, expire: expire, endDelay: endDelay, base: time.Now(), seed: maphash.MakeSeed()}
	l.resetLocked()
	l.keyDelays = map[string]keyDelay{}
	l.slotDelays = map[string]map[fence.Token]int64{}
	return l
}

// now returns the table's clock.
func (l *leases) now() int64 {
	if l.clock != nil {
		return l.clock()
	}
	return int64(time.Since(l.base))
}

// at converts a time of the table's clock to a time.Time (with its
// monotonic reading, so comparisons with time.Now stay monotonic).
func (l *leases) at(t int64) time.Time { return l.base.Add(time.Duration(t)) }

// walkFunc walks the live grants: begin hears their number, fn each one
// (fsm.FSM.WalkLive).
type walkFunc func(begin func(n int), fn func(fsm.KeyState))

// activate arms a full TTL for every live grant that walk yields, from now,
// for generation gen, and a full lock-delay for every expired grant whose
// delay the log does not record as ended: a new leader cannot know when an
// expiry happened, so it assumes just now. The table is filled straight
// from the walk, into a slab, index and heap sized for the walk's count:
// nothing is allocated per lease.
func (l *leases) activate(gen uint64, walk walkFunc, lockDelayed []fsm.KeyState) {
	l.activateFrom(gen, time.Time{}, walk, lockDelayed)
}

// activateFrom is activate with every TTL and lock-delay counted from
// from, when that is later than now: a new leader re-arms while it waits
// out its takeover (renewal.go), and its leases must run a full TTL from
// the end of that wait, as if it had re-armed them then.
func (l *leases) activateFrom(gen uint64, from time.Time, walk walkFunc, lockDelayed []fsm.KeyState) {
	l.activateAt(gen, from, 0, walk, lockDelayed)
}

// activateAt is activateFrom for the leadership whose takeover barrier is
// at index barrier (0: none known, every lease gets a full TTL and no
// renewal needs a touch). With takeoverAt set, a lease whose grant was
// armed before an earlier takeover ends a full TTL (and the takeover wait)
// after this node applied that takeover, if that is sooner: no leader
// since then renewed it without a Touch entry, so its holder's last
// acknowledged renewal came before that takeover's barrier plus
// renewWindow (cluster/DESIGN.md, "Re-arming after an election").
func (l *leases) activateAt(gen uint64, from time.Time, barrier uint64, walk walkFunc, lockDelayed []fsm.KeyState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopLocked()
	l.gen = gen
	l.touchBelow = barrier
	cut := 0
	start := l.now()
	now := start
	if !from.IsZero() {
		now = max(now, int64(from.Sub(l.base)))
	}
	// The walk's grants are armed in batches, their keys hashed first: the
	// hashes read keys from all over the state machine's memory, and a
	// batch lets those reads overlap instead of waiting for each in turn.
	var batch [activateBatch]fsm.KeyState
	var hs [activateBatch]uint32
	nb := 0
	// The table is empty: the leases go into the slab without a probe of
	// the index each, and the index is built once after them (openaddr's
	// InsertAll, a stretch of it at a time), where a probe per lease took a
	// cache miss each, a third of the re-arm.
	var pairs []uint64
	reserve := func(n int) {
		l.reserveLocked(n)
		pairs = make([]uint64, 0, n)
	}
	flush := func() {
		for j := range batch[:nb] {
			hs[j] = l.hash(batch[j].Key)
		}
		for j := range batch[:nb] {
			i := l.appendLocked(batch[j], now) // the heap is put in order below
			pairs = append(pairs, openaddr.Pair(hs[j], uint32(i)))
			if barrier != 0 && l.takeoverAt != nil && l.shortenLocked(i, batch[j].Armed) {
				cut++
			}
		}
		clear(batch[:nb]) // no grant's strings kept past the walk
		nb = 0
	}
	walk(reserve, func(k fsm.KeyState) {
		batch[nb] = k
		if nb++; nb == len(batch) {
			flush()
		}
	})
	flush()
	if !l.index.Fits(len(pairs)) {
		l.index.Reset(openaddr.SizeFor(len(pairs), minIndex))
	}
	// The state machine's walk names each grant once; a walk that names a
	// key twice (a list, in tests) keeps the later grant's lease, as
	// insertLocked would.
	var dropped []int32
	l.index.InsertAll(pairs, func(a, b uint32) bool {
		if l.rec(int32(a)).keyString() != l.rec(int32(b)).keyString() {
			return false
		}
		dropped = append(dropped, int32(a))
		return true
	})
	for _, i := range dropped {
		l.dropLocked(i)
	}
	// One heapify for all of them: O(n), where n pushes are O(n log n).
	for i := len(l.heap)/2 - 1; i >= 0; i-- {
		l.down(i)
	}
	l.resetTimerLocked()
	for _, k := range lockDelayed {
		l.startDelayLocked(leaseOf(k).Key, k.Token, now+int64(k.LockDelay))
	}
	l.log.Info("leases re-armed", "generation", gen, "live", l.n, "counted_from_an_earlier_takeover", cut,
		"took", time.Duration(l.now()-start), "from_in", time.Duration(now-start))
}

// shortenLocked ends lease i, armed at log index armed, a full TTL and the
// takeover wait after the first takeover since armed, when that is before
// its deadline; it reports whether it did.
func (l *leases) shortenLocked(i int32, armed uint64) bool {
	at, ok := l.takeoverAt(armed)
	if !ok {
		return false
	}
	r := l.rec(i)
	end := int64(at.Sub(l.base)) + int64(takeoverWait) + int64(r.ttl())
	if end >= r.deadline {
		return false
	}
	r.deadline, r.due = end, end
	return true
}

// reserveLocked sizes an empty table for n leases.
func (l *leases) reserveLocked(n int) {
	n = max(n, 0)
	chunks := min((n+chunkMask)>>chunkShift, maxChunks)
	l.chunks = make([]*[chunkSize]leaseRec, chunks)
	for c := range l.chunks {
		l.chunks[c] = new([chunkSize]leaseRec)
	}
	l.index.Reset(openaddr.SizeFor(n, minIndex))
	l.heap = make([]int32, 0, n)
}

// deactivate stops the timer and forgets every lease at once: a node that
// no longer leads must not propose expiries or answer renewals.
func (l *leases) deactivate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopLocked()
	l.gen = 0
}

// deactivateGen deactivates the table only if generation gen armed it: a
// newer generation's table is left alone.
func (l *leases) deactivateGen(gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen == gen {
		l.stopLocked()
		l.gen = 0
	}
}

func (l *leases) stopLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.timerAt = 0
	l.resetLocked()
	l.stopDelaysLocked()
}

// resetLocked forgets every lease and releases the memory of the table.
func (l *leases) resetLocked() {
	l.chunks, l.top, l.free, l.n = nil, 0, none, 0
	l.index.Reset(0)
	l.byHolder = map[string]int32{}
	l.holders, l.freeHolders = nil, nil
	l.under = map[string]int{}
	l.heap = nil
	l.grantDelays = map[int32]uint32{}
}

// granted arms (or re-arms, for a renewal by acquire) the lease of a grant.
func (l *leases) granted(k fsm.KeyState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen != 0 {
		l.armLocked(k)
	}
}

// ended forgets the lease of a grant that was released or expired.
func (l *leases) ended(k fsm.KeyState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := l.lookup(k.Key); i != none && l.rec(i).token == k.Token {
		l.removeLocked(i)
		l.shrinkLocked()
	}
	if l.gen != 0 && k.State == fsm.Expired && k.LockDelay > 0 {
		l.startDelayLocked(k.Key, k.Token, l.now()+int64(k.LockDelay))
	}
}

func (l *leases) armLocked(k fsm.KeyState) {
	i := l.insertLocked(k, l.now())
	r := l.rec(i)
	l.up(int(r.slot))
	if r.slot == 0 {
		l.resetTimerLocked()
	}
}

// rec returns lease i. The caller holds l.mu; the pointer is good until the
// slab is compacted (shrinkLocked).
func (l *leases) rec(i int32) *leaseRec { return &l.chunks[i>>chunkShift][i&chunkMask] }

func (l *leases) hash(key string) uint32 { return uint32(maphash.String(l.seed, key)) }

// find returns the lease of key (none if there is none), its key's hash,
// and its place in the index: where it is, or where it would go.
func (l *leases) find(key string) (uint32, uint32, int32) {
	return l.findHashed(key, l.hash(key))
}

// findHashed is find, for a key whose hash is h.
func (l *leases) findHashed(key string, h uint32) (uint32, uint32, int32) {
	if l.index.Size() == 0 {
		return 0, h, none
	}
	for p := l.index.Home(h); ; p = l.index.After(p) {
		var ok bool
		if p, ok = l.index.Scan(h, p); !ok {
			return p, h, none
		}
		// The word matched the whole hash: the key decides.
		if i := int32(l.index.Ref(p)); l.rec(i).keyString() == key {
			return p, h, i
		}
	}
}

// lookup returns the lease of key, or none.
func (l *leases) lookup(key string) int32 {
	_, _, i := l.find(key)
	return i
}

// unindex takes lease i, of key, out of the index. The index's words carry
// their hashes, so it asks for none.
func (l *leases) unindex(key string, i int32) {
	l.index.Delete(l.index.Locate(l.hash(key), uint32(i)), nil)
}

// resizeLocked rebuilds the index at size words, from its own words.
func (l *leases) resizeLocked(size int) { l.index.Resize(size, nil) }

// reindexLocked rebuilds the index at size words, from the slab: after a
// compaction, which moved leases.
func (l *leases) reindexLocked(size int) {
	l.index.Reset(size)
	for i := int32(0); i < l.top; i++ {
		if r := l.rec(i); r.holder != none {
			l.index.Insert(l.hash(r.keyString()), uint32(i))
		}
	}
}

// allocLocked returns a free slab slot: a freed one first.
func (l *leases) allocLocked() int32 {
	if i := l.free; i != none {
		l.free = l.rec(i).next
		return i
	}
	if int(l.top) == len(l.chunks)*chunkSize {
		if len(l.chunks) >= maxChunks {
			// Two billion leases cannot be: the state machine would need
			// hundreds of gigabytes to hold their grants.
			panic("cluster: lease table full")
		}
		l.chunks = append(l.chunks, new([chunkSize]leaseRec))
	}
	l.top++
	return l.top - 1
}

// freeLocked returns slot i to the free list, cleared: a lease that takes
// the slot later inherits nothing, its lock-delay included.
func (l *leases) freeLocked(i int32) {
	if len(l.grantDelays) != 0 {
		delete(l.grantDelays, i)
	}
	*l.rec(i) = leaseRec{holder: none, prev: none, next: l.free, slot: none}
	l.free = i
	l.n--
}

// insertLocked arms the lease of k, due a TTL after now, in place of any
// lease of its key, and appends it to the heap without restoring the
// heap's order.
func (l *leases) insertLocked(k fsm.KeyState, now int64) int32 {
	return l.insertHashedLocked(k, l.hash(k.Key), now)
}

// insertHashedLocked is insertLocked, for a key whose hash is h.
func (l *leases) insertHashedLocked(k fsm.KeyState, h uint32, now int64) int32 {
	if uint64(len(k.Key)) > math.MaxUint32 {
		// A raft log entry holds the key: it cannot be this long.
		panic("cluster: key too long for the lease table")
	}
	if !l.index.Fits(l.n + 1) {
		l.resizeLocked(openaddr.SizeFor(l.n+1, minIndex))
	}
	p, _, old := l.findHashed(k.Key, h)
	if old != none {
		l.removeLocked(old)
		p, _, _ = l.findHashed(k.Key, h)
	}
	i := l.appendLocked(k, now)
	l.index.Set(p, h, uint32(i))
	return i
}

// appendLocked arms the lease of k, due a TTL after now, in a free slot,
// its holder's list and at the heap's end, and leaves the index to the
// caller, as the heap's order: insertLocked, or activate's bulk build.
func (l *leases) appendLocked(k fsm.KeyState, now int64) int32 {
	if uint64(len(k.Key)) > math.MaxUint32 {
		// A raft log entry holds the key: it cannot be this long.
		panic("cluster: key too long for the lease table")
	}
	i := l.allocLocked()
	r := l.rec(i)
	*r = leaseRec{key: unsafe.StringData(k.Key), keyLen: uint32(len(k.Key)), token: k.Token, armed: k.Armed,
		ttlMs: toMs(k.TTL), prev: none, slot: int32(len(l.heap))}
	r.deadline = now + int64(r.ttl())
	r.due = r.deadline
	if len(l.heap) == cap(l.heap) {
		l.heap = slices.Grow(l.heap, max(len(l.heap), 16)) // doubling: no 1.25x steps
	}
	l.heap = append(l.heap, i)
	hi, ok := l.byHolder[k.Holder]
	if !ok {
		hi = l.newHolderLocked(k.Holder)
	}
	hl := &l.holders[hi]
	r.holder, r.next = hi, hl.first
	if hl.first != none {
		l.rec(hl.first).prev = i
	}
	hl.first = i
	hl.n++
	l.n++
	l.countUnder(k.Holder, 1)
	if d := toMs(k.LockDelay); d > 0 {
		l.grantDelays[i] = d
	}
	return i
}

// newHolderLocked adds an empty list of leases for holder.
func (l *leases) newHolderLocked(holder string) int32 {
	var h int32
	if n := len(l.freeHolders); n > 0 {
		h = l.freeHolders[n-1]
		l.freeHolders = l.freeHolders[:n-1]
	} else {
		l.holders = append(l.holders, holderLeases{})
		h = int32(len(l.holders) - 1)
	}
	l.holders[h] = holderLeases{holder: holder, first: none}
	l.byHolder[holder] = h
	return h
}

// holderLenLocked returns the number of leases of holder.
func (l *leases) holderLenLocked(holder string) int {
	if h, ok := l.byHolder[holder]; ok {
		return int(l.holders[h].n)
	}
	return 0
}

// countUnder adds d to the count of every namespace above holder.
func (l *leases) countUnder(holder string, d int) {
	for i := 0; i < len(holder); i++ {
		if holder[i] != '/' {
			continue
		}
		ns := holder[:i]
		if l.under[ns] += d; l.under[ns] == 0 {
			delete(l.under, ns)
		}
	}
}

// removeLocked forgets lease i and frees its slot: the caller reads what it
// needs of the lease first.
func (l *leases) removeLocked(i int32) {
	l.unindex(l.rec(i).keyString(), i)
	l.dropLocked(i)
}

// dropLocked is removeLocked for a lease the index does not name.
func (l *leases) dropLocked(i int32) {
	r := l.rec(i)
	hl := &l.holders[r.holder]
	if r.prev != none {
		l.rec(r.prev).next = r.next
	} else {
		hl.first = r.next
	}
	if r.next != none {
		l.rec(r.next).prev = r.prev
	}
	holder := hl.holder
	if hl.n--; hl.n == 0 {
		delete(l.byHolder, holder)
		l.holders[r.holder] = holderLeases{first: none}
		l.freeHolders = append(l.freeHolders, r.holder)
	}
	l.countUnder(holder, -1)
	l.heapRemove(int(r.slot))
	l.freeLocked(i)
	// A stale timer only makes fire look at the heap early; it is not
	// worth a reset per removal.
}

// shrinkLocked gives memory back once the table is mostly free: the slab
// is compacted below a quarter full (then it is about full again, so a
// table that shrinks and grows does not compact each time), the index
// below a sixteenth full, the heap's list below a quarter. Slab indices
// change: nothing may hold one across a call.
func (l *leases) shrinkLocked() {
	if len(l.chunks) > 1 && l.n*4 < len(l.chunks)*chunkSize {
		l.compactLocked()
	}
	if l.index.Size() > minIndex && l.n*16 < l.index.Size() {
		l.resizeLocked(openaddr.SizeFor(2*l.n, minIndex))
	}
	if cap(l.heap) > 64 && len(l.heap)*4 < cap(l.heap) {
		l.heap = slices.Clip(append(make([]int32, 0, 2*len(l.heap)), l.heap...))
	}
	if len(l.byHolder) == 0 && cap(l.holders) > 64 {
		l.holders, l.freeHolders = nil, nil
	}
}

// compactLocked moves every lease into the slab's first chunks, as few as
// hold them, and releases the others.
func (l *leases) compactLocked() {
	keep := max((l.n+chunkMask)>>chunkShift, 1)
	limit := min(int32(keep*chunkSize), l.top)
	// The free slots below limit take the leases above it.
	holes := none
	for i := l.free; i != none; {
		next := l.rec(i).next
		if i < limit {
			l.rec(i).next = holes
			holes = i
		}
		i = next
	}
	for j := limit; j < l.top; j++ {
		if l.rec(j).holder == none {
			continue
		}
		h := holes
		holes = l.rec(h).next
		l.moveLocked(j, h)
	}
	l.free, l.top = holes, limit
	clear(l.chunks[keep:])
	l.chunks = l.chunks[:keep]
	l.reindexLocked(openaddr.SizeFor(2*l.n, minIndex))
}

// moveLocked moves lease j to the free slot i.
func (l *leases) moveLocked(j, i int32) {
	r := l.rec(i)
	*r = *l.rec(j)
	l.heap[r.slot] = i
	if r.prev != none {
		l.rec(r.prev).next = i
	} else {
		l.holders[r.holder].first = i
	}
	if r.next != none {
		l.rec(r.next).prev = i
	}
	if d, ok := l.grantDelays[j]; ok {
		delete(l.grantDelays, j)
		l.grantDelays[i] = d
	}
	*l.rec(j) = leaseRec{}
}

// resetTimerLocked arms the timer for the earliest due lease, unless it is
// already armed for that moment or earlier (fire then re-arms it).
func (l *leases) resetTimerLocked() {
	if len(l.heap) > 0 {
		l.armEarliestLocked(&l.timer, &l.timerAt, l.rec(l.heap[0]).due, l.fire)
	}
}

// armEarliestLocked arms *t to run fire at due, unless *at says it is armed
// for that moment or earlier already. A new timer belongs to the table's
// current generation: fire hears that generation, so a timer of a lost
// term proposes nothing in a later one's name.
func (l *leases) armEarliestLocked(t **time.Timer, at *int64, due int64, fire func(gen uint64)) {
	if *t != nil && *at != 0 && *at <= due {
		return
	}
	wait := time.Duration(due - l.now())
	if *t == nil {
		gen := l.gen
		*t = time.AfterFunc(wait, func() { fire(gen) })
	} else {
		(*t).Reset(wait)
	}
	*at = due
}

// fireChunk bounds the leases one pass of fire takes out of the table
// under its lock: a million leases due at once are taken a chunk at a
// time, and renewals and grants get the lock in between.
const fireChunk = 4096

// fire runs when the timer ends: every lease whose deadline passed is
// forgotten and its expiry handed to expire; a lease that a renewal moved
// goes back in the heap at its new deadline. It takes no more leases than
// room (when set) says the proposals have room for: the others stay in the
// table, past their deadline (no renewal succeeds then), until the
// proposals catch up and call fire again.
func (l *leases) fire(gen uint64) {
	for {
		ends, more := l.takeDue(gen)
		for _, x := range ends {
			l.expire(gen, x.e, x.lockDelay)
		}
		if !more {
			return
		}
	}
}

// ending is a lease whose deadline passed, on its way to the log.
type ending struct {
	e         fsm.Expire
	lockDelay time.Duration
}

// takeDue takes up to a chunk of the leases whose deadline passed out of
// the table, and reports whether more are due that there is room for.
func (l *leases) takeDue(gen uint64) (ends []ending, more bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen != gen || l.timer == nil {
		return nil, false
	}
	l.timerAt = 0
	limit := fireChunk
	if l.room != nil {
		limit = min(limit, l.room())
	}
	now := l.now()
	for len(l.heap) > 0 {
		i := l.heap[0]
		r := l.rec(i)
		if r.due > now {
			break
		}
		if r.deadline > now {
			// A renewal moved the deadline after this lease was due.
			r.due = r.deadline
			l.down(0)
			continue
		}
		if len(ends) >= limit {
			if limit < fireChunk {
				// No room: the proposals call fire again when they have
				// some; a timer now would only find none.
				l.shrinkLocked()
				return ends, false
			}
			more = true
			break
		}
		// A permit's lease is named apart from its key (permits.go); its
		// expiry names the key, and the state machine finds the permit by
		// its token.
		name := r.keyString()
		e := fsm.Expire{Key: grantKey(name), Token: r.token, Armed: r.armed}
		lockDelay := l.lockDelayOf(i)
		l.removeLocked(i)
		if lockDelay > 0 {
			// The lock-delay starts now, before the expiry is proposed: once
			// the expiry is applied the key looks free, and an acquire
			// checking between that moment and ended() would find no delay
			// to honour.
			l.startDelayLocked(name, e.Token, now+int64(lockDelay))
		}
		ends = append(ends, ending{e, lockDelay})
	}
	l.shrinkLocked()
	if !more {
		l.resetTimerLocked()
	}
	return ends, more
}

// The heap: a binary min-heap of slab indices by due, each lease knowing
// its slot.

func (l *leases) less(i, j int) bool { return l.rec(l.heap[i]).due < l.rec(l.heap[j]).due }

func (l *leases) swap(i, j int) {
	h := l.heap
	h[i], h[j] = h[j], h[i]
	l.rec(h[i]).slot, l.rec(h[j]).slot = int32(i), int32(j)
}

func (l *leases) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !l.less(i, p) {
			return
		}
		l.swap(i, p)
		i = p
	}
}

func (l *leases) down(i int) {
	n := len(l.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && l.less(r, c) {
			c = r
		}
		if !l.less(c, i) {
			return
		}
		l.swap(i, c)
		i = c
	}
}

// heapRemove takes the lease at slot i out of the heap; freeLocked clears
// its own slot.
func (l *leases) heapRemove(i int) {
	last := len(l.heap) - 1
	if i != last {
		l.swap(i, last)
	}
	l.heap = l.heap[:last]
	if i != last {
		l.down(i)
		l.up(i)
	}
}

// live reports whether the grant has a live lease, and its deadline.
func (l *leases) live(key string, tok fence.Token) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.lookup(key)
	if i == none {
		return time.Time{}, false
	}
	r := l.rec(i)
	if r.token != tok || r.deadline <= l.now() {
		return time.Time{}, false
	}
	return l.at(r.deadline), true
}

// heldBy reports whether lease name is grant tok's, of holder, and live:
// a renewal of it would not be refused.
func (l *leases) heldBy(name, holder string, tok fence.Token) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.lookup(name)
	if i == none {
		return false
	}
	r := l.rec(i)
	return r.token == tok && l.holders[r.holder].holder == holder && r.deadline > l.now()
}

// renewal is what a renewal of a lease came to.
type renewal uint8

const (
	// renewRefused: no live lease of that grant and holder.
	renewRefused renewal = iota
	// renewDone: the lease runs a full TTL from now.
	renewDone
	// renewTouch: the lease is live, but armed before this leadership's
	// takeover: it is renewed only through a Touch entry (renewLease).
	renewTouch
)

// renew extends a live lease of holder for a full TTL from now; false
// also when the lease must be touched first.
func (l *leases) renew(key, holder string, tok fence.Token) (fsm.KeyState, time.Time, bool) {
	k, deadline, r := l.renewLease(key, holder, tok)
	return k, deadline, r == renewDone
}

// renewLease extends a live lease of holder for a full TTL from now,
// unless it was armed at or before this leadership's takeover: a later
// leader would not know of a renewal of it that the log does not record,
// and would count its lease from an earlier takeover, so it is renewed
// only once a Touch entry moved its Armed index past the takeover
// (renewTouch; the first renewal of each grant after an election).
func (l *leases) renewLease(key, holder string, tok fence.Token) (fsm.KeyState, time.Time, renewal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.lookup(key)
	if i == none {
		return fsm.KeyState{}, time.Time{}, renewRefused
	}
	r := l.rec(i)
	now := l.now()
	if r.token != tok || l.holders[r.holder].holder != holder || r.deadline <= now {
		return fsm.KeyState{}, time.Time{}, renewRefused
	}
	if l.touchBelow != 0 && r.armed <= l.touchBelow {
		return fsm.KeyState{}, time.Time{}, renewTouch
	}
	r.deadline = now + int64(r.ttl())
	return l.state(i), l.at(r.deadline), renewDone
}

// renewHolder extends every live lease of a holder, and returns apart the
// live ones that must be touched first (renewLease).
func (l *leases) renewHolder(holder string, may func(key string) bool) ([]RenewedLease, []fsm.TouchKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	h, ok := l.byHolder[holder]
	if !ok {
		return nil, nil
	}
	out := make([]RenewedLease, 0, l.holders[h].n)
	var touch []fsm.TouchKey
	for i := l.holders[h].first; i != none; {
		r := l.rec(i)
		if key := grantKey(r.keyString()); r.deadline > now && (may == nil || may(key)) {
			if l.touchBelow != 0 && r.armed <= l.touchBelow {
				touch = append(touch, fsm.TouchKey{Key: key, Token: r.token})
			} else {
				r.deadline = now + int64(r.ttl())
				k := l.state(i)
				k.Key = key
				out = append(out, RenewedLease{Key: k, Deadline: l.at(r.deadline)})
			}
		}
		i = r.next
	}
	return out, touch
}

// state returns the grant of lease i. The caller holds l.mu.
func (l *leases) state(i int32) fsm.KeyState {
	r := l.rec(i)
	return fsm.KeyState{Key: r.keyString(), Holder: l.holders[r.holder].holder, Token: r.token, TTL: r.ttl(), State: fsm.Held, Armed: r.armed, LockDelay: l.lockDelayOf(i)}
}

// RenewedLease is a grant whose lease a renewal extended, and its new deadline.
type RenewedLease struct {
	Key      fsm.KeyState
	Deadline time.Time
}
