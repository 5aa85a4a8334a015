package cluster

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/openaddr"
)

// checkTable checks every invariant of a lease table's layout: the slab's
// free slots are cleared and listed once, every lease is in the key index,
// the heap (in order, each lease knowing its slot) and its holder's list,
// and the namespace counts and lock-delays name only live leases.
func checkTable(l *leases) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if int(l.top) > len(l.chunks)*chunkSize {
		return fmt.Errorf("top %d beyond %d chunks", l.top, len(l.chunks))
	}
	free := map[int32]bool{}
	for i := l.free; i != none; i = l.rec(i).next {
		if i < 0 || i >= l.top || free[i] {
			return fmt.Errorf("free list: slot %d out of range or listed twice", i)
		}
		free[i] = true
		r := *l.rec(i)
		r.next = 0
		if r != (leaseRec{holder: none, prev: none, slot: none}) {
			return fmt.Errorf("free slot %d not cleared: %+v", i, r)
		}
		if _, ok := l.grantDelays[i]; ok {
			return fmt.Errorf("free slot %d keeps a lock-delay", i)
		}
	}
	live := 0
	for i := int32(0); i < l.top; i++ {
		r := l.rec(i)
		if r.holder == none {
			if !free[i] {
				return fmt.Errorf("slot %d is free but not listed", i)
			}
			continue
		}
		live++
		if got := l.lookup(r.keyString()); got != i {
			return fmt.Errorf("lease %d (%q): the index finds %d", i, r.keyString(), got)
		}
		if s := r.slot; s < 0 || int(s) >= len(l.heap) || l.heap[s] != i {
			return fmt.Errorf("lease %d: heap slot %d does not hold it", i, s)
		}
		if r.due > r.deadline {
			return fmt.Errorf("lease %d: due %d after its deadline %d", i, r.due, r.deadline)
		}
	}
	if live != l.n || len(l.heap) != l.n {
		return fmt.Errorf("%d leases in the slab, n %d, heap %d", live, l.n, len(l.heap))
	}
	err := l.index.Check(l.n, func(ref uint32) (uint32, bool) {
		if i := int32(ref); i >= 0 && i < l.top && l.rec(i).holder != none {
			return l.hash(l.rec(i).keyString()), true
		}
		return 0, false
	})
	if err != nil {
		return fmt.Errorf("index: %v", err)
	}
	for s := 1; s < len(l.heap); s++ {
		if l.less(s, (s-1)/2) {
			return fmt.Errorf("heap out of order at %d", s)
		}
	}
	under, inLists := map[string]int{}, 0
	for name, h := range l.byHolder {
		hl := l.holders[h]
		if hl.holder != name {
			return fmt.Errorf("holder %q: list of %q", name, hl.holder)
		}
		n, prev := int32(0), none
		for i := hl.first; i != none; i = l.rec(i).next {
			if r := l.rec(i); r.holder != h || r.prev != prev || n > int32(l.n) {
				return fmt.Errorf("holder %q: list broken at lease %d", name, i)
			}
			prev = i
			n++
		}
		if n != hl.n || n == 0 {
			return fmt.Errorf("holder %q: %d leases listed, %d counted", name, n, hl.n)
		}
		inLists += int(n)
		for i := range name {
			if name[i] == '/' {
				under[name[:i]] += int(n)
			}
		}
	}
	if inLists != l.n {
		return fmt.Errorf("%d leases in holder lists, %d in the table", inLists, l.n)
	}
	if len(under) != len(l.under) {
		return fmt.Errorf("namespace counts %v, want %v", l.under, under)
	}
	for ns, c := range under {
		if l.under[ns] != c {
			return fmt.Errorf("namespace counts %v, want %v", l.under, under)
		}
	}
	for i := range l.grantDelays {
		if i >= l.top || l.rec(i).holder == none {
			return fmt.Errorf("lock-delay of slot %d, which holds no lease", i)
		}
	}
	return nil
}

// refGrant is a grant as the reference model of the lease table keeps it.
type refGrant struct {
	k        fsm.KeyState
	armed    bool  // the table has its lease
	deadline int64 // on the fake clock
}

// refModel is the state machine's live grants and what a lease table
// driven by them must do, on a fake clock.
type refModel struct {
	now    int64
	gen    uint64 // 0: no leader
	gens   uint64 // generations so far
	grants map[string]*refGrant
	token  fence.Token
}

func (m *refModel) due() map[string]fsm.Expire {
	out := map[string]fsm.Expire{}
	for key, g := range m.grants {
		if g.armed && g.deadline <= m.now {
			out[key] = fsm.Expire{Key: key, Token: g.k.Token, Armed: g.k.Armed}
		}
	}
	return out
}

// TestLeaseTableMatchesReferenceModel drives a lease table and a simple
// model with random arms, re-arms, renewals, keepalives, releases, clock
// steps with and without the timer, deactivations and activations, bursts
// that grow the slab and mass releases that shrink it, on a fake clock.
// Every expiry proposed is exactly the model's due set at that moment, so
// every lease expires once and never before its deadline; every renewal
// and keepalive answers as the model does, with the grant's own lock-delay
// (a reused slot inherits none); and the layout stays consistent.
func TestLeaseTableMatchesReferenceModel(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runLeaseModel(t, seed, 3000) })
	}
}

func runLeaseModel(t *testing.T, seed int64, steps int) {
	rng := rand.New(rand.NewSource(seed))
	m := &refModel{grants: map[string]*refGrant{}}
	var expired []fsm.Expire
	delays := map[fsm.Expire]time.Duration{}
	l := newLeases(hclog.NewNullLogger(), func(gen uint64, e fsm.Expire, d time.Duration) {
		if gen != m.gen {
			t.Errorf("expiry of %s by generation %d, want %d", e.Key, gen, m.gen)
		}
		expired = append(expired, e)
		delays[e] = d
	}, nil)
	// Hours of fake time: the real timers, armed for as long, never fire
	// while the test runs; fire is called below instead.
	l.clock = func() int64 { return m.now }
	defer l.deactivate()
	var stats struct{ chunks, shrinks, maxN, expiries, renewals, activations int }
	defer func() { t.Logf("%+v", stats) }()
	holders := []string{"a", "a/w1", "a/w1/t", "b", "b/x", "c"}
	const pool = 3000
	key := func() string { return fmt.Sprintf("k%d", rng.Intn(pool)) }
	// heldKey mostly returns a key with a grant.
	heldKey := func() string {
		k := key()
		for try := 0; try < 20 && m.grants[k] == nil; try++ {
			k = key()
		}
		return k
	}
	arm := func(k string) {
		g := m.grants[k]
		if g == nil {
			m.token++
			g = &refGrant{k: fsm.KeyState{Key: strings.Clone(k), Holder: holders[rng.Intn(len(holders))], Token: m.token, State: fsm.Held}}
			m.grants[k] = g
		} // else a re-arm by the holder's acquire: same token, new arm count
		g.k.Armed++
		g.k.TTL = time.Duration(1+rng.Intn(50)) * time.Hour
		g.k.LockDelay = 0
		if rng.Intn(3) == 0 {
			g.k.LockDelay = time.Duration(1+rng.Intn(5)) * time.Minute
		}
		l.granted(g.k)
		if m.gen != 0 {
			g.armed, g.deadline = true, m.now+int64(g.k.TTL)
		}
	}
	release := func(k string) {
		g := m.grants[k]
		if g == nil {
			return
		}
		if rng.Intn(10) == 0 { // a stale release changes nothing
			l.ended(fsm.KeyState{Key: k, Token: g.k.Token - 1, State: fsm.Released})
			return
		}
		l.ended(fsm.KeyState{Key: k, Token: g.k.Token, State: fsm.Released})
		delete(m.grants, k)
	}
	fire := func() {
		want := m.due()
		expired = expired[:0]
		l.fire(m.gen)
		if len(expired) != len(want) {
			t.Fatalf("at %v: %d expiries proposed, want %d", time.Duration(m.now), len(expired), len(want))
		}
		stats.expiries += len(expired)
		for _, e := range expired {
			if want[e.Key] != e {
				t.Fatalf("at %v: expiry %+v proposed, want %+v", time.Duration(m.now), e, want[e.Key])
			}
			g := m.grants[e.Key]
			if delays[e] != g.k.LockDelay {
				t.Fatalf("expiry of %s with lock-delay %v, want %v", e.Key, delays[e], g.k.LockDelay)
			}
			delete(m.grants, e.Key) // applied: the grant ended
			l.ended(fsm.KeyState{Key: e.Key, Token: e.Token, State: fsm.Expired, LockDelay: g.k.LockDelay})
		}
	}
	checkState := func(k fsm.KeyState, g *refGrant, dl time.Time) {
		t.Helper()
		if k != g.k {
			t.Fatalf("renewal answered %+v, want %+v", k, g.k)
		}
		if dl.Sub(l.base) != time.Duration(g.deadline) {
			t.Fatalf("%s renewed until %v, want %v", k.Key, dl.Sub(l.base), time.Duration(g.deadline))
		}
	}
	for step := 0; step < steps; step++ {
		switch op := rng.Intn(100); {
		case op < 30:
			k := key()
			if g := m.grants[k]; g == nil || rng.Intn(2) == 0 {
				arm(k)
			}
		case op < 45:
			release(heldKey())
		case op < 60: // renew, by the right or a wrong holder or token
			k := heldKey()
			g := m.grants[k]
			holder, tok := "a", fence.Token(1)
			if g != nil && rng.Intn(5) != 0 {
				holder, tok = g.k.Holder, g.k.Token
			}
			ks, dl, ok := l.renew(k, holder, tok)
			want := g != nil && g.armed && g.k.Holder == holder && g.k.Token == tok && g.deadline > m.now
			if ok != want {
				t.Fatalf("step %d: renewal of %s by %s/%d: %v, want %v", step, k, holder, tok, ok, want)
			}
			if ok {
				stats.renewals++
				g.deadline = m.now + int64(g.k.TTL)
				checkState(ks, g, dl)
			}
		case op < 68: // keepalive
			h := holders[rng.Intn(len(holders))]
			got, _ := l.renewHolder(h, nil)
			want := 0
			for _, g := range m.grants {
				if g.armed && g.k.Holder == h && g.deadline > m.now {
					want++
					g.deadline = m.now + int64(g.k.TTL)
				}
			}
			if len(got) != want {
				t.Fatalf("step %d: keepalive of %s renewed %d leases, want %d", step, h, len(got), want)
			}
			for _, r := range got {
				checkState(r.Key, m.grants[r.Key.Key], r.Deadline)
			}
		case op < 75:
			k := heldKey()
			g, tok := m.grants[k], m.token
			if g != nil && rng.Intn(4) != 0 {
				tok = g.k.Token
			}
			dl, ok := l.live(k, tok)
			if want := g != nil && g.armed && g.k.Token == tok && g.deadline > m.now; ok != want || (ok && dl.Sub(l.base) != time.Duration(g.deadline)) {
				t.Fatalf("step %d: live(%s) = %v %v", step, k, dl, ok)
			}
		case op < 90: // time passes; the timer is on time, or late
			m.now += int64(rng.Intn(5 * int(time.Hour)))
			if rng.Intn(4) != 0 {
				fire()
			}
		case op < 93:
			// A burst: the slab grows past one chunk.
			for i := 0; i < 1200; i++ {
				if k := key(); m.grants[k] == nil {
					arm(k)
				}
			}
		case op < 96:
			// A mass release: the slab becomes mostly free and shrinks.
			for i := 0; i < pool; i++ {
				if k := fmt.Sprintf("k%d", i); m.grants[k] != nil && rng.Intn(10) != 0 {
					release(k)
				}
			}
		case op < 97:
			// Leadership lost: a late timer proposes nothing.
			old := m.gen
			l.deactivate()
			m.gen = 0
			for _, g := range m.grants {
				g.armed = false
			}
			expired = expired[:0]
			l.fire(old)
			if len(expired) != 0 {
				t.Fatalf("step %d: a deactivated table proposed %d expiries", step, len(expired))
			}
		default:
			// A new leader re-arms every grant for a full TTL.
			live := make([]fsm.KeyState, 0, len(m.grants))
			for _, g := range m.grants {
				live = append(live, g.k)
			}
			slices.SortFunc(live, func(a, b fsm.KeyState) int { return strings.Compare(a.Key, b.Key) })
			rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
			old := m.gen
			m.gens++
			m.gen = m.gens
			l.activate(m.gen, walkList(live), nil)
			stats.activations++
			for _, g := range m.grants {
				g.armed, g.deadline = true, m.now+int64(g.k.TTL)
			}
			if old != 0 {
				expired = expired[:0]
				l.fire(old)
				if len(expired) != 0 {
					t.Fatalf("step %d: a timer of generation %d proposed in generation %d", step, old, m.gen)
				}
			}
		}
		l.mu.Lock()
		if c := len(l.chunks); c < stats.chunks {
			stats.shrinks++
		} else if c > stats.chunks {
			stats.chunks = c
		}
		stats.chunks = len(l.chunks)
		stats.maxN = max(stats.maxN, l.n)
		l.mu.Unlock()
		if step%10 == 0 || step == steps-1 {
			if err := checkTable(l); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	}
	// Every armed lease expires, once.
	m.now += int64(100 * time.Hour)
	fire()
	for k, g := range m.grants {
		if g.armed {
			t.Fatalf("%s never expired", k)
		}
	}
	if err := checkTable(l); err != nil {
		t.Fatal(err)
	}
}

// A slot freed by one lease and taken by the next inherits nothing of the
// first: not its lock-delay, which a renewal and the expiry would report.
func TestLeaseSlotReuseInheritsNoLockDelay(t *testing.T) {
	var now int64
	var got []time.Duration
	l := newLeases(hclog.NewNullLogger(), func(_ uint64, _ fsm.Expire, d time.Duration) { got = append(got, d) }, nil)
	l.clock = func() int64 { return now }
	l.activate(1, walkList(nil), nil)
	defer l.deactivate()
	l.granted(fsm.KeyState{Key: "delayed", Holder: "h", Token: 1, TTL: time.Hour, LockDelay: time.Minute, State: fsm.Held})
	l.mu.Lock()
	first := l.lookup("delayed")
	l.mu.Unlock()
	l.ended(fsm.KeyState{Key: "delayed", Token: 1, State: fsm.Released})
	l.granted(fsm.KeyState{Key: "plain", Holder: "h", Token: 2, TTL: time.Hour, State: fsm.Held})
	l.mu.Lock()
	second := l.lookup("plain")
	l.mu.Unlock()
	if second != first {
		t.Fatalf("the new lease took slot %d, not the freed %d", second, first)
	}
	if k, _, ok := l.renew("plain", "h", 2); !ok || k.LockDelay != 0 {
		t.Fatalf("renewal of plain: lock-delay %v (%v), want none", k.LockDelay, ok)
	}
	now += int64(2 * time.Hour)
	l.fire(1)
	if !slices.Equal(got, []time.Duration{0}) {
		t.Fatalf("expiries proposed with lock-delays %v, want one without", got)
	}
	if err := checkTable(l); err != nil {
		t.Fatal(err)
	}
}

// A table that grew to many chunks and then lost most of its leases gives
// the memory back, and its remaining leases keep their keys, deadlines,
// holders and lock-delays; a deactivated table holds nothing.
func TestLeaseTableShrinksWhenMostlyFree(t *testing.T) {
	var now int64
	l := newLeases(hclog.NewNullLogger(), func(uint64, fsm.Expire, time.Duration) {}, nil)
	l.clock = func() int64 { return now }
	l.activate(1, walkList(nil), nil)
	defer l.deactivate()
	const n = 5 * chunkSize
	ks := make([]fsm.KeyState, n)
	for i := range ks {
		ks[i] = fsm.KeyState{Key: fmt.Sprintf("k%d", i), Holder: fmt.Sprintf("h%d", i%3), Token: fence.Token(i + 1), TTL: time.Duration(1+i%7) * time.Hour, State: fsm.Held}
		if i%5 == 0 {
			ks[i].LockDelay = time.Duration(i) * time.Millisecond
		}
		l.granted(ks[i])
	}
	now += int64(time.Minute)
	kept := ks[:0:0]
	for i, k := range ks {
		if i%50 == 0 {
			kept = append(kept, k)
			continue
		}
		l.ended(fsm.KeyState{Key: k.Key, Token: k.Token, State: fsm.Released})
	}
	l.mu.Lock()
	chunks, index, heap := len(l.chunks), l.index.Size(), cap(l.heap)
	l.mu.Unlock()
	if chunks != 1 || index > openaddr.SizeFor(4*len(kept), minIndex) || heap > 4*len(kept) {
		t.Fatalf("%d leases left in %d chunks, an index of %d, a heap of %d", len(kept), chunks, index, heap)
	}
	if err := checkTable(l); err != nil {
		t.Fatal(err)
	}
	for _, k := range kept {
		got, dl, ok := l.renew(k.Key, k.Holder, k.Token)
		if !ok || got != k || dl.Sub(l.base) != time.Duration(now)+k.TTL {
			t.Fatalf("after the slab shrank, renewal of %s: %+v until %v (%v), want %+v", k.Key, got, dl.Sub(l.base), ok, k)
		}
	}
	l.deactivate()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.chunks != nil || l.index.Size() != 0 || l.heap != nil || l.holders != nil || len(l.grantDelays) != 0 {
		t.Fatal("a deactivated table keeps memory")
	}
}

// A walk that yields a key twice leaves one lease, the later grant's, in
// batches of activate or across them.
func TestLeaseActivateKeepsTheLaterOfTwoGrantsOfAKey(t *testing.T) {
	l := newLeases(hclog.NewNullLogger(), func(uint64, fsm.Expire, time.Duration) {}, nil)
	defer l.deactivate()
	var live []fsm.KeyState
	for i := 0; i < 3*activateBatch; i++ {
		live = append(live, fsm.KeyState{Key: fmt.Sprintf("k%d", i%(activateBatch+5)), Holder: "h", Token: fence.Token(i + 1), TTL: time.Hour, State: fsm.Held})
	}
	l.activate(1, walkList(live), nil)
	if err := checkTable(l); err != nil {
		t.Fatal(err)
	}
	last := map[string]fence.Token{}
	for _, k := range live {
		last[k.Key] = k.Token
	}
	if got := l.holderCount("h"); got != len(last) {
		t.Fatalf("%d leases for %d keys", got, len(last))
	}
	for key, tok := range last {
		if _, ok := l.live(key, tok); !ok {
			t.Fatalf("%s: the lease of token %d is not live", key, tok)
		}
	}
}

// A new leader re-arms while it waits out its takeover: the leases it arms
// then count their TTL, and lock-delays theirs, from the wait's end, never
// from the moment of the re-arm (activateFrom).
func TestLeaseActivateFromCountsFromTheTakeover(t *testing.T) {
	var now int64
	var expired []string
	l := newLeases(hclog.NewNullLogger(), func(_ uint64, e fsm.Expire, _ time.Duration) { expired = append(expired, e.Key) }, nil)
	l.clock = func() int64 { return now }
	const wait = 300 * time.Millisecond
	live := []fsm.KeyState{{Key: "k", Holder: "h", Token: 7, TTL: time.Second, State: fsm.Held}}
	delayed := []fsm.KeyState{{Key: "d", Token: 3, State: fsm.Expired, LockDelay: time.Second}}
	l.activateFrom(1, l.at(now).Add(wait), walkList(live), delayed)
	defer l.deactivate()

	now = int64(time.Second + wait - time.Millisecond) // a full TTL after the re-arm, not after the wait
	if _, ok := l.live("k", 7); !ok {
		t.Fatal("the lease ended a TTL after the re-arm, before a TTL after the takeover wait")
	}
	if left, ok := l.lockDelayLeft("d"); !ok || left != time.Millisecond {
		t.Fatalf("lock-delay of d: %v left (%v), want 1ms: a full delay after the takeover wait", left, ok)
	}
	l.fire(1)
	if len(expired) != 0 {
		t.Fatalf("expiries %v proposed before a TTL after the takeover wait", expired)
	}
	now = int64(time.Second + wait)
	if _, ok := l.live("k", 7); ok {
		t.Fatal("the lease outlived a TTL after the takeover wait")
	}
	l.fire(1)
	if !slices.Equal(expired, []string{"k"}) {
		t.Fatalf("expiries %v, want [k]", expired)
	}
}
