package fsm

import (
	heapq "container/heap"
	"slices"
	"strings"
)

// PageQuery selects a page of keys in name order: the keys that start with
// Prefix, whose names come after After, that Keep (nil: every one) keeps, at
// most Limit of them.
type PageQuery struct {
	Prefix, After string
	Limit         int
	// Keep is asked of each key that could be on the page, under the state
	// machine's read lock: it must be quick and must not call the FSM.
	Keep func(key string, state State) bool
}

// Page returns the keys q selects, in name order, and whether more follow
// the page. It walks the table once and keeps only the Limit+1 smallest
// names it has met, so a page costs one pass and no copy or sort of the
// whole table (GET /v1/keys at 6,000 keys copied and sorted them all for a
// page of one).
func (f *FSM) Page(q PageQuery) (page []KeyState, more bool) {
	if q.Limit <= 0 {
		return nil, false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	h := pageHeap{max: q.Limit + 1}
	for name, e := range f.keys.all() {
		if !strings.HasPrefix(name, q.Prefix) || name <= q.After && q.After != "" || h.full() && name >= h.top() {
			continue
		}
		if q.Keep != nil && !q.Keep(name, e.state) {
			continue
		}
		h.offer(pageItem{name: name, e: e})
	}
	items := h.items
	slices.SortFunc(items, func(a, b pageItem) int { return strings.Compare(a.name, b.name) })
	if more = len(items) > q.Limit; more {
		items = items[:q.Limit]
	}
	page = make([]KeyState, len(items))
	for i, it := range items {
		page[i] = f.keyState(it.name, it.e)
	}
	return page, more
}

type pageItem struct {
	name string
	e    entry
}

// pageHeap keeps the max smallest names offered: a max-heap whose top is
// the largest kept, replaced by any smaller one once it is full.
type pageHeap struct {
	items []pageItem
	max   int
}

func (h *pageHeap) full() bool  { return len(h.items) == h.max }
func (h *pageHeap) top() string { return h.items[0].name }

func (h *pageHeap) offer(it pageItem) {
	if !h.full() {
		heapq.Push(h, it)
		return
	}
	h.items[0] = it
	heapq.Fix(h, 0)
}

func (h *pageHeap) Len() int           { return len(h.items) }
func (h *pageHeap) Less(i, j int) bool { return h.items[i].name > h.items[j].name }
func (h *pageHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *pageHeap) Push(x any)         { h.items = append(h.items, x.(pageItem)) }
func (h *pageHeap) Pop() any {
	it := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return it
}
