package fsm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// tableEntry returns an entry for key as store makes it: key is the tail of
// its names, and the index tells versions apart.
func tableEntry(key string, version uint64) entry {
	names, _ := joinNames("holder", "req", key)
	return entry{names: names, index: version, holderLen: uint16(len("holder"))}
}

// checkTable compares t with the reference map and checks the table's own
// invariants: every key reachable from its hash, every index word naming a
// slot in use once, and the load inside its bounds.
// A reserved table may be emptier than its index size allows otherwise,
// until a delete shrinks it.
func checkTable(t *testing.T, kt *keyTable, ref map[string]uint64, reserved bool) {
	t.Helper()
	if kt.len() != len(ref) {
		t.Fatalf("len %d, want %d", kt.len(), len(ref))
	}
	for k, v := range ref {
		e, ok := kt.get(k)
		if !ok || e.index != v || e.names[len(e.names)-len(k):] != k {
			t.Fatalf("get(%q) = %d %v, want %d", k, e.index, ok, v)
		}
	}
	seen := make(map[string]bool, len(ref))
	for k, e := range kt.all() {
		if seen[k] {
			t.Fatalf("all yields %q twice", k)
		}
		seen[k] = true
		if v, ok := ref[k]; !ok || e.index != v {
			t.Fatalf("all yields %q = %d, want %d %v", k, e.index, v, ok)
		}
	}
	if len(seen) != len(ref) {
		t.Fatalf("all yields %d keys, want %d", len(seen), len(ref))
	}
	err := kt.index.Check(kt.n, func(s uint32) (uint32, bool) {
		if int(s) >= kt.n {
			return 0, false
		}
		return kt.at(s).hash, true
	})
	if err != nil {
		t.Fatalf("index: %v", err)
	}
	if size := kt.index.Size(); !reserved && size > minIndex && kt.n*8 < size {
		t.Fatalf("%d keys in an index of %d", kt.n, size)
	}
	if need := (kt.n + pageSlots - 1) >> pageBits; len(kt.pages) > need+1 {
		t.Fatalf("%d pages for %d keys", len(kt.pages), kt.n)
	}
}

// TestKeyTableAgainstMap applies random puts, overwrites, deletes, misses
// and reservations to a table and to a Go map and compares them, with a
// full hash and with hashes narrowed to a few values, so that probe runs
// are long, wrap around the index, and hold keys of equal hashes.
func TestKeyTableAgainstMap(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hashClear uint64
		keys      int
		ops       int
	}{
		{"full hash", 0, 3000, 100_000},
		{"four hashes", ^uint64(3), 300, 30_000},
		{"high hash bits only", ^uint64(0xF000_0000), 500, 30_000},
		{"one hash", ^uint64(0), 60, 10_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(tc.keys)))
			var kt keyTable
			kt.hashClear = tc.hashClear
			ref := make(map[string]uint64)
			reserved := false
			for op := 0; op < tc.ops; op++ {
				// The key space breathes: phases of growth and of shrinking
				// cross the index's and the pages' boundaries both ways.
				k := fmt.Sprintf("k%d", rng.IntN(tc.keys))
				grow := op/(tc.ops/8)%2 == 0
				switch r := rng.IntN(100); {
				case r < 45 && grow, r < 20:
					kt.put(k, tableEntry(k, uint64(op)))
					ref[k] = uint64(op)
				case r < 90:
					_, want := ref[k]
					if got := kt.delete(k); got != want {
						t.Fatalf("op %d: delete(%q) = %v, want %v", op, k, got, want)
					}
					delete(ref, k)
					reserved = reserved && !want
				case r < 99:
					_, want := ref[k]
					if _, got := kt.get(k); got != want {
						t.Fatalf("op %d: get(%q) = %v, want %v", op, k, got, want)
					}
				default:
					kt.reserve(kt.len() + rng.IntN(2*pageSlots))
					reserved = true
				}
				if op%(tc.ops/50) == 0 {
					checkTable(t, &kt, ref, reserved)
				}
			}
			checkTable(t, &kt, ref, reserved)
		})
	}
}

// TestKeyTableShrinks: a table that loses most of its keys gives back its
// index and its pages, and one that hovers around a boundary does not
// rebuild at every step.
func TestKeyTableShrinks(t *testing.T) {
	kt := newKeyTable(0)
	const n = 20 * pageSlots
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
		kt.put(keys[i], tableEntry(keys[i], 1))
	}
	bigIndex, bigPages := kt.index.Size(), len(kt.pages)
	for _, k := range keys[10:] {
		kt.delete(k)
	}
	if kt.index.Size() >= bigIndex/64 || len(kt.pages) > 2 {
		t.Fatalf("10 keys left: index of %d (was %d), %d pages (was %d)", kt.index.Size(), bigIndex, len(kt.pages), bigPages)
	}
	// Around a page boundary and an index boundary, a put and a delete
	// in turn allocate nothing.
	for _, at := range []int{48, pageSlots} { // 48: three quarters of 64
		for kt.len() < at {
			k := fmt.Sprintf("fill-%d", kt.len())
			kt.put(k, tableEntry(k, 1))
		}
		allocs := testing.AllocsPerRun(100, func() {
			kt.put("x", tableEntry("x", 1))
			kt.delete("x")
		})
		if allocs > 1 { // the entry's names
			t.Fatalf("at %d keys a put and a delete allocate %v times", at, allocs)
		}
	}
}

// TestKeyTableDeleteWhileWalking: deleting the key just yielded, as a walk
// that forgets keys would, visits every key once and leaves the others.
func TestKeyTableDeleteWhileWalking(t *testing.T) {
	for _, n := range []int{0, 1, 7, pageSlots + 3, 3 * pageSlots} {
		kt := newKeyTable(0)
		ref := make(map[string]uint64)
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("k%d", i)
			kt.put(k, tableEntry(k, uint64(i)))
			ref[k] = uint64(i)
		}
		seen := make(map[string]bool)
		for k, e := range kt.all() {
			if seen[k] {
				t.Fatalf("%d keys: %q yielded twice", n, k)
			}
			seen[k] = true
			if e.index%3 != 0 {
				kt.delete(k)
				delete(ref, k)
			}
		}
		if len(seen) != n {
			t.Fatalf("%d keys: walk yielded %d", n, len(seen))
		}
		checkTable(t, &kt, ref, false)
	}
}

// TestKeyTableReserve: a reserved table takes its keys without allocating,
// the one-allocation-a-key restore rests on it.
func TestKeyTableReserve(t *testing.T) {
	const n = 3*pageSlots + 17
	keys := make([]string, n)
	entries := make([]entry, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
		entries[i] = tableEntry(keys[i], uint64(i))
	}
	allocs := testing.AllocsPerRun(3, func() {
		kt := newKeyTable(n)
		for i, k := range keys {
			kt.put(k, entries[i])
		}
	})
	// newKeyTable: the index, the page list and four pages (the race
	// detector may add one or two); nothing a key.
	if allocs > 8 {
		t.Fatalf("filling a reserved table of %d keys allocates %v times", n, allocs)
	}
}

// BenchmarkKeyTableChurn puts two keys and deletes two per operation in a
// table of 10,000, which the cache holds: what it measures is the work of
// a put and a delete (probe, backward shift, the last slot's move), not
// the memory's latency.
func BenchmarkKeyTableChurn(b *testing.B) {
	const n = 10_000
	var kt keyTable
	keys := keysShuffled(2 * n)
	es := make([]entry, len(keys))
	for i, k := range keys {
		es[i] = tableEntry(k, 1)
	}
	for i := 0; i < n; i++ {
		kt.put(keys[i], es[i])
	}
	before := cpuTime()
	for i := 0; b.Loop(); i++ {
		old, fresh := i%n, n+i%n
		kt.put(keys[fresh], es[fresh])
		kt.delete(keys[old])
		kt.put(keys[old], es[old])
		kt.delete(keys[fresh])
	}
	reportCPU(b, before)
}

// BenchmarkKeyLookup1M compares a lookup among 1M keys in the key table
// with one in the Go map it replaced, in the same process.
func BenchmarkKeyLookup1M(b *testing.B) {
	const n = 1_000_000
	var kt keyTable
	m := make(map[string]entry)
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("svc/orders/shard-%07d", i)
		e := tableEntry(k, 1)
		kt.put(k, e)
		m[e.names[len(e.names)-len(k):]] = e
	}
	// Look the keys up at random, by copies, as a command's decoded key is.
	probe := keysShuffled(n)
	b.Run("table", func(b *testing.B) {
		before := cpuTime()
		for i := 0; b.Loop(); i++ {
			if _, ok := kt.get(probe[i%n]); !ok {
				b.Fatal("missing")
			}
		}
		reportCPU(b, before)
	})
	b.Run("map", func(b *testing.B) {
		before := cpuTime()
		for i := 0; b.Loop(); i++ {
			if _, ok := m[probe[i%n]]; !ok {
				b.Fatal("missing")
			}
		}
		reportCPU(b, before)
	})
}
