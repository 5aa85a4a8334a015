package history

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// What a flooding tenant does, as a Tally counts it.
const (
	// FloodWatch: watch streams of the flooder's own prefix that it never
	// reads, past its share of watches.
	FloodWatch = "watch"
	// FloodCycle: acquires and releases of ever new keys of its own, each
	// with a fresh request id and a 1 KiB value (request-id volume, ended
	// keys).
	FloodCycle = "cycle"
	// FloodWait: waiting acquires of a key of its own that it holds.
	FloodWait = "wait"
	// FloodVictimAcquire: acquires, waiting or not, of the other tenant's
	// keys.
	FloodVictimAcquire = "victim-acquire"
	// FloodVictimRead: reads of the other tenant's keys.
	FloodVictimRead = "victim-read"
)

// CodeOK is a Tally's code of a request that was served; CodeTransport that
// of one that got no answer of fenced's (a connection refused or cut while
// a node was down).
const (
	CodeOK        = "ok"
	CodeTransport = "transport"
)

// Tally counts a flooding tenant's requests by what it did and the answer's
// wire code. It is safe for concurrent use; its zero value is not: use
// NewTally.
type Tally struct {
	mu sync.Mutex
	n  map[string]map[string]int
}

// NewTally returns an empty tally.
func NewTally() *Tally { return &Tally{n: map[string]map[string]int{}} }

// Add counts one answer of kind with code.
func (t *Tally) Add(kind, code string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n[kind] == nil {
		t.n[kind] = map[string]int{}
	}
	t.n[kind][code]++
}

// Counts returns a copy of the counts: kind, then code.
func (t *Tally) Counts() map[string]map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]map[string]int, len(t.n))
	for k, codes := range t.n {
		out[k] = make(map[string]int, len(codes))
		for c, n := range codes {
			out[k][c] = n
		}
	}
	return out
}

// Describe renders counts in a stable order: "watch: ok 40, too_many_watches
// 12; cycle: ...".
func Describe(counts map[string]map[string]int) string {
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		codes := make([]string, 0, len(counts[k]))
		for c := range counts[k] {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		var cs []string
		for _, c := range codes {
			cs = append(cs, fmt.Sprintf("%s %d", c, counts[k][c]))
		}
		parts = append(parts, k+": "+strings.Join(cs, ", "))
	}
	return strings.Join(parts, "; ")
}
