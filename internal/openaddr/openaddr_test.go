package openaddr

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// table is a table of keys over an Index, as fenced's tables use one. Its
// references are dense, 0..n-1, as the key table's slots are: a delete
// moves the last key into the hole and repoints its word. With sparse set
// (64-bit words only), a delete leaves the hole and a put takes the lowest
// free reference, as the lease slab's free list does, so references are
// not dense.
type table[W Word] struct {
	x      Index[W]
	min    int
	sparse bool
	// keys and hashes are by reference; a free reference's key is "".
	keys   []string
	hashes []uint32
	n      int
	hash   func(string) uint32
	// ordered rebuilds with Reset and Insert from the references in order
	// (as the key table does), rather than with Resize; stepped deletes
	// with its own loop of ShiftInto (as the key table does too), rather
	// than with Delete.
	ordered, stepped bool
	// bulk rebuilds with Reset and InsertAll (as a restore and a new
	// leader's re-arm do).
	bulk bool
}

func newTable[W Word](min int, sparse, ordered, stepped bool, hash func(string) uint32) *table[W] {
	return &table[W]{min: min, sparse: sparse, ordered: ordered, stepped: stepped, hash: hash}
}

func (t *table[W]) hashOf(ref uint32) uint32 { return t.hashes[ref] }

func (t *table[W]) held(ref uint32) (uint32, bool) {
	if int(ref) >= len(t.keys) || t.keys[ref] == "" {
		return 0, false
	}
	return t.hashes[ref], true
}

// find returns key's reference, or the position where it would go.
func (t *table[W]) find(key string, h uint32) (pos, ref uint32, ok bool) {
	for pos = t.x.Home(h); ; pos = t.x.After(pos) {
		if pos, ok = t.x.Scan(h, pos); !ok {
			return pos, 0, false
		}
		if ref = t.x.Ref(pos); t.keys[ref] == key {
			return pos, ref, true
		}
	}
}

func (t *table[W]) get(key string) (uint32, bool) {
	if t.n == 0 {
		return 0, false
	}
	_, ref, ok := t.find(key, t.hash(key))
	return ref, ok
}

func (t *table[W]) rebuild(size int) {
	if !t.ordered {
		t.x.Resize(size, t.hashOf)
		return
	}
	t.x.Reset(size)
	if t.bulk {
		var pairs []uint64
		for ref, k := range t.keys {
			if k != "" {
				pairs = append(pairs, Pair(t.hashes[ref], uint32(ref)))
			}
		}
		t.x.InsertAll(pairs, func(a, b uint32) bool {
			if t.keys[a] == t.keys[b] {
				panic(fmt.Sprintf("InsertAll: references %d and %d both name %q", a, b, t.keys[a]))
			}
			return false
		})
		return
	}
	for ref, k := range t.keys {
		if k != "" {
			t.x.Insert(t.hashes[ref], uint32(ref))
		}
	}
}

// put adds key; it reports false when key was there already.
func (t *table[W]) put(key string) bool {
	if t.x.Size() == 0 {
		t.rebuild(t.min)
	}
	h := t.hash(key)
	if _, _, ok := t.find(key, h); ok {
		return false
	}
	if !t.x.Fits(t.n + 1) {
		t.rebuild(SizeFor(t.n+1, t.min))
	}
	pos, _, _ := t.find(key, h)
	ref := uint32(len(t.keys))
	if t.sparse {
		for r, k := range t.keys {
			if k == "" {
				ref = uint32(r)
				break
			}
		}
	}
	if int(ref) == len(t.keys) {
		t.keys, t.hashes = append(t.keys, ""), append(t.hashes, 0)
	}
	t.keys[ref], t.hashes[ref] = key, h
	t.x.Set(pos, h, ref)
	t.n++
	return true
}

// del removes key; it reports whether key was there.
func (t *table[W]) del(key string) bool {
	if t.x.Size() == 0 {
		return false
	}
	pos, ref, ok := t.find(key, t.hash(key))
	if !ok {
		return false
	}
	if t.stepped {
		hole := pos
		for j := t.x.After(pos); !t.x.Empty(j); j = t.x.After(j) {
			hole = t.x.ShiftInto(hole, j, t.hashes[t.x.Ref(j)])
		}
		t.x.Clear(hole)
	} else {
		t.x.Delete(pos, t.hashOf)
	}
	last := uint32(len(t.keys) - 1)
	if !t.sparse && ref != last {
		t.keys[ref], t.hashes[ref] = t.keys[last], t.hashes[last]
		t.x.Set(t.x.Locate(t.hashes[ref], last), t.hashes[ref], ref)
		ref = last
	}
	t.keys[ref] = ""
	for len(t.keys) > 0 && t.keys[len(t.keys)-1] == "" {
		t.keys, t.hashes = t.keys[:len(t.keys)-1], t.hashes[:len(t.hashes)-1]
	}
	t.n--
	if t.x.Size() > t.min && t.n*8 < t.x.Size() {
		t.rebuild(SizeFor(2*t.n, t.min))
	}
	return true
}

// check compares the table with the model and checks the index's
// invariants.
func (t *table[W]) check(model map[string]bool) error {
	if err := t.x.Check(t.n, t.held); err != nil {
		return err
	}
	if t.n != len(model) {
		return fmt.Errorf("%d keys, want %d", t.n, len(model))
	}
	for k := range model {
		if ref, ok := t.get(k); !ok || t.keys[ref] != k {
			return fmt.Errorf("get(%q) = %d %v", k, ref, ok)
		}
	}
	if t.x.Size() > t.min && t.n*8 < t.x.Size() {
		return fmt.Errorf("%d keys left in an index of %d", t.n, t.x.Size())
	}
	return nil
}

// hashFamily narrows a seeded hash: few distinct hashes make long probe
// runs, and hashes whose home is near the end of the index make runs that
// wrap around to its start.
type hashFamily struct {
	name string
	fn   func(full uint32) uint32
}

var hashFamilies = []hashFamily{
	{"full", func(h uint32) uint32 { return h }},
	{"four at the end", func(h uint32) uint32 { return h | ^uint32(3) }},
	{"sixteen high only", func(h uint32) uint32 { return h & 0xF000_0000 }},
	{"one at the end", func(uint32) uint32 { return ^uint32(0) }},
	{"one at the start", func(uint32) uint32 { return 0 }},
}

// seededHash returns the family's hash under seed: FNV-1a, then a
// finalizer that spreads every bit. Deterministic, unlike maphash, so that
// rapid can replay and shrink a failure.
func seededHash(fam hashFamily, seed uint64) func(string) uint32 {
	return func(k string) uint32 {
		h := 14695981039346656037 ^ seed
		for i := 0; i < len(k); i++ {
			h = (h ^ uint64(k[i])) * 1099511628211
		}
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		return fam.fn(uint32(h))
	}
}

// variant is one way a table uses the index.
type variant struct {
	name                     string
	wide                     bool
	sparse, ordered, stepped bool
	min                      int
	bulk                     bool
}

var variants = []variant{
	{"32-bit dense resized", false, false, false, false, 8, false},
	{"32-bit dense rebuilt in order, stepped deletes", false, false, true, true, 8, false},
	{"64-bit dense", true, false, false, false, 16, false},
	{"64-bit sparse", true, true, false, false, 16, false},
	{"64-bit sparse rebuilt in order, stepped deletes", true, true, true, true, 8, false},
	{"32-bit dense rebuilt in bulk, stepped deletes", false, false, true, true, 8, true},
	{"64-bit sparse rebuilt in bulk", true, true, true, false, 16, true},
}

// ops is what the model-based tests drive: a table of either width.
type ops interface {
	put(string) bool
	del(string) bool
	get(string) (uint32, bool)
	check(map[string]bool) error
	size() int
}

func (t *table[W]) size() int { return t.x.Size() }

func (v variant) table(hash func(string) uint32) ops {
	if v.wide {
		t := newTable[uint64](v.min, v.sparse, v.ordered, v.stepped, hash)
		t.bulk = v.bulk
		return t
	}
	t := newTable[uint32](v.min, v.sparse, v.ordered, v.stepped, hash)
	t.bulk = v.bulk
	return t
}

// TestIndexAgainstMap is the property: any sequence of puts, deletes and
// lookups leaves the index agreeing with a Go map of the same keys, and
// every invariant Check knows holds after every step, across growth and
// shrinking and with probe runs that wrap around the end of the index.
func TestIndexAgainstMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		v := rapid.SampledFrom(variants).Draw(rt, "variant")
		fam := rapid.SampledFrom(hashFamilies).Draw(rt, "hash")
		keys := rapid.IntRange(1, 80).Draw(rt, "keys")
		tb := v.table(seededHash(fam, rapid.Uint64().Draw(rt, "seed")))
		model := map[string]bool{}
		key := func(rt *rapid.T) string { return fmt.Sprintf("k%d", rapid.IntRange(0, keys-1).Draw(rt, "key")) }
		rt.Repeat(map[string]func(*rapid.T){
			"put": func(rt *rapid.T) {
				k := key(rt)
				if got := tb.put(k); got == model[k] {
					rt.Fatalf("put(%q) added %v, the map had it: %v", k, got, model[k])
				}
				model[k] = true
			},
			"delete": func(rt *rapid.T) {
				k := key(rt)
				if got := tb.del(k); got != model[k] {
					rt.Fatalf("delete(%q) = %v, want %v", k, got, model[k])
				}
				delete(model, k)
			},
			"get": func(rt *rapid.T) {
				k := key(rt)
				if _, got := tb.get(k); got != model[k] {
					rt.Fatalf("get(%q) = %v, want %v", k, got, model[k])
				}
			},
			"": func(rt *rapid.T) {
				if err := tb.check(model); err != nil {
					rt.Fatal(err)
				}
			},
		})
	})
}

// TestIndexBreathes grows tables to thousands of keys and shrinks them
// back, in phases, against a Go map: the rapid property stays small, this
// crosses many sizes both ways.
func TestIndexBreathes(t *testing.T) {
	for _, v := range variants {
		for _, fam := range hashFamilies {
			keys, ops := 3000, 60_000
			if fam.name != "full" {
				keys, ops = 200, 10_000 // every lookup walks a long run
			}
			t.Run(v.name+"/"+fam.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(keys), 11))
				tb := v.table(seededHash(fam, rng.Uint64()))
				model := map[string]bool{}
				peak := 0
				for op := 0; op < ops; op++ {
					k := fmt.Sprintf("k%d", rng.IntN(keys))
					grow := op/(ops/6)%2 == 0
					if r := rng.IntN(100); r < 20 || grow && r < 70 {
						tb.put(k)
						model[k] = true
					} else if r < 95 {
						if got := tb.del(k); got != model[k] {
							t.Fatalf("op %d: delete(%q) = %v", op, k, got)
						}
						delete(model, k)
					} else if _, got := tb.get(k); got != model[k] {
						t.Fatalf("op %d: get(%q) = %v", op, k, got)
					}
					peak = max(peak, tb.size())
					if op%(ops/40) == 0 {
						if err := tb.check(model); err != nil {
							t.Fatalf("op %d: %v", op, err)
						}
					}
				}
				if err := tb.check(model); err != nil {
					t.Fatal(err)
				}
				if peak < SizeFor(keys/2, v.min) {
					t.Fatalf("the index peaked at %d words for %d keys: it never grew", peak, keys)
				}
			})
		}
	}
}

// words is an index's layout for the scenario tests: "" for an empty
// word, else the key whose reference the word names.
func layout[W Word](x *Index[W], keys []string) []string {
	out := make([]string, len(x.words))
	for pos, w := range x.words {
		if w != 0 {
			out[pos] = keys[x.ref(w)]
		}
	}
	return out
}

// TestDeleteShiftsBack checks the backward shift word by word, on an index
// of eight words whose keys have chosen homes: the runs below cross the
// end of the index, and a word may move only to a place its probe passes.
func TestDeleteShiftsBack(t *testing.T) {
	for _, c := range []struct {
		name  string
		homes map[string]uint32 // each key's hash: its home in 8 words
		puts  []string
		del   string
		want  []string
	}{
		{
			name:  "the run wraps around; both wrapped words move back",
			homes: map[string]uint32{"a": 6, "b": 7, "c": 6, "d": 7},
			puts:  []string{"a", "b", "c", "d"}, // a@6 b@7 c@0 d@1
			del:   "a",
			want:  []string{"d", "", "", "", "", "", "c", "b"},
		},
		{
			name:  "a word at its home stays, a later one behind it moves",
			homes: map[string]uint32{"a": 6, "b": 7, "c": 0, "d": 6},
			puts:  []string{"a", "b", "c", "d"}, // a@6 b@7 c@0 d@1
			del:   "a",
			want:  []string{"c", "", "", "", "", "", "d", "b"},
		},
		{
			name:  "deleting the last word of the index shifts the wrapped run",
			homes: map[string]uint32{"a": 7, "b": 7, "c": 0},
			puts:  []string{"a", "b", "c"}, // a@7 b@0 c@1
			del:   "a",
			want:  []string{"c", "", "", "", "", "", "", "b"},
		},
		{
			name:  "a word whose home lies between the hole and itself stays",
			homes: map[string]uint32{"a": 1, "b": 2, "c": 1},
			puts:  []string{"a", "b", "c"}, // a@1 b@2 c@3
			del:   "b",
			want:  []string{"", "a", "c", "", "", "", "", ""},
		},
		{
			name:  "nothing follows the deleted word",
			homes: map[string]uint32{"a": 3, "b": 3},
			puts:  []string{"a", "b"}, // a@3 b@4
			del:   "b",
			want:  []string{"", "", "", "a", "", "", "", ""},
		},
		{
			name:  "a run that ends short of the hole's neighbour's home",
			homes: map[string]uint32{"a": 5, "b": 6, "c": 5, "d": 0},
			puts:  []string{"a", "b", "c", "d"}, // a@5 b@6 c@7 d@0
			del:   "b",
			want:  []string{"d", "", "", "", "", "a", "c", ""},
		},
	} {
		for _, mode := range []struct{ wide, stepped bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
			t.Run(fmt.Sprintf("%s/wide=%v,stepped=%v", c.name, mode.wide, mode.stepped), func(t *testing.T) {
				// The homes fill the low bits; the high bits tell keys of
				// one home apart, so the 32-bit words' tags differ too.
				hash := func(k string) uint32 { return c.homes[k] | uint32(k[0])<<24 }
				var got []string
				var err error
				if mode.wide {
					got, err = scenario[uint64](hash, c.puts, c.del, mode.stepped)
				} else {
					got, err = scenario[uint32](hash, c.puts, c.del, mode.stepped)
				}
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Fatalf("after deleting %q: %q, want %q", c.del, got, c.want)
				}
			})
		}
	}
}

// scenario puts keys into an index of eight words (sparse references, so
// no key moves in the table), deletes one, and returns the layout.
func scenario[W Word](hash func(string) uint32, puts []string, del string, stepped bool) ([]string, error) {
	tb := newTable[W](8, true, false, stepped, hash)
	model := map[string]bool{}
	for _, k := range puts {
		tb.put(k)
		model[k] = true
	}
	tb.del(del)
	delete(model, del)
	if err := tb.check(model); err != nil {
		return nil, err
	}
	return layout(&tb.x, tb.keys), nil
}

// TestWords: each width keeps the reference and the hash bits its doc
// promises, and a probe stops only at words whose hash bits match.
func TestWords(t *testing.T) {
	var narrow Index[uint32]
	narrow.Reset(16)
	if w := narrow.word(0xABCD_1234, 5); w != 0xABCD_1230|6 {
		t.Fatalf("32-bit word %#x", w)
	}
	var wide Index[uint64]
	wide.Reset(16)
	if w := wide.word(0xABCD_1234, 5); w != 0xABCD_1234_0000_0006 {
		t.Fatalf("64-bit word %#x", w)
	}
	// Same home (4), other hash bits: the scan passes the word by.
	narrow.Insert(0x1000_0004, 0)
	wide.Insert(0x1000_0004, 0)
	const other = 0x2000_0004
	np, nok := narrow.Scan(other, narrow.Home(other))
	wp, wok := wide.Scan(other, wide.Home(other))
	if nok || wok || np != 5 || wp != 5 {
		t.Fatalf("a scan of another hash stopped (%v %v), or ended at %d and %d, not 5", nok, wok, np, wp)
	}
	// The 64-bit word tells apart hashes that differ below the mask too,
	// where the 32-bit one cannot (its table compares the keys).
	wide.Insert(0x1000_0014, 1)
	if pos, ok := wide.Scan(0x1000_0014, 4); !ok || pos != 5 || wide.Ref(pos) != 1 {
		t.Fatalf("the 64-bit scan stopped at %d (%v), not 5", pos, ok)
	}
	// A scan resumes after a word whose key was not the one: After wraps.
	if narrow.After(15) != 0 {
		t.Fatal("After(15) in 16 words is not 0")
	}
}

// TestSizeFor: the smallest power of two at least min that n keys fill to
// three quarters at most.
func TestSizeFor(t *testing.T) {
	for _, c := range []struct{ n, min, want int }{
		{0, 8, 8}, {6, 8, 8}, {7, 8, 16}, {12, 16, 16}, {13, 16, 32},
		{0, 16, 16}, {3 << 20, 8, 4 << 20}, {3<<20 + 1, 8, 8 << 20},
	} {
		if got := SizeFor(c.n, c.min); got != c.want {
			t.Errorf("SizeFor(%d, %d) = %d, want %d", c.n, c.min, got, c.want)
		}
	}
	var x Index[uint32]
	x.Reset(8)
	if !x.Fits(6) || x.Fits(7) {
		t.Fatal("an index of 8 holds 6 keys, not 7")
	}
}

// TestLocatePanicsOnAMissingReference: a table that lost track of its
// entries stops, rather than loop over the index for ever.
func TestLocatePanicsOnAMissingReference(t *testing.T) {
	var x Index[uint64]
	x.Reset(8)
	x.Insert(3, 0)
	defer func() {
		if recover() == nil {
			t.Fatal("Locate of a reference not in the index returned")
		}
	}()
	x.Locate(3, 1)
}

// TestCheckFindsBrokenIndexes: the invariant check that the tables' own
// tests rely on does fail on each way an index can be broken.
func TestCheckFindsBrokenIndexes(t *testing.T) {
	hashes := []uint32{2, 2, 5}
	held := func(ref uint32) (uint32, bool) {
		if int(ref) >= len(hashes) {
			return 0, false
		}
		return hashes[ref], true
	}
	build := func() *Index[uint32] {
		var x Index[uint32]
		x.Reset(8)
		for ref, h := range hashes {
			x.Insert(h, uint32(ref))
		}
		return &x
	}
	if err := build().Check(3, held); err != nil {
		t.Fatalf("a sound index: %v", err)
	}
	for name, breakIt := range map[string]func(x *Index[uint32]){
		"cut from its home":    func(x *Index[uint32]) { x.words[4], x.words[2] = x.words[2], 0 }, // ref 0 moved past an empty word
		"a reference not held": func(x *Index[uint32]) { x.words[5] = x.word(5, 6) },
		"named twice":          func(x *Index[uint32]) { x.words[6] = x.words[5] },
		"wrong hash bits":      func(x *Index[uint32]) { x.words[5] = x.word(0x100_0005, 2) },
		"a word lost":          func(x *Index[uint32]) { x.words[5] = 0 },
	} {
		x := build()
		breakIt(x)
		if err := x.Check(3, held); err == nil {
			t.Errorf("%s: Check found nothing", name)
		}
	}
}

// InsertAll builds a sound index, across the index's stretches and with
// runs that wrap around its end; given same, a key named twice keeps one
// word, the later pair's.
func TestInsertAll(t *testing.T) {
	for _, fam := range hashFamilies {
		for _, n := range []int{0, 1, 7, 3000, 20000} {
			hash := seededHash(fam, 7)
			hashes := make([]uint32, n)
			pairs := make([]uint64, n)
			for i := range hashes {
				hashes[i] = hash(fmt.Sprint(i))
				pairs[i] = Pair(hashes[i], uint32(i))
			}
			held := func(ref uint32) (uint32, bool) {
				if int(ref) >= n {
					return 0, false
				}
				return hashes[ref], true
			}
			for _, wide := range []bool{false, true} {
				var err error
				if wide {
					var x Index[uint64]
					x.Reset(SizeFor(n, 16))
					x.InsertAll(append([]uint64(nil), pairs...), nil)
					err = x.Check(n, held)
				} else {
					var x Index[uint32]
					x.Reset(SizeFor(n, 8))
					x.InsertAll(append([]uint64(nil), pairs...), nil)
					err = x.Check(n, held)
				}
				if err != nil {
					t.Fatalf("%s, %d keys, wide %v: %v", fam.name, n, wide, err)
				}
			}
		}
	}
	// References 0..199 name keys 0..99 twice over (ref%100): each key
	// keeps its later reference, 100..199.
	for _, fam := range hashFamilies {
		hash := seededHash(fam, 3)
		hashes := make([]uint32, 200)
		pairs := make([]uint64, 200)
		for i := range pairs {
			hashes[i] = hash(fmt.Sprint(i % 100))
			pairs[i] = Pair(hashes[i], uint32(i))
		}
		var x Index[uint32]
		x.Reset(SizeFor(100, 8))
		x.InsertAll(pairs, func(a, b uint32) bool { return a%100 == b%100 })
		err := x.Check(100, func(ref uint32) (uint32, bool) {
			if ref < 100 || ref >= 200 {
				return 0, false
			}
			return hashes[ref], true
		})
		if err != nil {
			t.Fatalf("%s, keys named twice: %v", fam.name, err)
		}
	}
}
