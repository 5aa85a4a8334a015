package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"

	"github.com/fenced/fenced/fence"
)

func permit(key, holder, rid string, limit int) Acquire {
	return Acquire{Key: key, Holder: holder, TTL: time.Second, RequestID: rid, Limit: limit}
}

func holdersOf(ps []KeyState) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Holder
	}
	return out
}

// The rules of a semaphore key, step by step.
func TestSemaphoreRules(t *testing.T) {
	a := &applier{f: New(Config{})}
	f := a.f
	p1 := a.at(2, permit("s", "h1", "r1", 2))
	p2 := a.at(2, permit("s", "h2", "r2", 2))
	if p1.Err != nil || p2.Err != nil || p1.Key.Token != tok(t, 2, 1) || p2.Key.Token != tok(t, 2, 2) || p2.Key.Limit != 2 {
		t.Fatalf("grants: %+v %+v", p1, p2)
	}
	var he *HeldError
	if r := a.at(2, permit("s", "h3", "r3", 2)); !errors.As(r.Err, &he) || he.Holder != "h1" || he.Token != p1.Key.Token {
		t.Fatalf("a third permit of two: %+v", r)
	}
	if r := a.at(2, permit("s", "h1", "r4", 2)); r.Err != nil || !r.Renewed || r.Key.Token != p1.Key.Token {
		t.Fatalf("a holder's second acquire renews its permit: %+v", r)
	}
	var lm *LimitMismatchError
	if r := a.at(2, permit("s", "h3", "r5", 3)); !errors.As(r.Err, &lm) || lm.Limit != 2 || !errors.Is(r.Err, ErrLimitMismatch) {
		t.Fatalf("another limit: %+v", r)
	}
	if r := a.at(2, Acquire{Key: "s", Holder: "h3", TTL: time.Second}); !errors.Is(r.Err, ErrLimitMismatch) {
		t.Fatalf("a lock acquire of a semaphore key: %+v", r)
	}
	if r := a.at(2, Release{Key: "s", Holder: "h2", Token: p1.Key.Token}); !errors.Is(r.Err, ErrNotHolder) {
		t.Fatalf("release of another's permit: %+v", r)
	}
	if r := a.at(2, Release{Key: "s", Holder: "h1", Token: tok(t, 1, 9)}); !errors.Is(r.Err, ErrStaleToken) {
		t.Fatalf("release of a stale token: %+v", r)
	}
	if r := a.at(2, Release{Key: "s", Holder: "h1", Token: p1.Key.Token, RequestID: "x1"}); r.Err != nil || !r.Changed || r.Key.State != Released || r.Key.Token != p1.Key.Token {
		t.Fatalf("release of an earlier permit: %+v", r)
	}
	if k, _ := f.Get("s"); k.Token != p2.Key.Token || k.State != Held {
		t.Fatalf("the key's last grant moved: %+v", k)
	}
	if r := a.at(2, permit("s", "h1", "r1", 2)); !errors.Is(r.Err, ErrGrantEnded) {
		t.Fatalf("a retry of an ended permit's request: %+v", r)
	}
	if r := a.at(2, permit("s", "h1", "r4", 2)); !errors.Is(r.Err, ErrGrantEnded) {
		t.Fatalf("a retry of a renewal of an ended permit: %+v", r)
	}
	if r := a.at(2, permit("s", "h2", "r2", 2)); r.Err != nil || !r.Renewed || r.Key.Token != p2.Key.Token {
		t.Fatalf("a retry of a live permit's request: %+v", r)
	}
	p3 := a.at(3, permit("s", "h3", "r6", 2))
	if p3.Err != nil || p3.Key.Token != tok(t, 3, 1) {
		t.Fatalf("a freed permit: %+v", p3)
	}
	if _, ps := f.Permits("s"); !reflect.DeepEqual(holdersOf(ps), []string{"h2", "h3"}) {
		t.Fatalf("permits %v", holdersOf(ps))
	}
	// An expiry decided before a renewal is stale; one after ends the permit.
	_, ps := f.Permits("s")
	a.at(3, permit("s", "h2", "r7", 2))
	if r := a.at(3, Expire{Key: "s", Token: p2.Key.Token, Armed: ps[0].Armed}); r.Changed {
		t.Fatalf("a stale expiry ended a renewed permit: %+v", r)
	}
	_, ps = f.Permits("s")
	if r := a.at(3, Expire{Key: "s", Token: p2.Key.Token, Armed: ps[0].Armed}); !r.Changed || r.Key.State != Expired {
		t.Fatalf("expiry: %+v", r)
	}
	// A touch arms the permit it names.
	if r := a.at(3, Touch{Keys: []TouchKey{{"s", p3.Key.Token}}}); r.Touched != 1 {
		t.Fatalf("touch: %+v", r)
	}
	if _, ps := f.Permits("s"); ps[0].Armed != a.index {
		t.Fatalf("touched permit armed at %d, want %d", ps[0].Armed, a.index)
	}
	if k, _ := f.Get("s"); k.Armed != a.index {
		t.Fatalf("the last grant's entry was not armed with its permit: %+v", k)
	}
	// No reclamation while a permit is live, even in a later epoch.
	if r := a.at(4, Reclaim{Keys: []ReclaimKey{{"s", p3.Key.Token}}}); r.Reclaim.Reclaimed != 0 {
		t.Fatalf("reclaimed a key with a live permit")
	}
	// Once the last permit ends the key is free for any shape.
	a.at(4, Release{Key: "s", Holder: "h3", Token: p3.Key.Token})
	if limit, ps := f.Permits("s"); limit != 0 || ps != nil || f.sems != nil {
		t.Fatalf("permits after the last ended: %d %v", limit, ps)
	}
	l := a.at(4, Acquire{Key: "s", Holder: "h9", TTL: time.Second})
	if l.Err != nil || l.Key.Token != tok(t, 4, 1) {
		t.Fatalf("lock after the semaphore: %+v", l)
	}
	if r := a.at(4, permit("s", "h1", "r8", 2)); !errors.As(r.Err, &lm) || lm.Limit != 0 {
		t.Fatalf("a permit of a locked key: %+v", r)
	}
	if r := a.at(4, Release{Key: "s", Holder: "h9", Token: l.Key.Token, Next: &Acquire{Key: "s", Holder: "h1", TTL: time.Second, Limit: 3}}); r.Err != nil || r.Next == nil || r.Next.Err != nil || r.Next.Key.Limit != 3 {
		t.Fatalf("a permit handed off by a lock's release: %+v %+v", r, r.Next)
	}
	if limit, ps := f.Permits("s"); limit != 3 || len(ps) != 1 {
		t.Fatalf("after the handoff: %d %v", limit, ps)
	}
}

func TestSemaphoreInvalid(t *testing.T) {
	a := &applier{f: New(Config{})}
	for _, c := range []Acquire{
		{Key: "s", Holder: "h", TTL: time.Second, Limit: MaxLimit + 1},
		{Key: "s", Holder: "h", TTL: time.Second, Limit: 2, LockDelay: maxMs + time.Millisecond},
		{Key: "s", Holder: "", TTL: time.Second, Limit: 2},
		{Key: "s", Holder: "h", TTL: 0, Limit: 2},
	} {
		if r := a.at(1, c); !errors.Is(r.Err, ErrInvalid) {
			t.Errorf("%+v: %+v", c, r)
		}
	}
	if a.f.Len() != 0 {
		t.Fatalf("an invalid acquire changed the state")
	}
	if _, err := Decode(Encode(Acquire{Key: "s", Holder: "h", TTL: time.Second, Limit: 2})[:3]); err == nil {
		t.Fatal("a truncated permit decoded")
	}
	b := Encode(Acquire{Key: "s", Holder: "h", TTL: time.Second, Limit: 1})
	b[len(b)-1] = 0 // limit 0: the encoding of a lock acquire
	if _, err := Decode(b); err == nil {
		t.Fatal("a permit acquire of limit 0 decoded")
	}
}

func TestSemaphoreCommandRoundTrip(t *testing.T) {
	for _, c := range []Command{
		Acquire{Key: "k", Holder: "h", TTL: 3 * time.Second, RequestID: "r", Value: "v", Limit: 4},
		Release{Key: "k", Holder: "h", Token: 1<<40 | 7, RequestID: "x", Next: &Acquire{Key: "k", Holder: "w", TTL: time.Second, RequestID: "y", Limit: 4}},
		Expire{Key: "k", Token: 5, Armed: 9, Next: &Acquire{Key: "k", Holder: "w", TTL: time.Second, Limit: MaxLimit}},
		Acquire{Key: "k", Holder: "h", TTL: time.Second, LockDelay: time.Second, Limit: 2},
		Release{Key: "k", Holder: "h", Token: 3, Next: &Acquire{Key: "k", Holder: "w", TTL: time.Second, LockDelay: time.Second, Shared: true}},
	} {
		got, err := Decode(Encode(c))
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("round trip %#v = %#v, %v", c, got, err)
		}
	}
	// A permit's lock-delay is version 2, which a node that refused one
	// cannot decode: it stops rather than apply the entry differently.
	b := Encode(Acquire{Key: "k", Holder: "h", TTL: time.Second, LockDelay: time.Second, Limit: 2})
	if b[1] != version2 {
		t.Fatalf("a permit with a lock-delay is version %d", b[1])
	}
	plain := Encode(Acquire{Key: "k", Holder: "h", TTL: time.Second, Limit: 2})
	if plain[1] != version1 {
		t.Fatalf("a permit without one is version %d", plain[1])
	}
	for _, bad := range [][]byte{append([]byte{b[0], version1}, b[2:]...), append([]byte{plain[0], version2}, plain[2:]...)} {
		if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("a second encoding decoded: %v", err)
		}
	}
}

// Each permit's grant and end is its own watch event, with its token and
// the key's limit.
func TestSemaphoreEvents(t *testing.T) {
	a := &applier{f: New(Config{})}
	sub, err := a.f.Feed().Subscribe("s", true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	p1 := a.at(2, permit("s", "h1", "", 2))
	p2 := a.at(2, permit("s", "h2", "", 2))
	a.at(2, Release{Key: "s", Holder: "h1", Token: p1.Key.Token})
	want := []struct {
		typ EventType
		tok fence.Token
	}{{EventGranted, p1.Key.Token}, {EventGranted, p2.Key.Token}, {EventReleased, p1.Key.Token}}
	var got []Event
	for len(got) < len(want) {
		b, err := sub.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) == 0 {
			t.Fatalf("events: %+v", got)
		}
		got = append(got, b.Events...)
	}
	for i, w := range want {
		if got[i].Type != w.typ || got[i].Token != w.tok || got[i].Limit != 2 {
			t.Fatalf("event %d: %+v, want %s %d", i, got[i], w.typ, w.tok)
		}
	}
}

// A snapshot carries the live permits; a damaged semaphore record is
// refused and changes nothing.
func TestSemaphoreSnapshot(t *testing.T) {
	a := &applier{f: New(Config{})}
	a.at(2, permit("s", "h1", "r1", 3))
	a.at(2, permit("s", "h2", "r2", 3))
	last := a.at(2, Acquire{Key: "s", Holder: "h3", TTL: time.Second, Value: "v", Limit: 3})
	a.at(2, Release{Key: "s", Holder: "h3", Token: last.Key.Token})
	a.at(2, permit("t", "h1", "", 1))
	a.at(2, Acquire{Key: "u", Holder: "h1", TTL: time.Second})
	assertRoundTrip(t, a.f)
	var buf bytes.Buffer
	if err := a.f.Image().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[4] != snapVersion5 {
		t.Fatalf("version %d", buf.Bytes()[4])
	}
	good := a.f.Image()
	damage := map[string]func(img *Image){
		"over the limit":      func(img *Image) { img.Semaphores[0].Limit = 1 },
		"unknown key":         func(img *Image) { img.Semaphores[0].Key = "zz" },
		"tokens out of order": func(img *Image) { p := img.Semaphores[0].Permits; p[0], p[1] = p[1], p[0] },
		"a holder twice":      func(img *Image) { img.Semaphores[0].Permits[1].Holder = "h1" },
		"above the last grant": func(img *Image) {
			img.Semaphores[0].Permits[1].Token = img.Keys[0].Token + 1
		},
		"the held last grant is no permit": func(img *Image) { img.Semaphores[1].Permits[0].Holder = "other" },
		"no permits":                       func(img *Image) { img.Semaphores[1].Permits = nil },
	}
	assertSpoiledRefused(t, buf.Bytes(), snapVersion5, damage)
	if !reflect.DeepEqual(good, a.f.Image()) {
		t.Fatal("the state changed")
	}
	// Without live permits, the snapshot is written in the older version.
	b := &applier{f: New(Config{})}
	r := b.at(2, permit("s", "h1", "", 2))
	b.at(2, Release{Key: "s", Holder: "h1", Token: r.Key.Token})
	buf.Reset()
	if err := b.f.Image().Encode(&buf); err != nil || buf.Bytes()[4] >= snapVersion5 {
		t.Fatalf("version %d, %v", buf.Bytes()[4], err)
	}
}

// semModel is the reference model of one key: its live permits (or its
// live lock) and the last token it granted.
type semModel struct {
	limit   int
	permits []KeyState
	lock    *KeyState
	last    fence.Token
	// delays holds each permit's lock-delay as last granted or renewed;
	// delayed the tokens of the expired permits whose slot is delayed.
	delays  map[fence.Token]time.Duration
	delayed []fence.Token
}

// Random interleavings of permit acquires (new requests and retries),
// releases, expiries, touches, lock acquires and releases, reclamations
// and term changes, checked against a reference model after every entry:
// never more than limit live permits, each to a distinct holder; never a
// lock and a permit live together; the FSM's permits are the model's;
// tokens per key strictly increase over every grant; a retry never mints.
// At the end a snapshot restores to an equal state and a replay of the log
// to the same one.
func TestPropertySemaphoreModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := New(Config{})
		a := &applier{f: f}
		var log []*raft.Log
		apply := func(term uint64, c Command) *Result {
			a.index++
			l := &raft.Log{Index: a.index, Term: term, Type: raft.LogCommand, Data: Encode(c)}
			log = append(log, l)
			return f.Apply(l).(*Result)
		}
		models := map[string]*semModel{"a": {delays: map[fence.Token]time.Duration{}}, "b": {delays: map[fence.Token]time.Duration{}}}
		// answered remembers the token each request id was answered with.
		answered := map[string]fence.Token{}
		ridHolder := map[string]string{}
		var rids []string
		term := uint64(1)
		n := rapid.IntRange(1, 300).Draw(t, "n")
		for i := 0; i < n; i++ {
			term += uint64(rapid.IntRange(0, 9).Draw(t, "bump") / 9)
			key := rapid.SampledFrom([]string{"a", "b"}).Draw(t, "key")
			m := models[key]
			holder := rapid.SampledFrom([]string{"h1", "h2", "h3", "h4", "h5"}).Draw(t, "holder")
			switch kind := rapid.IntRange(0, 10).Draw(t, "kind"); kind {
			case 0, 1, 2, 3:
				limit := rapid.SampledFrom([]int{2, 2, 2, 3}).Draw(t, "limit")
				rid := fmt.Sprintf("%s-r%d", key, i)
				retry := len(rids) > 0 && rapid.IntRange(0, 3).Draw(t, "retry") == 0
				if retry {
					rid = rapid.SampledFrom(rids).Draw(t, "rid")
					holder = ridHolder[rid]
					key = rid[:1]
					m = models[key]
				}
				delay := time.Duration(rapid.IntRange(0, 1).Draw(t, "delay")) * time.Second
				r := apply(term, Acquire{Key: key, Holder: holder, TTL: time.Second, RequestID: rid, Limit: limit, LockDelay: delay})
				if r.Err == nil {
					m.delays[r.Key.Token] = delay
				}
				mine := -1
				for j, p := range m.permits {
					if p.Holder == holder {
						mine = j
					}
				}
				switch {
				case retry:
					tk := answered[rid]
					if mine >= 0 && m.permits[mine].Token == tk {
						if r.Err != nil || !r.Renewed || r.Key.Token != tk {
							t.Fatalf("retry of %s (token %d, live): %+v", rid, tk, r)
						}
					} else if !errors.Is(r.Err, ErrGrantEnded) {
						t.Fatalf("retry of %s (token %d, ended): %+v", rid, tk, r)
					}
				case m.lock != nil || m.limit != 0 && m.limit != limit:
					if !errors.Is(r.Err, ErrLimitMismatch) {
						t.Fatalf("want limit_mismatch: %+v (model %+v)", r, m)
					}
				case mine >= 0:
					if r.Err != nil || !r.Renewed || r.Key.Token != m.permits[mine].Token {
						t.Fatalf("want renewal of %d: %+v", m.permits[mine].Token, r)
					}
					answered[rid], ridHolder[rid] = r.Key.Token, holder
					rids = append(rids, rid)
				case len(m.permits) == m.limit && m.limit != 0:
					if !errors.Is(r.Err, ErrHeld) {
						t.Fatalf("want held: %+v", r)
					}
				case len(m.permits)+len(m.delayed) >= limit:
					if !errors.Is(r.Err, ErrSlotDelayed) {
						t.Fatalf("want slot_delayed (%d live, %d delayed, limit %d): %+v", len(m.permits), len(m.delayed), limit, r)
					}
				default:
					if r.Err != nil || r.Renewed || r.Key.Token <= m.last || r.Key.Token.Epoch() != term+f.Floor() {
						t.Fatalf("want a new permit after %d: %+v", m.last, r)
					}
					m.limit, m.last = limit, r.Key.Token
					m.permits = append(m.permits, r.Key)
					answered[rid], ridHolder[rid] = r.Key.Token, holder
					rids = append(rids, rid)
				}
			case 4, 5:
				if len(m.permits) == 0 {
					continue
				}
				j := rapid.IntRange(0, len(m.permits)-1).Draw(t, "permit")
				p := m.permits[j]
				who := p.Holder
				if rapid.IntRange(0, 4).Draw(t, "wrong") == 0 {
					who = holder
				}
				r := apply(term, Release{Key: key, Holder: who, Token: p.Token, RequestID: fmt.Sprintf("rel%d", i)})
				if who != p.Holder {
					if !errors.Is(r.Err, ErrNotHolder) {
						t.Fatalf("release by %s of %s's permit: %+v", who, p.Holder, r)
					}
					continue
				}
				if r.Err != nil || !r.Changed || r.Key.Token != p.Token {
					t.Fatalf("release: %+v", r)
				}
				m.drop(j)
			case 6:
				if len(m.permits) == 0 {
					continue
				}
				_, ps := f.Permits(key)
				j := rapid.IntRange(0, len(ps)-1).Draw(t, "permit")
				armed := ps[j].Armed
				stale := rapid.Bool().Draw(t, "stale")
				if stale {
					armed--
				}
				r := apply(term, Expire{Key: key, Token: ps[j].Token, Armed: armed})
				if stale != !r.Changed {
					t.Fatalf("expire (stale %v): %+v", stale, r)
				}
				if r.Changed {
					if m.delays[ps[j].Token] > 0 {
						m.delayed = append(m.delayed, ps[j].Token)
						slices.Sort(m.delayed)
					}
					m.drop(j)
				}
			case 10:
				tok := m.last
				if len(m.delayed) > 0 && rapid.Bool().Draw(t, "delayed") {
					tok = rapid.SampledFrom(m.delayed).Draw(t, "slot")
				}
				r := apply(term, DelayEnd{Key: key, Token: tok})
				j := slices.Index(m.delayed, tok)
				if r.Changed != (j >= 0) || r.Changed && (r.Key.Token != tok || r.Key.State != Expired || r.Key.LockDelay != 0 || !r.Key.Permit()) {
					t.Fatalf("delay end of %d (delayed %v): %+v", tok, m.delayed, r)
				}
				if j >= 0 {
					m.delayed = slices.Delete(m.delayed, j, j+1)
				}
			case 7:
				if len(m.permits) > 0 {
					p := m.permits[rapid.IntRange(0, len(m.permits)-1).Draw(t, "permit")]
					if r := apply(term, Touch{Keys: []TouchKey{{key, p.Token}}}); r.Touched != 1 {
						t.Fatalf("touch: %+v", r)
					}
				}
			case 8:
				if m.lock != nil {
					r := apply(term, Release{Key: key, Holder: m.lock.Holder, Token: m.lock.Token})
					if r.Err != nil || !r.Changed {
						t.Fatalf("lock release: %+v", r)
					}
					m.lock = nil
					continue
				}
				r := apply(term, Acquire{Key: key, Holder: holder, TTL: time.Second})
				if len(m.permits) > 0 {
					if !errors.Is(r.Err, ErrLimitMismatch) {
						t.Fatalf("lock of a semaphore key: %+v", r)
					}
					continue
				}
				if len(m.delayed) > 0 {
					if !errors.Is(r.Err, ErrSlotDelayed) {
						t.Fatalf("lock of a key with delayed slots: %+v", r)
					}
					continue
				}
				if r.Err != nil || r.Key.Token <= m.last {
					t.Fatalf("lock after %d: %+v", m.last, r)
				}
				k := r.Key
				m.lock, m.last = &k, k.Token
			default:
				last, ok := f.Get(key)
				if !ok {
					continue
				}
				r := apply(term, Reclaim{Floor: f.Floor() + 1, Keys: []ReclaimKey{{key, last.Token}}})
				if r.Reclaim.Reclaimed == 1 && (len(m.permits) > 0 || m.lock != nil || len(m.delayed) > 0) {
					t.Fatalf("reclaimed a key with a live grant or a delayed slot")
				}
			}
			for key, m := range models {
				limit, ps := f.Permits(key)
				if len(ps) > limit || len(ps) != len(m.permits) || len(ps) > 0 && limit != m.limit {
					t.Fatalf("key %s: FSM has %d permits of limit %d, model %d of %d", key, len(ps), limit, len(m.permits), m.limit)
				}
				for j := range ps {
					if ps[j].Token != m.permits[j].Token || ps[j].Holder != m.permits[j].Holder {
						t.Fatalf("key %s permit %d: %+v, model %+v", key, j, ps[j], m.permits[j])
					}
				}
				var slots []fence.Token
				for _, s := range f.SlotDelays(key) {
					slots = append(slots, s.Token)
				}
				if !slices.Equal(slots, m.delayed) {
					t.Fatalf("key %s: delayed slots %v, model %v", key, slots, m.delayed)
				}
				if k, ok := f.Get(key); ok && k.State == Held && len(ps) == 0 && m.lock == nil {
					t.Fatalf("key %s held as a lock outside the model", key)
				}
			}
		}
		assertRoundTrip(t, f)
		g := New(Config{})
		g.ApplyBatch(log)
		if !reflect.DeepEqual(f.Image().sort(), g.Image().sort()) {
			t.Fatalf("a replay of the log differs")
		}
	})
}

func (m *semModel) drop(j int) {
	m.permits = append(m.permits[:j:j], m.permits[j+1:]...)
	if len(m.permits) == 0 {
		m.limit = 0
	}
}

// A restore from backup ends every live permit: the image then installs,
// and a retry of any permit's request id is told its grant ended rather
// than given a second permit.
func TestEndPermitsForARestore(t *testing.T) {
	a := &applier{f: New(Config{})}
	a.at(2, permit("s", "h1", "r1", 3))
	a.at(2, permit("s", "h2", "r2", 3))
	a.at(2, permit("s", "h3", "r3", 3))
	a.at(2, permit("s", "h1", "r4", 3)) // a renewal by a new request id
	img := a.f.Image()
	if n := img.EndPermits(); n != 2 {
		t.Fatalf("ended %d permits beside the last grant", n)
	}
	for i := range img.Keys {
		if img.Keys[i].State == Held {
			img.Keys[i].State = Expired
		}
	}
	var buf bytes.Buffer
	if err := img.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	g := &applier{f: New(Config{}), index: a.index}
	if err := g.f.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	for _, rid := range []string{"r1", "r2", "r3", "r4"} {
		holder := map[string]string{"r1": "h1", "r2": "h2", "r3": "h3", "r4": "h1"}[rid]
		if r := g.at(3, permit("s", holder, rid, 3)); !errors.Is(r.Err, ErrGrantEnded) {
			t.Fatalf("retry of %s after the restore: %+v", rid, r)
		}
	}
	if r := g.at(3, permit("s", "h9", "new", 1)); r.Err != nil || r.Key.Token != tok(t, 3, 1) {
		t.Fatalf("a new permit after the restore: %+v", r)
	}
}

// Shape says what a listing shows of a key: a semaphore's limit and live
// permits, a key's live shared grants, nothing for a lock or for a key
// whose permits all ended.
func TestShape(t *testing.T) {
	a := &applier{f: New(Config{})}
	f := a.f
	p1 := a.at(2, permit("s", "h1", "r1", 3))
	p2 := a.at(2, permit("s", "h2", "r2", 3))
	a.at(2, shared("doc", "r1", "r3"))
	a.at(2, shared("doc", "r2", "r4"))
	a.at(2, shared("doc", "r3", "r5"))
	a.at(2, Acquire{Key: "lock", Holder: "h", TTL: time.Second, RequestID: "r6"})
	type shape struct {
		limit  int
		shared bool
		live   int
	}
	check := func(key string, want shape) {
		t.Helper()
		var got shape
		got.limit, got.shared, got.live = f.Shape(key)
		if got != want {
			t.Fatalf("Shape(%q) = %+v, want %+v", key, got, want)
		}
	}
	check("s", shape{3, false, 2})
	check("doc", shape{0, true, 3})
	check("lock", shape{})
	check("absent", shape{})
	if r := a.at(2, Release{Key: "s", Holder: "h1", Token: p1.Key.Token}); r.Err != nil {
		t.Fatal(r.Err)
	}
	check("s", shape{3, false, 1})
	if r := a.at(2, Release{Key: "s", Holder: "h2", Token: p2.Key.Token}); r.Err != nil {
		t.Fatal(r.Err)
	}
	check("s", shape{})
}
