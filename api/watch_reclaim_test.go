package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// shortRetention makes the leader reclaim ended keys about a second after
// they end.
func shortRetention(c *cluster.Config) { c.KeyRetention = 200 * time.Millisecond }

// TestReclamationIsADeletedEventPerKey: the keys a reclamation forgets reach
// watchers as deleted events, one per key, with the key's last grant; a
// fresh watch of a key that does not exist says so with an absent state.
func TestReclamationIsADeletedEventPerKey(t *testing.T) {
	nodes := startClusterWith(t, 3, shortRetention)
	lead, fol := leaderOf(t, nodes)
	c := client.New([]string{lead.url})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ch := client.New([]string{fol.url}).Watch(ctx, client.WatchOptions{Prefix: "d/"})
	collect(t, ch, 30*time.Second, hasSync)
	grants := map[string]*client.Grant{}
	for _, k := range []string{"d/1", "d/2", "d/3"} {
		g, err := c.Acquire(ctx, client.AcquireRequest{Key: k, Holder: "h" + k})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Release(ctx, client.ReleaseRequest{Key: k, Holder: "h" + k, Token: g.Token}); err != nil {
			t.Fatal(err)
		}
		grants[k] = g
	}
	evs := collect(t, ch, time.Minute, func(evs []client.WatchEvent) bool {
		n := 0
		for _, ev := range evs {
			if ev.Type == client.WatchDeleted {
				n++
			}
		}
		return n == 3
	})
	for _, ev := range evs {
		if ev.Type == client.WatchDeleted {
			if g := grants[ev.Key]; g == nil || ev.Token != g.Token || ev.Holder != "h"+ev.Key || ev.State != client.StateAbsent {
				t.Fatalf("deleted event %+v, the key's last grant was %+v", ev, g)
			}
		}
	}
	if _, err := c.Key(ctx, "d/1"); !errors.Is(err, client.ErrUnknownKey) {
		t.Fatalf("d/1 after its deleted event: %v", err)
	}
	start := collect(t, client.New([]string{fol.url}).Watch(ctx, client.WatchOptions{Key: "d/1"}), 30*time.Second, hasSync)
	if len(start) != 2 || start[0].Type != client.WatchState || start[0].Key != "d/1" || start[0].State != client.StateAbsent || start[0].Token != 0 {
		t.Fatalf("a fresh watch of a key that does not exist: %+v", start)
	}
}

// TestSSEEventsOfOneEntryCarryOneID: the events of one entry (a
// reclamation's) share its index; only the last carries the id, so a
// watcher cut off among them resumes from the entry before and gets all of
// them again, not the rest only. Their frames are never the cache's, which
// holds one frame per index.
func TestSSEEventsOfOneEntryCarryOneID(t *testing.T) {
	rec := httptest.NewRecorder()
	sw := &sseWriter{cache: &frameCache{}, w: rec, rc: http.NewResponseController(rec)}
	// Another stream's deleted event of the same index is cached first.
	sw.cache.frame(fsm.Event{Index: 9, Type: fsm.EventDeleted, Key: "other"})
	sw.events(fsm.Batch{Events: []fsm.Event{
		{Index: 9, Type: fsm.EventDeleted, Key: "a", Holder: "h", Token: 5},
		{Index: 9, Type: fsm.EventDeleted, Key: "b", Holder: "h", Token: 6},
		{Index: 10, Type: fsm.EventGranted, Key: "c", Holder: "h", Token: 7, State: fsm.Held},
	}})
	var got []string
	_ = readSSE(strings.NewReader(rec.Body.String()), func(id, name string, data []byte) error {
		got = append(got, fmt.Sprintf("%s %s %s", id, name, data))
		return nil
	})
	want := []string{
		` deleted {"type":"deleted","index":9,"key":"a","holder":"h","token":"5","state":"absent"}`,
		`9 deleted {"type":"deleted","index":9,"key":"b","holder":"h","token":"6","state":"absent"}`,
		`10 granted {"type":"granted","index":10,"key":"c","holder":"h","token":"7","state":"held","ttl":"0s"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A stream whose identity may not read the entry's last key puts the
	// id on the last one it sends.
	rec = httptest.NewRecorder()
	sw = &sseWriter{cache: &frameCache{}, w: rec, rc: http.NewResponseController(rec), readable: func(key string) bool { return key != "b" }}
	sw.events(fsm.Batch{Events: []fsm.Event{
		{Index: 9, Type: fsm.EventDeleted, Key: "a", Holder: "h", Token: 5},
		{Index: 9, Type: fsm.EventDeleted, Key: "b", Holder: "h", Token: 6},
	}})
	got = nil
	_ = readSSE(strings.NewReader(rec.Body.String()), func(id, name string, data []byte) error {
		got = append(got, fmt.Sprintf("%s %s %s", id, name, data))
		return nil
	})
	if len(got) != 1 || got[0] != "9"+want[0] {
		t.Fatalf("frames of a stream that may not read b: %q", got)
	}
}

// gate is a proxy in front of a node that the test can shut: while shut, it
// answers 503 (a node that cannot serve); cut ends the streams through it.
type gate struct {
	srv  *httptest.Server
	shut atomic.Bool
}

func newGate(t *testing.T, target string) *gate {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.shut.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"code":"unavailable","message":"gate shut"}`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// TestObserverSeesALeaderThatEndedWhileItsHistoryWasLost: an observer cut
// off while its leader resigned and the election's key was reclaimed, and
// whose node's history no longer reaches back to its last event, resyncs
// and reports that nobody leads; it never keeps reporting the leader that
// resigned while Leader says there is none.
func TestObserverSeesALeaderThatEndedWhileItsHistoryWasLost(t *testing.T) {
	nodes := startClusterWith(t, 3, shortRetention)
	lead, fol := leaderOf(t, nodes)
	for _, n := range nodes {
		n.node.FSM().Feed().SetLimits(2, 0)
	}
	g := newGate(t, fol.url)
	c := client.New([]string{lead.url})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var reports []client.Leader
	obs := client.New([]string{g.srv.URL}).NewElection("el", "observer", client.ElectionOptions{}).Observe(ctx)
	go func() {
		for l := range obs {
			mu.Lock()
			reports = append(reports, l)
			mu.Unlock()
		}
	}()
	latest := func() (client.Leader, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(reports) == 0 {
			return client.Leader{}, false
		}
		return reports[len(reports)-1], true
	}
	a := c.NewElection("el", "A", client.ElectionOptions{TTL: time.Minute})
	if err := a.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if l, ok := latest(); !ok || l.Holder != "A" {
			return fmt.Errorf("observed %+v", l)
		}
		return nil
	})
	g.shut.Store(true)
	g.srv.CloseClientConnections()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, err := c.Key(ctx, "el"); !errors.Is(err, client.ErrUnknownKey) {
			return fmt.Errorf("the election's key is not reclaimed yet: %v", err)
		}
		return nil
	})
	for i := 0; i < 3; i++ { // the history moves past the observer's last event
		if _, err := c.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("other/%d", i), Holder: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	g.shut.Store(false)
	testutil.Eventually(t, 30*time.Second, func() error {
		l, _ := latest()
		if _, err := a.Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
			t.Fatalf("leader: %v", err)
		}
		if l.Holder != "" {
			return fmt.Errorf("the observer reports %+v while Leader says nobody leads", l)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(reports); i++ {
		if reports[i].Token < reports[i-1].Token {
			t.Fatalf("the observer went back: %+v", reports)
		}
	}
	_ = lead
}
