package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"

	"github.com/fenced/fenced/fence"
)

// applier feeds commands to an FSM as committed entries of a given term.
type applier struct {
	f     *FSM
	index uint64
}

// at applies c as the next entry, of the given term. An Expire with Armed 0
// names the key's current arming, as the leader's lease table would.
func (a *applier) at(term uint64, c Command) *Result {
	if e, ok := c.(Expire); ok && e.Armed == 0 {
		k, _ := a.f.Get(e.Key)
		e.Armed = k.Armed
		c = e
	}
	a.index++
	r := a.f.Apply(&raft.Log{Index: a.index, Term: term, Type: raft.LogCommand, Data: Encode(c)})
	return r.(*Result)
}

func tok(t testing.TB, epoch, seq uint64) fence.Token {
	v, err := fence.Compose(epoch, seq)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRules(t *testing.T) {
	const ttl = 5 * time.Second
	type step struct {
		term    uint64
		cmd     Command
		err     error
		token   fence.Token // expected Result.Key.Token when non-zero
		renewed bool
		state   State
	}
	acq := func(k, h string) Acquire { return Acquire{Key: k, Holder: h, TTL: ttl} }
	cases := []struct {
		name  string
		steps []step
	}{
		{"first grant is seq 1 of the entry's term", []step{
			{term: 3, cmd: acq("a", "h1"), token: 3<<32 | 1, state: Held},
		}},
		{"same holder gets the same grant back", []step{
			{term: 3, cmd: acq("a", "h1"), token: 3<<32 | 1},
			{term: 3, cmd: acq("a", "h1"), token: 3<<32 | 1, renewed: true},
			{term: 4, cmd: acq("a", "h1"), token: 3<<32 | 1, renewed: true},
		}},
		{"other holder refused while held", []step{
			{term: 3, cmd: acq("a", "h1")},
			{term: 3, cmd: acq("a", "h2"), err: ErrHeld, token: 3<<32 | 1},
		}},
		{"seq grows inside an epoch after release and expiry", []step{
			{term: 2, cmd: acq("a", "h1"), token: 2<<32 | 1},
			{term: 2, cmd: Release{Key: "a", Holder: "h1", Token: 2<<32 | 1}, state: Released},
			{term: 2, cmd: acq("a", "h2"), token: 2<<32 | 2},
			{term: 2, cmd: Expire{Key: "a", Token: 2<<32 | 2}, state: Expired},
			{term: 2, cmd: acq("a", "h1"), token: 2<<32 | 3},
		}},
		{"seq restarts at 1 when the epoch rises", []step{
			{term: 2, cmd: acq("a", "h1")},
			{term: 2, cmd: Release{Key: "a", Holder: "h1", Token: 2<<32 | 1}},
			{term: 5, cmd: acq("a", "h2"), token: 5<<32 | 1},
		}},
		{"release needs the holder and the current token", []step{
			{term: 1, cmd: acq("a", "h1")},
			{term: 1, cmd: Release{Key: "a", Holder: "h2", Token: 1<<32 | 1}, err: ErrNotHolder},
			{term: 1, cmd: Release{Key: "a", Holder: "h1", Token: 1<<32 | 2}, err: ErrStaleToken},
			{term: 1, cmd: Release{Key: "b", Holder: "h1", Token: 1<<32 | 1}, err: ErrUnknownKey},
			{term: 1, cmd: Release{Key: "a", Holder: "h1", Token: 1<<32 | 1}, state: Released},
			{term: 1, cmd: Release{Key: "a", Holder: "h1", Token: 1<<32 | 1}, state: Released}, // retry is fine
		}},
		{"force release needs only the current token", []step{
			{term: 1, cmd: acq("a", "h1")},
			{term: 1, cmd: Release{Key: "a", Holder: "operator", Token: 1<<32 | 1, Force: true}, state: Released},
		}},
		{"release after expiry is refused", []step{
			{term: 1, cmd: acq("a", "h1")},
			{term: 1, cmd: Expire{Key: "a", Token: 1<<32 | 1}},
			{term: 1, cmd: Release{Key: "a", Holder: "h1", Token: 1<<32 | 1}, err: ErrExpired},
		}},
		{"a stale expire is ignored", []step{
			{term: 1, cmd: acq("a", "h1")},
			{term: 1, cmd: Release{Key: "a", Holder: "h1", Token: 1<<32 | 1}},
			{term: 1, cmd: acq("a", "h2"), token: 1<<32 | 2},
			{term: 1, cmd: Expire{Key: "a", Token: 1<<32 | 1}, token: 1<<32 | 2, state: Held},
		}},
		{"a retried request whose grant ended does not mint a new grant", []step{
			{term: 1, cmd: Acquire{Key: "a", Holder: "h1", TTL: ttl, RequestID: "r1"}},
			{term: 1, cmd: Expire{Key: "a", Token: 1<<32 | 1}},
			{term: 1, cmd: Acquire{Key: "a", Holder: "h1", TTL: ttl, RequestID: "r1"}, err: ErrGrantEnded},
			{term: 1, cmd: Acquire{Key: "a", Holder: "h1", TTL: ttl, RequestID: "r2"}, token: 1<<32 | 2},
		}},
		{"the epoch floor adds to the term", []step{
			{term: 1, cmd: Reclaim{Floor: 1}},
			{term: 1, cmd: Reclaim{Floor: 2}},
			{term: 1, cmd: acq("a", "h1"), token: 3<<32 | 1},
			{term: 1, cmd: Reclaim{Floor: 1}}, // never lowered
			{term: 1, cmd: Reclaim{Floor: 9}}, // raised by one at most
			{term: 1, cmd: Release{Key: "a", Holder: "h1", Token: 3<<32 | 1}},
			{term: 1, cmd: acq("a", "h1"), token: 3<<32 | 2},
		}},
		{"a lower epoch than the last grant is refused", []step{
			{term: 9, cmd: acq("a", "h1")},
			{term: 9, cmd: Release{Key: "a", Holder: "h1", Token: 9<<32 | 1}},
			{term: 3, cmd: acq("a", "h1"), err: ErrEpochRegressed},
		}},
		{"the epoch may not pass 31 bits", []step{
			{term: fence.MaxEpoch - 1, cmd: Reclaim{Floor: 1}},
			{term: fence.MaxEpoch, cmd: acq("a", "h1"), err: ErrEpochExhausted},
		}},
		{"invalid commands are refused", []step{
			{term: 1, cmd: Acquire{Key: "", Holder: "h", TTL: ttl}, err: ErrInvalid},
			{term: 1, cmd: Acquire{Key: "a", Holder: "", TTL: ttl}, err: ErrInvalid},
			{term: 1, cmd: Acquire{Key: "a", Holder: "h", TTL: 0}, err: ErrInvalid},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := &applier{f: New(Config{})}
			for i, s := range c.steps {
				r := a.at(s.term, s.cmd)
				if !errors.Is(r.Err, s.err) || (s.err == nil) != (r.Err == nil) {
					t.Fatalf("step %d: err = %v, want %v", i, r.Err, s.err)
				}
				if s.token != 0 && r.Key.Token != s.token {
					t.Fatalf("step %d: token = %d/%d, want %d/%d", i, r.Key.Token.Epoch(), r.Key.Token.Seq(), s.token.Epoch(), s.token.Seq())
				}
				if r.Renewed != s.renewed {
					t.Fatalf("step %d: renewed = %v", i, r.Renewed)
				}
				if s.state != 0 && r.Key.State != s.state {
					t.Fatalf("step %d: state = %v, want %v", i, r.Key.State, s.state)
				}
			}
		})
	}
}

// An expiry decided before the holder renewed by acquire must not end the
// renewed lease.
func TestExpiryBeforeRenewalIsIgnored(t *testing.T) {
	a := &applier{f: New(Config{})}
	g := a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second})
	stale := Expire{Key: "k", Token: g.Key.Token, Armed: g.Key.Armed}
	r := a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second})
	if !r.Renewed || r.Key.Armed == stale.Armed {
		t.Fatalf("renewal: %+v", r)
	}
	if r := a.at(1, stale); r.Changed || r.Key.State != Held {
		t.Fatalf("stale expiry ended a renewed grant: %+v", r)
	}
	if r := a.at(1, Expire{Key: "k", Token: g.Key.Token, Armed: r.Key.Armed}); !r.Changed || r.Key.State != Expired {
		t.Fatalf("current expiry: %+v", r)
	}
}

// A release or an expiry can hand the key to the next waiter in the same
// entry; the waiter's token is above the released one.
func TestHandoff(t *testing.T) {
	a := &applier{f: New(Config{})}
	g := a.at(2, Acquire{Key: "k", Holder: "a", TTL: time.Second})
	next := &Acquire{Key: "k", Holder: "b", TTL: time.Second, RequestID: "rb"}
	r := a.at(2, Release{Key: "k", Holder: "a", Token: g.Key.Token, Next: next})
	if r.Err != nil || r.Key.State != Released || r.Next == nil || r.Next.Err != nil || r.Next.Key.Holder != "b" || r.Next.Key.Token != g.Key.Token+1 {
		t.Fatalf("release with handoff: %+v next %+v", r, r.Next)
	}
	// A release that fails hands nothing over.
	r = a.at(2, Release{Key: "k", Holder: "a", Token: g.Key.Token, Next: &Acquire{Key: "k", Holder: "c", TTL: time.Second}})
	if r.Err == nil || r.Next != nil {
		t.Fatalf("failed release: %+v", r)
	}
	cur, _ := a.f.Get("k")
	r = a.at(3, Expire{Key: "k", Token: cur.Token, Armed: cur.Armed, Next: &Acquire{Key: "k", Holder: "c", TTL: time.Second}})
	if !r.Changed || r.Next == nil || r.Next.Key.Holder != "c" || r.Next.Key.Token != 3<<32|1 {
		t.Fatalf("expiry with handoff: %+v next %+v", r, r.Next)
	}
}

func TestHeldErrorNamesHolder(t *testing.T) {
	a := &applier{f: New(Config{})}
	a.at(1, Acquire{Key: "k", Holder: "alice", TTL: time.Second})
	r := a.at(1, Acquire{Key: "k", Holder: "bob", TTL: time.Second})
	var he *HeldError
	if !errors.As(r.Err, &he) || he.Holder != "alice" || he.Token != 1<<32|1 {
		t.Fatalf("err = %#v", r.Err)
	}
}

func TestSeqExhaustion(t *testing.T) {
	a := &applier{f: New(Config{MaxSeq: 3})}
	for i := 1; i <= 3; i++ {
		r := a.at(7, Acquire{Key: "k", Holder: "h", TTL: time.Second})
		if r.Err != nil || r.Key.Token.Seq() != uint64(i) {
			t.Fatalf("grant %d: %+v", i, r)
		}
		a.at(7, Release{Key: "k", Holder: "h", Token: r.Key.Token})
	}
	if r := a.at(7, Acquire{Key: "k", Holder: "h", TTL: time.Second}); !errors.Is(r.Err, ErrSeqExhausted) {
		t.Fatalf("4th grant in epoch 7: %v", r.Err)
	}
	if r := a.at(7, Acquire{Key: "other", Holder: "h", TTL: time.Second}); r.Err != nil {
		t.Fatalf("other keys are not affected: %v", r.Err)
	}
	if r := a.at(8, Acquire{Key: "k", Holder: "h", TTL: time.Second}); r.Err != nil || r.Key.Token != 8<<32|1 {
		t.Fatalf("a new term resumes grants: %+v", r)
	}
}

func TestNonCommandEntriesAreSkipped(t *testing.T) {
	f := New(Config{})
	logs := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte{0xff, 0xff, 0xff}},
		{Index: 2, Term: 1, Type: raft.LogNoop},
		{Index: 3, Term: 1, Type: raft.LogCommand, Data: Encode(Acquire{Key: "k", Holder: "h", TTL: time.Second})},
	}
	out := f.ApplyBatch(logs)
	if out[0] != nil || out[1] != nil || out[2].(*Result).Err != nil {
		t.Fatalf("results: %v", out)
	}
	if f.Applied() != 3 {
		t.Fatalf("applied = %d", f.Applied())
	}
}

func TestCorruptEntryPanics(t *testing.T) {
	for _, data := range [][]byte{nil, {typeAcquire}, {99, 1}, {typeAcquire, 9}, append(Encode(Expire{Key: "k", Token: 5}), 0)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic for %v", data)
				}
			}()
			New(Config{}).Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: data})
		}()
	}
}

// Type 5 is reserved: no fenced proposed it, and a log that holds it is not
// one fenced wrote, so Decode refuses it, whatever follows, and says why.
func TestReservedTypeRefused(t *testing.T) {
	for _, b := range [][]byte{{typeReserved, version1, 1}, {typeReserved, version1}, {typeReserved, version2, 0}} {
		c, err := Decode(b)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "reserved") {
			t.Fatalf("Decode(%x) = %#v, %v; want a refusal that names the reserved type", b, c, err)
		}
	}
}

// restoreFloor gives f the epoch floor floor by a restore, the way a floor
// rises beyond a Reclaim's raise by one: how a test starts near the end of
// the epoch space.
func restoreFloor(t testing.TB, f *FSM, floor uint64) {
	t.Helper()
	img := f.Image()
	img.Floor = floor
	var buf bytes.Buffer
	if err := img.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
}

func TestCommandRoundTrip(t *testing.T) {
	cmds := []Command{
		Acquire{Key: "k", Holder: "h", TTL: 3 * time.Second, RequestID: "r", LockDelay: time.Second},
		SetClusterID{ID: "c1"},
		Release{Key: "k", Holder: "h", Token: 1<<40 | 7, Force: true},
		Release{Key: "k", Holder: "h", Token: 1<<40 | 7, Next: &Acquire{Key: "k", Holder: "w", TTL: time.Second, RequestID: "x"}},
		Expire{Key: "k", Token: 5, Armed: 9},
		Expire{Key: "k", Token: 5, Armed: 9, Next: &Acquire{Key: "k", Holder: "w", TTL: time.Second}},
		SetMember{ID: "n1", HTTPAddr: "127.0.0.1:1"},
		DelMember{ID: "n1"},
		Reclaim{Floor: 77, Keys: []ReclaimKey{{"k", 1<<40 | 7}}},
		Barrier{},
		DelayEnd{Key: "k", Token: 1<<40 | 7},
	}
	for _, c := range cmds {
		got, err := Decode(Encode(c))
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("round trip %#v = %#v, %v", c, got, err)
		}
	}
}

// observerLog records observer calls.
type observerLog struct{ granted, ended, restored int }

func (o *observerLog) Granted(KeyState, bool) { o.granted++ }
func (o *observerLog) Ended(KeyState)         { o.ended++ }
func (o *observerLog) Restored()              { o.restored++ }

func TestObserver(t *testing.T) {
	o := &observerLog{}
	a := &applier{f: New(Config{Observer: o})}
	r := a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second})
	a.at(1, Acquire{Key: "k", Holder: "x", TTL: time.Second}) // refused: no event
	a.at(1, Expire{Key: "k", Token: r.Key.Token})
	a.at(1, Expire{Key: "k", Token: r.Key.Token}) // stale: no event
	if o.granted != 1 || o.ended != 1 {
		t.Fatalf("observer = %+v", o)
	}
}

// genCommand draws a command over a small key and holder space so that
// conflicts, releases of current tokens and stale expiries all happen often.
func genCommand(t *rapid.T, f *FSM) Command {
	key := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "key")
	holder := rapid.SampledFrom([]string{"h1", "h2", "h3"}).Draw(t, "holder")
	cur, _ := f.Get(key)
	switch rapid.IntRange(0, 5).Draw(t, "kind") {
	case 0, 1:
		return Acquire{Key: key, Holder: holder, TTL: time.Second, RequestID: rapid.SampledFrom([]string{"", "r1", "r2"}).Draw(t, "rid"),
			LockDelay: time.Duration(rapid.IntRange(0, 1).Draw(t, "delay")) * time.Second}
	case 2:
		if rapid.Bool().Draw(t, "current") {
			rel := Release{Key: key, Holder: cur.Holder, Token: cur.Token}
			if rapid.Bool().Draw(t, "handoff") {
				rel.Next = &Acquire{Key: key, Holder: holder, TTL: time.Second}
			}
			return rel
		}
		return Release{Key: key, Holder: holder, Token: fence.Token(rapid.Uint64Range(1, 1<<40).Draw(t, "tok"))}
	case 3:
		return Expire{Key: key, Token: cur.Token}
	case 4:
		return DelayEnd{Key: key, Token: cur.Token}
	default:
		// A raise by one, or a stale or skipping one that changes nothing.
		return Reclaim{Floor: f.Floor() + rapid.Uint64Range(0, 2).Draw(t, "floor")}
	}
}

// Random command sequences at random non-decreasing terms keep every key's
// tokens strictly increasing in grant order, never repeat a token, and a
// snapshot of any reached state restores to an identical state.
func TestPropertyTokensStrictlyIncrease(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := New(Config{MaxSeq: uint64(rapid.IntRange(2, 6).Draw(t, "maxseq"))})
		a := &applier{f: f}
		term := uint64(1)
		last := map[string]fence.Token{}
		seen := map[string]map[fence.Token]bool{}
		n := rapid.IntRange(1, 200).Draw(t, "n")
		for i := 0; i < n; i++ {
			term += uint64(rapid.IntRange(0, 1).Draw(t, "bump")) * uint64(rapid.IntRange(0, 3).Draw(t, "by"))
			c := genCommand(t, f)
			r := a.at(term, c)
			acq, ok := c.(Acquire)
			if rel, isRel := c.(Release); isRel && r.Next != nil {
				acq, ok, r = *rel.Next, true, r.Next
			}
			if !ok || r.Err != nil || r.Renewed {
				continue
			}
			tk := r.Key.Token
			if tk <= last[acq.Key] {
				t.Fatalf("key %s: grant %d after %d", acq.Key, tk, last[acq.Key])
			}
			if tk.Epoch() != term+f.Floor() {
				t.Fatalf("epoch %d, term %d floor %d", tk.Epoch(), term, f.Floor())
			}
			if seen[acq.Key] == nil {
				seen[acq.Key] = map[fence.Token]bool{}
			}
			if seen[acq.Key][tk] {
				t.Fatalf("token %d granted twice", tk)
			}
			seen[acq.Key][tk] = true
			last[acq.Key] = tk
		}
		assertRoundTrip(t, f)
	})
}

func assertRoundTrip(t interface{ Fatalf(string, ...any) }, f *FSM) {
	var buf bytes.Buffer
	if err := f.Image().Encode(&buf); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	g := New(Config{})
	g.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: Encode(Acquire{Key: "stale", Holder: "x", TTL: time.Second})})
	if err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if _, ok := g.Get("stale"); ok && func() bool { _, had := f.Get("stale"); return !had }() {
		t.Fatalf("restore kept earlier state")
	}
	if !reflect.DeepEqual(f.Image().sort(), g.Image().sort()) {
		t.Fatalf("restored state differs:\n%+v\n%+v", f.Image(), g.Image())
	}
	var again bytes.Buffer
	if err := g.Image().Encode(&again); err != nil || !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatalf("snapshot bytes differ after restore")
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func TestSnapshotKeepsReleasedKeys(t *testing.T) {
	a := &applier{f: New(Config{})}
	r := a.at(4, Acquire{Key: "k", Holder: "h", TTL: time.Second})
	a.at(4, Release{Key: "k", Holder: "h", Token: r.Key.Token})
	a.at(4, SetMember{ID: "n1", HTTPAddr: "x:1"})
	a.at(4, Reclaim{Floor: 1})
	a.at(4, Reclaim{Floor: 2})
	var buf bytes.Buffer
	if err := a.f.Image().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	g := New(Config{})
	if err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	b := &applier{f: g, index: a.index}
	if r2 := b.at(4, Acquire{Key: "k", Holder: "h2", TTL: time.Second}); r2.Key.Token <= r.Key.Token {
		t.Fatalf("after restore, grant %d is not above %d", r2.Key.Token, r.Key.Token)
	}
	if g.Members()["n1"] != "x:1" || g.Member("n1") != "x:1" || g.Member("n9") != "" || g.Floor() != 2 || g.Applied() != a.index+1 {
		t.Fatalf("members %v floor %d applied %d", g.Members(), g.Floor(), g.Applied())
	}
}

func TestRestoreRejectsDamage(t *testing.T) {
	a := &applier{f: New(Config{})}
	a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second})
	var buf bytes.Buffer
	if err := a.f.Image().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	for i := range good {
		bad := append([]byte(nil), good...)
		bad[i] ^= 0x40
		g := New(Config{})
		g.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: Encode(Acquire{Key: "mine", Holder: "x", TTL: time.Second})})
		if err := g.Restore(nopCloser{bytes.NewReader(bad)}); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("flip at %d: err = %v", i, err)
		}
		if _, ok := g.Get("mine"); !ok {
			t.Fatalf("a rejected restore changed the state")
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(Acquire{Key: "k", Holder: "h", TTL: time.Second, RequestID: "r"}))
	f.Add(Encode(Release{Key: "k", Holder: "h", Token: 9}))
	f.Add([]byte{typeReserved, version1, 1})
	f.Add(Encode(Reclaim{Floor: 2, Keys: []ReclaimKey{{"k", 9}}}))
	f.Add(Encode(DelayEnd{Key: "k", Token: 9}))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		if !bytes.Equal(Encode(c), b) {
			t.Fatalf("decode/encode not canonical for %x", b)
		}
	})
}

// FuzzRestore restores arbitrary bytes over a populated state: a rejected
// snapshot changes nothing; an accepted one becomes the state exactly and
// survives its own encoding; the restore, which reads as it decodes,
// accepts exactly what DecodeImage, which has every byte first, accepts. With seal set, the input gets a valid CRC
// appended, so that the fuzzer reaches the decoder behind the checksum.
func FuzzRestore(f *testing.F) {
	a := &applier{f: New(Config{})}
	a.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second})
	var buf bytes.Buffer
	_ = a.f.Image().Encode(&buf)
	f.Add(buf.Bytes(), false)
	f.Add(buf.Bytes()[:buf.Len()-4], true)
	f.Add([]byte(snapMagic), true)
	// A state with retired request ids and a log clock.
	c := newClocked(Config{})
	r := c.at(1, Acquire{Key: "k", Holder: "h", TTL: time.Second, RequestID: "r1"})
	c.at(1, Release{Key: "k", Holder: "h", Token: r.Key.Token})
	c.at(1, Acquire{Key: "k", Holder: "h2", TTL: time.Second, RequestID: "r2"})
	c.at(1, Acquire{Key: "k", Holder: "h2", TTL: time.Second, RequestID: "r3"})
	var hbuf bytes.Buffer
	_ = c.f.Image().Encode(&hbuf)
	f.Add(hbuf.Bytes(), false)
	f.Add(hbuf.Bytes()[:hbuf.Len()-4], true)
	f.Fuzz(func(t *testing.T, b []byte, seal bool) {
		if seal {
			b = sealed(b)
		}
		g, _ := seeded()
		before := g.Image().sort()
		// The restore reads a byte at a time through a window that
		// starts at three bytes: the stream's every boundary.
		img, decodeErr := DecodeImage(b)
		if err := restoreThrough(g, b, iotest.OneByteReader, 3); err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("refusal %v is not ErrBadSnapshot", err)
			}
			if decodeErr == nil {
				t.Fatalf("the restore refused (%v) what DecodeImage accepts", err)
			}
			if !reflect.DeepEqual(before, g.Image().sort()) {
				t.Fatal("rejected snapshot changed state")
			}
			return
		}
		if decodeErr != nil || !reflect.DeepEqual(img.sort(), g.Image().sort()) {
			t.Fatalf("the restored state is not the snapshot's: %v", decodeErr)
		}
		var again bytes.Buffer
		if err := img.Encode(&again); err != nil {
			t.Fatal(err)
		}
		if back, err := DecodeImage(again.Bytes()); err != nil || !reflect.DeepEqual(back.sort(), img) {
			t.Fatalf("an accepted snapshot does not survive its encoding: %v", err)
		}
	})
}

func BenchmarkApplyAcquire(b *testing.B) {
	f := New(Config{})
	data := make([][]byte, 1024)
	for i := range data {
		data[i] = Encode(Acquire{Key: "key-" + string(rune('a'+i%26)) + string(rune(i)), Holder: "holder", TTL: time.Second})
	}
	b.ReportAllocs()
	before := cpuTime()
	for i := 0; b.Loop(); i++ {
		f.Apply(&raft.Log{Index: uint64(i + 1), Term: uint64(i/1024 + 1), Type: raft.LogCommand, Data: data[i%1024]})
	}
	reportCPU(b, before)
}
