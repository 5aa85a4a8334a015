package cluster

import (
	"sort"
	"sync"
	"time"
)

// maxTakeovers bounds the takeovers a node remembers. Forgetting the
// oldest is safe: a grant armed before every remembered takeover is then
// counted from the oldest remembered one, which is later than the one it
// stands for, so its lease only gets longer.
const maxTakeovers = 1024

// takeover is the first Barrier entry of a term (a new leader commits one
// before it serves, and no entry of its own before it), and when this node
// applied it, on its monotonic clock.
type takeover struct {
	index uint64
	at    time.Time
}

// takeovers are the takeovers this node applied since it started or last
// installed a snapshot, oldest first. Every node keeps them, leader or not:
// a follower that becomes leader needs the times at which it applied its
// predecessors' barriers.
type takeovers struct {
	mu   sync.Mutex
	term uint64 // the last term whose takeover is recorded
	recs []takeover
}

// barrier records a Barrier entry applied just now, if it is the first of
// a term later than any recorded (a replay after a restart applies the
// same entries again: they are recorded once, the first time).
func (t *takeovers) barrier(index, term uint64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if term <= t.term || (len(t.recs) > 0 && index <= t.recs[len(t.recs)-1].index) {
		return
	}
	t.term = term
	if len(t.recs) == maxTakeovers {
		copy(t.recs, t.recs[1:])
		t.recs = t.recs[:len(t.recs)-1]
	}
	t.recs = append(t.recs, takeover{index: index, at: at})
}

// after returns when this node applied the first takeover after log index
// armed; false if it knows of none.
func (t *takeovers) after(armed uint64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.recs), func(i int) bool { return t.recs[i].index > armed })
	if i == len(t.recs) {
		return time.Time{}, false
	}
	return t.recs[i].at, true
}

// reset forgets every takeover: the state was replaced by a snapshot, whose
// grants' Armed indices may come from another log (a restored backup).
func (t *takeovers) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.term, t.recs = 0, nil
}
