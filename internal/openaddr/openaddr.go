// Package openaddr is the index by key of fenced's two large tables, the
// state machine's key table and the leader's lease table: an open-addressed
// array of words, linear probing, at most three-quarters full, with
// backward-shift deletion (Knuth's Algorithm R), so a lookup ends at the
// first empty word however many keys came and went.
//
// The index holds no keys. A word names an entry of its table by a
// reference (a 32-bit number the table chooses, such as a slot or slab
// number) beside bits of the key's 32-bit hash, and the table compares the
// key itself: a probe dereferences an entry only when those hash bits
// match, so a lookup usually reads one entry, and a miss none.
//
// A word is one of two widths, and the table picks the one that costs it
// least:
//
//   - 64 bits: the whole hash in the high half, the reference plus one in
//     the low half. The index finds a word's home from the word alone, so
//     deleting and resizing never ask the table anything.
//   - 32 bits: the reference plus one in the bits below the index's size,
//     the hash's bits above them. Half the bytes, but the hash's low bits
//     (the home) are not in the word: the table keeps each entry's hash and
//     hands it over when a delete or a resize needs it. A reference must be
//     less than the index's size minus one, which a table of dense
//     references 0..n-1 at most three-quarters full always is.
//
// The zero Index is empty: a table makes it with Reset before it looks a
// key up. Lookups (Home, Scan, After, Ref) only read, so they may run
// together, as under a table's read lock; a change runs alone.
package openaddr

import (
	"fmt"
	"unsafe"
)

// Word is the type of an index's words.
type Word interface{ ~uint32 | ~uint64 }

// Index maps 32-bit hashes to the references of a table's entries.
type Index[W Word] struct {
	// words has a power-of-two length; mask is that length minus one. A
	// zero word is empty.
	words []W
	mask  uint32
}

// wide reports whether W carries the whole hash. Each width is its own
// instantiation, so the test is a constant and the other branch is gone.
func wide[W Word]() bool {
	var w W
	return unsafe.Sizeof(w) == 8
}

// SizeFor returns the size of an index for n keys: the smallest power of
// two, and at least min (itself a power of two), that n keys fill to three
// quarters at most.
func SizeFor(n, min int) int {
	size := min
	for uint64(n)*4 > uint64(size)*3 {
		size *= 2
	}
	return size
}

// Size returns the number of words: 0 for an index not yet made.
func (x *Index[W]) Size() int { return len(x.words) }

// Fits reports whether n keys fit the index without passing three quarters
// full: a table that is about to hold n keys resizes first when they do
// not.
func (x *Index[W]) Fits(n int) bool { return uint64(n)*4 <= uint64(len(x.words))*3 }

// Reset replaces the index by an empty one of size words (a power of two,
// or 0 to release the words).
func (x *Index[W]) Reset(size int) {
	if size == 0 {
		x.words, x.mask = nil, 0
		return
	}
	if size&(size-1) != 0 || uint64(size) > 1<<32 {
		panic(fmt.Sprintf("openaddr: index size %d is not a power of two of at most 2^32", size))
	}
	x.words, x.mask = make([]W, size), uint32(size-1)
}

// word returns the word of reference ref, whose key hashes to h.
func (x *Index[W]) word(h, ref uint32) W {
	if wide[W]() {
		return W(uint64(h)<<32 | uint64(ref+1))
	}
	return W(h&^x.mask | (ref + 1))
}

// ref returns the reference a non-empty word names.
func (x *Index[W]) ref(w W) uint32 {
	if wide[W]() {
		return uint32(w) - 1
	}
	return uint32(w)&x.mask - 1
}

// Home returns the position where h's probe path starts. The index must
// not be empty: a table tells an empty table by its count.
func (x *Index[W]) Home(h uint32) uint32 { return h & x.mask }

// After returns the position after pos, where a probe goes on when the
// key at pos was not the one it looks for.
func (x *Index[W]) After(pos uint32) uint32 { return (pos + 1) & x.mask }

// Scan walks h's probe path from pos (a position on it) to the first word
// whose hash bits match h's, and returns its position with true, for the
// table to compare the key of its reference (Ref); or, with false, the
// position of the empty word that ends the path, where h's key goes if it
// is absent. A lookup is
//
//	for pos = x.Home(h); ; pos = x.After(pos) {
//		if pos, ok = x.Scan(h, pos); !ok {
//			return pos, false // absent: pos is where it goes
//		}
//		if keys[x.Ref(pos)] == key {
//			return pos, true
//		}
//	}
//
// Scan is small enough to be inlined, and passes everything by value, so
// the compiler keeps the walk in registers: a lookup costs what a loop
// written in the table would.
func (x *Index[W]) Scan(h, pos uint32) (uint32, bool) {
	for ; ; pos = (pos + 1) & x.mask {
		w := x.words[pos]
		if w == 0 {
			return pos, false
		}
		if x.tagged(w, h) {
			return pos, true
		}
	}
}

// Ref returns the reference of the word at pos, which must not be empty.
func (x *Index[W]) Ref(pos uint32) uint32 { return x.ref(x.words[pos]) }

// tagged reports whether word w carries the bits of hash h that it keeps.
func (x *Index[W]) tagged(w W, h uint32) bool {
	if wide[W]() {
		return uint32(uint64(w)>>32) == h
	}
	return (uint32(w)^h)&^x.mask == 0
}

// Set writes the word of reference ref, whose key hashes to h, at pos: the
// empty position that ended a probe of h that found no key, or the
// position of the word of an entry the table moved to ref (Locate).
func (x *Index[W]) Set(pos, h, ref uint32) { x.words[pos] = x.word(h, ref) }

// Insert adds reference ref, whose key hashes to h and is not in the
// index, at the first empty word of h's path: a rebuild, which knows its
// keys are distinct, needs no probe that compares them. The index must
// have room (Fits).
func (x *Index[W]) Insert(h, ref uint32) {
	pos := h & x.mask
	for x.words[pos] != 0 {
		pos = (pos + 1) & x.mask
	}
	x.words[pos] = x.word(h, ref)
}

// Locate returns the position of the word of reference ref, whose key
// hashes to h. It panics when ref is not in the index: the table has lost
// track of its own entries.
func (x *Index[W]) Locate(h, ref uint32) uint32 {
	for pos := h & x.mask; ; pos = (pos + 1) & x.mask {
		w := x.words[pos]
		if w == 0 {
			// A constant message keeps Locate small enough to inline.
			panic("openaddr: Locate of a reference not in the index")
		}
		if x.ref(w) == ref {
			return pos
		}
	}
}

// Delete empties the word at pos and shifts back the words after it that
// probed past pos, so that every key stays reachable from its home and a
// probe still ends at the first empty word: no tombstones. hashOf returns
// the hash of a reference's key; an index of 64-bit words never calls it
// (nil will do). A table that would rather not pay a call per word for its
// hashes runs the same loop itself:
//
//	hole := pos
//	for j := x.After(pos); !x.Empty(j); j = x.After(j) {
//		hole = x.ShiftInto(hole, j, hashOf(x.Ref(j)))
//	}
//	x.Clear(hole)
func (x *Index[W]) Delete(pos uint32, hashOf func(ref uint32) uint32) {
	hole := pos
	for j := x.After(pos); !x.Empty(j); j = x.After(j) {
		var h uint32
		if wide[W]() {
			h = uint32(uint64(x.words[j]) >> 32)
		} else {
			h = hashOf(x.Ref(j))
		}
		hole = x.ShiftInto(hole, j, h)
	}
	x.Clear(hole)
}

// Empty reports whether the word at pos is empty.
func (x *Index[W]) Empty(pos uint32) bool { return x.words[pos] == 0 }

// Clear empties the word at pos: the hole a delete's shift ends at.
func (x *Index[W]) Clear(pos uint32) { x.words[pos] = 0 }

// ShiftInto is one step of a delete (Knuth's Algorithm R): it moves the
// word at pos, whose key hashes to h, into the hole, and returns pos as the
// new hole; or, when the word's home lies in the cyclic interval (hole,
// pos], leaves it, for its probe from home would never pass the hole, and
// returns the hole.
func (x *Index[W]) ShiftInto(hole, pos, h uint32) uint32 {
	if (pos-h)&x.mask < (pos-hole)&x.mask {
		return hole
	}
	x.words[hole] = x.words[pos]
	return pos
}

// Resize rebuilds the index at size words from its own words. hashOf is
// asked for every key's hash when the words are 32 bits wide, and never
// when they are 64 (nil will do): a table that can list its entries in
// order, each with its hash, rebuilds faster with Reset and Insert.
func (x *Index[W]) Resize(size int, hashOf func(ref uint32) uint32) {
	old := *x
	x.Reset(size)
	for _, w := range old.words {
		if w == 0 {
			continue
		}
		ref := old.ref(w)
		var h uint32
		if wide[W]() {
			h = uint32(uint64(w) >> 32)
		} else {
			h = hashOf(ref)
		}
		x.Insert(h, ref)
	}
}

// Check returns the first way the index breaks its invariants, holding n
// keys whose hashes hashOf returns (false for a reference the table does
// not hold): every word names a distinct reference the table holds, with
// that key's hash bits, reachable from its home without crossing an empty
// word; n words in all, at most three quarters of the index. For tests.
func (x *Index[W]) Check(n int, hashOf func(ref uint32) (uint32, bool)) error {
	if len(x.words) != 0 && (len(x.words)&(len(x.words)-1) != 0 || x.mask != uint32(len(x.words)-1)) {
		return fmt.Errorf("size %d, mask %#x", len(x.words), x.mask)
	}
	seen := make(map[uint32]bool, n)
	for pos, w := range x.words {
		if w == 0 {
			continue
		}
		ref := x.ref(w)
		h, ok := hashOf(ref)
		if !ok || seen[ref] {
			return fmt.Errorf("word %#x at %d names reference %d: not held, or named twice", uint64(w), pos, ref)
		}
		seen[ref] = true
		if x.word(h, ref) != w {
			return fmt.Errorf("word %#x at %d is not reference %d with its hash %#x", uint64(w), pos, ref, h)
		}
		for p := h & x.mask; p != uint32(pos); p = (p + 1) & x.mask {
			if x.words[p] == 0 {
				return fmt.Errorf("reference %d at %d: an empty word at %d cuts it from its home %d", ref, pos, p, h&x.mask)
			}
		}
	}
	if len(seen) != n || !x.Fits(n) {
		return fmt.Errorf("%d words for %d keys, in an index of %d", len(seen), n, len(x.words))
	}
	return nil
}

// bulkBuckets is how many stretches InsertAll splits the index into: a
// million-word index of 64-bit words is 16 KiB a stretch, within a core's
// first-level cache, and 1,024 counters and write positions stay in the
// second level while the pairs are distributed.
const bulkBuckets = 1024

// Pair packs a hash (high 32 bits) and a reference (low 32) for InsertAll.
func Pair(h, ref uint32) uint64 { return uint64(h)<<32 | uint64(ref) }

// InsertAll inserts every pair (Pair: a hash and a reference whose key
// hashes to it) into the index, which must have room for all of them
// (Fits). It writes the index one stretch at a time: the pairs are first
// distributed by the stretch their home falls in, so that the inserts of a
// million references, whose homes are spread over megabytes, touch a
// cache-sized stretch at a time instead of taking a cache miss each, as
// Insert in the references' own order does.
//
// same, if not nil, is asked about each reference already in the index
// whose word carries the bits of a new pair's hash that a word keeps, on
// that pair's path: it reports whether the two name the same key, and if
// so the new reference takes the old one's word (the old one is then the
// caller's to forget). The distribution keeps the pairs of one hash in
// their order, so of two pairs of one key the later one stays. With nil,
// the caller vouches that the keys are distinct, as Insert's caller does.
func (x *Index[W]) InsertAll(pairs []uint64, same func(old, ref uint32) bool) {
	if len(pairs) == 0 {
		return
	}
	shift := uint(0)
	for (len(x.words) >> shift) > bulkBuckets {
		shift++
	}
	var counts [bulkBuckets + 1]int
	for _, p := range pairs {
		counts[(uint32(p>>32)&x.mask)>>shift+1]++
	}
	for b := 1; b <= bulkBuckets; b++ {
		counts[b] += counts[b-1]
	}
	sorted := make([]uint64, len(pairs))
	for _, p := range pairs {
		b := (uint32(p>>32) & x.mask) >> shift
		sorted[counts[b]] = p
		counts[b]++
	}
	for _, p := range sorted {
		h, r := uint32(p>>32), uint32(p)
		pos := h & x.mask
		for ; x.words[pos] != 0; pos = (pos + 1) & x.mask {
			if w := x.words[pos]; same != nil && x.tagged(w, h) && same(x.ref(w), r) {
				break
			}
		}
		x.words[pos] = x.word(h, r)
	}
}
