package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
)

// A semaphore through the HTTP API and the Go client, on a three-node
// cluster on real sockets, the client speaking to a follower only: permits,
// refusals with their wire codes, request ids, verify per permit, the key's
// read with its permits and waiters, and a watch event per permit.
func TestSemaphoreOverHTTP(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, fol := leaderOf(t, nodes)
	c := client.New([]string{fol.url})
	ctx := context.Background()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events := c.Watch(wctx, client.WatchOptions{Key: "s"})
	for ev := range events { // the stream is up once it said it is current
		if ev.Type == client.WatchSync {
			break
		}
	}

	a, err := c.Acquire(ctx, client.AcquireRequest{Key: "s", Holder: "a", TTL: "1m", Limit: 2, RequestID: "rq-a"})
	if err != nil || a.Limit != 2 {
		t.Fatalf("first permit: %+v %v", a, err)
	}
	b, err := c.Acquire(ctx, client.AcquireRequest{Key: "s", Holder: "b", TTL: "1m", Limit: 2})
	if err != nil || b.Token <= a.Token {
		t.Fatalf("second permit: %+v %v", b, err)
	}
	if again, err := c.Acquire(ctx, client.AcquireRequest{Key: "s", Holder: "a", TTL: "1m", Limit: 2, RequestID: "rq-a"}); err != nil || again.Token != a.Token {
		t.Fatalf("a repeated request id: %+v %v", again, err)
	}
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "s", Holder: "c", TTL: "1m", Limit: 2}); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("a third permit of two: %v", err)
	}
	code, m := post(t, fol.url, "/v1/acquire", `{"key":"s","holder":"c","limit":3}`)
	if code != http.StatusConflict || m["code"] != "limit_mismatch" {
		t.Fatalf("another limit: %d %v", code, m)
	}
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "s", Holder: "c", TTL: "1m"}); !errors.Is(err, client.ErrLimitMismatch) {
		t.Fatalf("a lock of a semaphore key: %v", err)
	}
	for _, g := range []*client.Grant{a, b} {
		if v, err := c.Verify(ctx, "s", g.Token.String(), g.Holder); err != nil || !v.Allow {
			t.Fatalf("verify %s's permit: %+v %v", g.Holder, v, err)
		}
	}

	// A waiter shows in the key's read, and gets the permit a release frees.
	got := make(chan *client.Grant, 1)
	go func() {
		g, err := c.Acquire(ctx, client.AcquireRequest{Key: "s", Holder: "w", TTL: "1m", Limit: 2, Wait: "30s"})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- g
	}()
	var ki *client.KeyInfo
	testutil.Eventually(t, 10*time.Second, func() error {
		ki, err = c.Key(ctx, "s")
		if err != nil || len(ki.Waiters) != 1 {
			return errors.New("not waiting yet")
		}
		return nil
	})
	if ki.Limit != 2 || ki.Live != 2 || len(ki.Permits) != 2 || ki.Permits[0].Token != a.Token || ki.Permits[1].Holder != "b" || ki.Permits[0].LeaseRemaining == "" || ki.Waiters[0] != "w" {
		t.Fatalf("key read: %+v", ki)
	}
	// A listing gives the shape (limit, how many live), not the permits.
	if ks, err := c.Keys(ctx, "s", 10); err != nil || len(ks) != 1 || ks[0].Limit != 2 || ks[0].Live != 2 || ks[0].Mode != "" || ks[0].Permits != nil || len(ks[0].Waiters) != 1 {
		t.Fatalf("listing: %+v %v", ks, err)
	}
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "s", Holder: "a", Token: a.Token}); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil || w.Token <= b.Token {
		t.Fatalf("waiter's permit: %+v", w)
	}
	if v, _ := c.Verify(ctx, "s", a.Token.String(), ""); v.Allow {
		t.Fatalf("a released permit verified: %+v", v)
	}
	want := []struct {
		typ    string
		holder string
	}{{client.WatchGranted, "a"}, {client.WatchGranted, "b"}, {client.WatchRenewed, "a"}, {client.WatchHandedOff, "w"}}
	for _, wt := range want {
		var ev client.WatchEvent
		for ev.Type == "" || ev.Type == client.WatchSync || ev.Type == client.WatchState {
			select {
			case ev = <-events:
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s event", wt.typ)
			}
		}
		if ev.Type != wt.typ || ev.Holder != wt.holder || ev.Limit != 2 {
			t.Fatalf("event %+v, want %s of %s", ev, wt.typ, wt.holder)
		}
		if wt.typ == client.WatchHandedOff && ev.PrevToken != a.Token {
			t.Fatalf("handoff names %d, want %d", ev.PrevToken, a.Token)
		}
	}
	_ = lead
}

// Bad limits are refused with 400 naming the field, and change nothing.
func TestSemaphoreBadInput(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, _ := leaderOf(t, nodes)
	applied := lead.node.FSM().Applied()
	for _, b := range []struct{ body, field string }{
		{`{"key":"s","holder":"h","limit":0}`, "limit"},
		{`{"key":"s","holder":"h","limit":1025}`, "limit"},
		{`{"key":"s","holder":"h","limit":-1}`, "limit"},
		{`{"key":"s","holder":"h","limit":"2"}`, "limit"},
		{`{"key":"s","holder":"h","limit":2.5}`, "limit"},
	} {
		code, m := post(t, lead.url, "/v1/acquire", b.body)
		msg, _ := m["message"].(string)
		if code != http.StatusBadRequest || m["code"] != "bad_request" || !strings.Contains(msg, b.field) {
			t.Errorf("%s: %d %v", b.body, code, m)
		}
	}
	if code, m := post(t, lead.url, "/v1/acquire", `{"key":"limit","holder":"h","value":"\"limit\""}`); code != http.StatusOK {
		t.Errorf("a lock whose body names limit only as text: %d %v", code, m)
	}
	if got := lead.node.FSM().Applied(); got != applied+1 {
		t.Fatalf("bad input changed the state: applied %d -> %d", applied, got)
	}
}

// Shared and exclusive grants over HTTP: readers coexist and verify, a
// writer is held off, and bad modes are refused naming the field.
func TestSharedOverHTTP(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, fol := leaderOf(t, nodes)
	c := client.New([]string{fol.url})
	ctx := context.Background()
	rw := c.RWLock("doc")
	r1, err := rw.RLock(ctx, "r1", client.LeaseOptions{TTL: time.Minute})
	if err != nil || r1.Grant().Mode != client.ModeShared {
		t.Fatalf("reader: %+v %v", r1, err)
	}
	r2, err := rw.RLock(ctx, "r2", client.LeaseOptions{TTL: time.Minute})
	if err != nil || r2.Token() <= r1.Token() {
		t.Fatalf("second reader: %v", err)
	}
	if _, err := rw.Lock(ctx, "w", client.LeaseOptions{TTL: time.Minute}); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("a writer beside readers: %v", err)
	}
	for _, l := range []*client.Lease{r1, r2} {
		if v, err := c.Verify(ctx, "doc", l.Token().String(), ""); err != nil || !v.Allow {
			t.Fatalf("verify a reader: %+v %v", v, err)
		}
	}
	ki, err := c.Key(ctx, "doc")
	if err != nil || ki.Mode != client.ModeShared || ki.Live != 2 || len(ki.Permits) != 2 || ki.Permits[1].Mode != client.ModeShared {
		t.Fatalf("key read: %+v %v", ki, err)
	}
	if ks, err := c.Keys(ctx, "doc", 10); err != nil || len(ks) != 1 || ks[0].Mode != client.ModeShared || ks[0].Live != 2 || ks[0].Limit != 0 || ks[0].Permits != nil {
		t.Fatalf("listing: %+v %v", ks, err)
	}
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := rw.Lock(ctx, "w", client.LeaseOptions{TTL: time.Minute})
	if err != nil || w.Token() <= r2.Token() || w.Grant().Mode != "" {
		t.Fatalf("writer after the readers: %v", err)
	}
	if v, _ := c.Verify(ctx, "doc", r2.Token().String(), ""); v.Allow {
		t.Fatalf("a reader's token allowed beside a later writer: %+v", v)
	}
	_ = w.Release(ctx)

	applied := lead.node.FSM().Applied()
	for _, b := range []struct{ body, field string }{
		{`{"key":"doc","holder":"h","mode":"read"}`, "mode"},
		{`{"key":"doc","holder":"h","mode":"shared","limit":2}`, "mode"},
		{`{"key":"doc","holder":"h","mode":"exclusive","limit":2}`, "mode"},
	} {
		code, m := post(t, lead.url, "/v1/acquire", b.body)
		msg, _ := m["message"].(string)
		if code != http.StatusBadRequest || !strings.Contains(msg, b.field) {
			t.Errorf("%s: %d %v", b.body, code, m)
		}
	}
	if got := lead.node.FSM().Applied(); got != applied {
		t.Fatalf("bad input changed the state: applied %d -> %d", applied, got)
	}
}

// Several keys at once over HTTP through a follower: all in one entry, or
// a refusal naming the held key with no key changed; bad sets are 400
// naming keys.
func TestAcquireMultiOverHTTP(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, fol := leaderOf(t, nodes)
	c := client.New([]string{fol.url})
	ctx := context.Background()
	mg, err := c.AcquireMulti(ctx, client.AcquireMultiRequest{Keys: []string{"a", "b"}, Holder: "h", TTL: "1m"})
	if err != nil || len(mg.Grants) != 2 || mg.Grants[0].Key != "a" || mg.Grants[1].Key != "b" {
		t.Fatalf("multi: %+v %v", mg, err)
	}
	for _, g := range mg.Grants {
		if v, err := c.Verify(ctx, g.Key, g.Token.String(), "h"); err != nil || !v.Allow {
			t.Fatalf("verify %s: %+v %v", g.Key, v, err)
		}
	}
	applied := lead.node.FSM().Applied()
	_, err = c.AcquireMulti(ctx, client.AcquireMultiRequest{Keys: []string{"c", "b"}, Holder: "o", TTL: "1m"})
	var ce *client.Error
	if !errors.Is(err, client.ErrHeld) || !errors.As(err, &ce) || ce.HeldBy != "h" || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("a set with a held key: %v", err)
	}
	for _, b := range []string{
		`{"keys":["x","x"],"holder":"h"}`,
		`{"keys":[],"holder":"h"}`,
		`{"keys":["` + strings.Repeat(`x","`, client.MaxMultiKeys) + `y"],"holder":"h"}`,
		`{"keys":["x",""],"holder":"h"}`,
	} {
		code, m := post(t, lead.url, "/v1/acquire/multi", b)
		msg, _ := m["message"].(string)
		if code != http.StatusBadRequest || !strings.Contains(msg, "keys") {
			t.Errorf("%.60s: %d %v", b, code, m)
		}
	}
	if got := lead.node.FSM().Applied(); got != applied {
		t.Fatalf("refusals changed the state: applied %d -> %d", applied, got)
	}
	if _, err := c.Key(ctx, "c"); !errors.Is(err, client.ErrUnknownKey) {
		t.Fatalf("a refused set granted c: %v", err)
	}
}
