package fsm

import (
	"hash/maphash"
	"iter"
	"slices"

	"github.com/fenced/fenced/internal/openaddr"
)

// keyTable maps each key to its entry, for a fraction of what a Go map of
// the same entries costs (see DESIGN.md, "The key table").
//
// The entries live in a dense array of slots, in pages of pageSlots: a
// new key takes the next slot, and a deleted key's slot is filled by the
// last one, so the slots in use are always the first len of them. A full
// page never moves (only a page not yet full-sized, the first one or the
// last one a reservation sized, is copied as it grows), so a growing table
// does not copy every entry. A snapshot shares the pages (keyview.go): while
// one may still read a page, the table's first write to it copies it. The index is rebuilt whole when it doubles or
// halves, from the hashes the slots keep: a pass over the slots that holds
// the apply loop once per doubling (tens of milliseconds at a million
// keys), as a snapshot's copy of the keys does at each snapshot.
//
// An open-addressed index (internal/openaddr: linear probing, load at most
// 3/4, backward-shift deletion) maps a key's hash to its slot, in 32-bit
// words: the slot number plus one in the bits below the index size and the
// key's hash in the bits above, so a probe dereferences a slot only when
// those bits match. Half the bytes of words that hold the whole hash; the
// slots keep the hash the words lack.
//
// The hash is seeded per table, so keys crafted to collide on one node do
// not collide on another, nor after a restart. Nothing the state machine
// computes depends on the index's layout; the order of the slots (what all
// yields) depends only on the order of the puts and deletes.
type keyTable struct {
	pages [][]slot
	// gens holds, for each page, the generation it was made at (keyview.go):
	// whether a snapshot's view may share it.
	gens []uint64
	// sh counts the views of the table; nil until the first.
	sh *sharing
	n  int
	// index refers to slots by number.
	index openaddr.Index[uint32]
	// seed is drawn when the first index is made: the zero table is an
	// empty one.
	seed maphash.Seed
	// hashClear is cleared from every hash; tests set bits to force
	// collisions.
	hashClear uint64
}

// slot is one key: its hash, kept so that growing or shifting the index
// never hashes a key again, the key's length (the key is the tail of the
// entry's names) and its entry. The hash, the length and the names come
// first: a lookup reads them in one cache line most of the time.
type slot struct {
	hash uint32
	klen uint32
	e    entry
}

const (
	// pageBits sets the slots a page holds: 1024 slots of 56 bytes are
	// exactly seven 8 KiB runtime pages.
	pageBits  = 10
	pageSlots = 1 << pageBits
	// minIndex is the smallest index: 32 bytes.
	minIndex = 8
	// maxKeys is the most keys a table holds: the slot number plus one must
	// fit below the index size, and the index size in 32 bits. A key costs
	// over a hundred bytes, so the process runs out of memory long before.
	maxKeys = 3 << 29
)

// newKeyTable returns an empty table ready for n keys.
func newKeyTable(n int) keyTable {
	var t keyTable
	t.reserve(n)
	return t
}

// key returns the key of s.
func (s *slot) key() string { return s.e.names[len(s.e.names)-int(s.klen):] }

// at returns the slot numbered i.
func (t *keyTable) at(i uint32) *slot { return &t.pages[i>>pageBits][i&(pageSlots-1)] }

// hashOf returns key's hash, its low 32 bits being all the table uses.
func (t *keyTable) hashOf(key string) uint32 {
	return uint32(maphash.String(t.seed, key) &^ t.hashClear)
}

// find returns the index position of key and its slot number, or, when
// key is absent, the empty position where it would go and false. The
// index must exist.
func (t *keyTable) find(key string, h uint32) (pos, s uint32, ok bool) {
	for pos = t.index.Home(h); ; pos = t.index.After(pos) {
		if pos, ok = t.index.Scan(h, pos); !ok {
			return pos, 0, false
		}
		// The word matched the hash's high bits only: the slot has all 32.
		s = t.index.Ref(pos)
		if sl := t.at(s); sl.hash == h && sl.key() == key {
			return pos, s, true
		}
	}
}

// len returns the number of keys.
func (t *keyTable) len() int { return t.n }

// get returns the entry of key.
func (t *keyTable) get(key string) (entry, bool) {
	if t.n == 0 {
		return entry{}, false
	}
	_, s, ok := t.find(key, t.hashOf(key))
	if !ok {
		return entry{}, false
	}
	return t.at(s).e, true
}

// put sets the entry of key, which must be the tail of e.names.
func (t *keyTable) put(key string, e entry) {
	if t.index.Size() == 0 {
		t.rebuild(minIndex)
	}
	h := t.hashOf(key)
	pos, s, ok := t.find(key, h)
	if ok {
		t.writable(s).e = e
		return
	}
	if t.n >= maxKeys {
		panic("fsm: key table full")
	}
	if !t.index.Fits(t.n + 1) {
		t.rebuild(openaddr.SizeFor(t.n+1, minIndex))
		pos, _, _ = t.find(key, h)
	}
	s = uint32(t.n)
	t.appendSlot(slot{hash: h, klen: uint32(len(key)), e: e})
	t.index.Set(pos, h, s)
}

// load appends the entry of key to the slots without indexing it: the
// bulk path of a restore, whose keys come from a checked snapshot in
// strictly increasing order, so none is in the table already. A probe per
// key (a cache miss in an index of megabytes) was half of a restore's CPU
// (BenchmarkSnapshotRestore1M). indexLoaded must follow the last load
// before anything looks a key up, puts or deletes one.
func (t *keyTable) load(key string, e entry) {
	if t.n >= maxKeys {
		panic("fsm: key table full")
	}
	if t.seed == (maphash.Seed{}) {
		t.seed = maphash.MakeSeed()
	}
	t.appendSlot(slot{hash: t.hashOf(key), klen: uint32(len(key)), e: e})
}

// indexLoaded builds the index over every slot, after load, with
// openaddr's InsertAll, which writes it a cache-sized stretch at a time.
func (t *keyTable) indexLoaded() {
	if t.seed == (maphash.Seed{}) {
		t.seed = maphash.MakeSeed() // nothing was loaded
	}
	t.index.Reset(openaddr.SizeFor(t.n, minIndex))
	pairs := make([]uint64, t.n)
	for s := range pairs {
		pairs[s] = openaddr.Pair(t.at(uint32(s)).hash, uint32(s))
	}
	t.index.InsertAll(pairs, nil) // load's keys are distinct
}

// appendSlot puts sl in the next slot.
func (t *keyTable) appendSlot(sl slot) {
	p := t.n >> pageBits
	if p == len(t.pages) {
		c := pageSlots
		if p == 0 {
			c = 8
		}
		t.pages = append(t.pages, make([]slot, 0, c))
		t.gens = append(t.gens, t.made())
	}
	pg := t.own(p)
	if len(pg) == cap(pg) {
		// Only the first page grows; the others are made full-sized.
		grown := make([]slot, len(pg), min(2*cap(pg), pageSlots))
		copy(grown, pg)
		pg = grown
		t.gens[p] = t.made()
	}
	t.pages[p] = append(pg, sl)
	t.n++
}

// delete removes key; it reports whether key was there.
func (t *keyTable) delete(key string) bool {
	if t.n == 0 {
		return false
	}
	pos, s, ok := t.find(key, t.hashOf(key))
	if !ok {
		return false
	}
	t.unindex(pos)
	last := uint32(t.n - 1)
	if s != last {
		// The last slot fills the hole; its index word follows it.
		moved := *t.at(last)
		*t.writable(s) = moved
		t.index.Set(t.index.Locate(moved.hash, last), moved.hash, s)
	}
	t.popSlot()
	// Under an eighth full, to three eighths: as many puts as there are
	// keys before it grows again, so a table that hovers around a boundary
	// does not rebuild at every step.
	if t.index.Size() > minIndex && t.n*8 < t.index.Size() {
		t.rebuild(openaddr.SizeFor(2*t.n, minIndex))
	}
	return true
}

// popSlot drops the last slot. A page left empty is kept while it is the
// only spare one, so that puts and deletes around a page boundary do not
// allocate a page each.
func (t *keyTable) popSlot() {
	t.n--
	p := t.n >> pageBits
	pg := t.own(p)
	pg[len(pg)-1] = slot{} // drop the names for the collector
	t.pages[p] = pg[:len(pg)-1]
	if need := (t.n + pageSlots - 1) >> pageBits; len(t.pages) > need+1 {
		t.pages[len(t.pages)-1] = nil
		t.pages = t.pages[:len(t.pages)-1]
		t.gens = t.gens[:len(t.pages)]
	}
}

// unindex deletes the index word at pos, shifting back the words after it
// as openaddr's Delete does, with the hashes read straight from the slots:
// the words lack their low bits, and Delete's call per word to fetch them
// made BenchmarkKeyTableChurn 9% slower.
func (t *keyTable) unindex(pos uint32) {
	hole := pos
	for j := t.index.After(pos); !t.index.Empty(j); j = t.index.After(j) {
		hole = t.index.ShiftInto(hole, j, t.at(t.index.Ref(j)).hash)
	}
	t.index.Clear(hole)
}

// rebuild replaces the index by one of size words, from the slots in
// order: a pass over the pages, where a resize from the index's own words
// would read the slots at random for their hashes.
func (t *keyTable) rebuild(size int) {
	if t.seed == (maphash.Seed{}) {
		t.seed = maphash.MakeSeed()
	}
	t.index.Reset(size)
	for s := uint32(0); s < uint32(t.n); s++ {
		t.index.Insert(t.at(s).hash, s)
	}
}

// reserve makes room for n keys in all, so that putting them allocates
// nothing more.
func (t *keyTable) reserve(n int) {
	n = min(n, maxKeys)
	if n <= t.n {
		return
	}
	if size := openaddr.SizeFor(n, minIndex); size > t.index.Size() {
		t.rebuild(size)
	}
	t.reservePages(n)
}

// reservePages makes room in the pages for n keys in all (reserve without
// the index: a restore builds that once, indexLoaded).
func (t *keyTable) reservePages(n int) {
	n = min(n, maxKeys)
	more := max(0, (n+pageSlots-1)>>pageBits-len(t.pages))
	t.pages = slices.Grow(t.pages, more)
	t.gens = slices.Grow(t.gens, more)
	for p := 0; p<<pageBits < n; p++ {
		c := min(n-p<<pageBits, pageSlots)
		if p == len(t.pages) {
			t.pages = append(t.pages, make([]slot, 0, c))
			t.gens = append(t.gens, t.made())
		} else if cap(t.pages[p]) < c {
			grown := make([]slot, len(t.pages[p]), c)
			copy(grown, t.pages[p])
			t.pages[p], t.gens[p] = grown, t.made()
		}
	}
}

// all yields every key and its entry, from the last slot to the first.
// Deleting the key just yielded is allowed (the last slot, already
// yielded, takes its place); any other change during the walk is not.
func (t *keyTable) all() iter.Seq2[string, entry] {
	return func(yield func(string, entry) bool) {
		for s := t.n - 1; s >= 0; s-- {
			sl := t.at(uint32(s))
			if !yield(sl.key(), sl.e) {
				return
			}
		}
	}
}
