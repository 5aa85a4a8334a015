package fsm

import "slices"

// A snapshot shares the key table's pages instead of copying the keys: it
// keeps the page list as it was (a keyView), and the table copies a page
// before its first write to it while a view may still read it. A page is
// 1,024 slots, so a snapshot of a million keys costs a list of about a
// thousand pages up front, and then one page's copy for each page written
// while raft persists it: nothing, on a quiet cluster, and at most the
// table's own size, where a copy of every key was 64 bytes a key at once.
//
// The table knows which pages a view may share by generations: a view
// takes the table's next generation, and a page records the generation it
// was last made the table's own at (made, grown or copied). While any view
// is live, a page made at or before the newest view's generation may be in
// a view; every other page is the table's alone. Views are counted on a
// sharing record of the table that made them, so a view released after a
// restore or a reset replaced the table leaves the new table's count alone.

// sharing counts a table's live views.
type sharing struct {
	// frozen is the generation of the newest view; pages made after it
	// have frozen+1.
	frozen uint64
	// views is the number of views not yet released.
	views int
}

// keyView is the key table's slots as they were when it was made. Nothing
// writes to its pages while it is live; it must be released once read.
type keyView struct {
	pages [][]slot
	n     int
	sh    *sharing
}

// at returns the slot numbered i.
func (v *keyView) at(i uint32) *slot { return &v.pages[i>>pageBits][i&(pageSlots-1)] }

// view returns the table's slots as they are now, sharing its pages.
// The caller holds the FSM's write lock, as for any change to the table.
func (t *keyTable) view() *keyView {
	if t.sh == nil {
		t.sh = &sharing{}
	}
	t.sh.frozen++
	t.sh.views++
	return &keyView{pages: slices.Clone(t.pages), n: t.n, sh: t.sh}
}

// release ends the view: the table may write to its pages again once no
// other view is live. The caller holds the FSM's write lock.
func (v *keyView) release() {
	if v.sh != nil {
		v.sh.views--
		v.sh = nil
	}
}

// made returns the generation a page made now records.
func (t *keyTable) made() uint64 {
	if t.sh == nil {
		return 0
	}
	return t.sh.frozen + 1
}

// own makes page p the table's alone, copying it if a live view may share
// it, and returns it. Every write to a page's slots goes through own.
func (t *keyTable) own(p int) []slot {
	pg := t.pages[p]
	if t.sh != nil && t.sh.views > 0 && t.gens[p] <= t.sh.frozen {
		c := make([]slot, len(pg), cap(pg))
		copy(c, pg)
		t.pages[p], t.gens[p] = c, t.made()
		pg = c
	}
	return pg
}

// writable returns the slot numbered i, in a page the table owns.
func (t *keyTable) writable(i uint32) *slot {
	return &t.own(int(i >> pageBits))[i&(pageSlots-1)]
}
