package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// collect reads events until cond says stop, or fails at the deadline.
func collect(t *testing.T, ch <-chan client.WatchEvent, timeout time.Duration, stop func([]client.WatchEvent) bool) []client.WatchEvent {
	t.Helper()
	var got []client.WatchEvent
	deadline := time.After(timeout)
	for !stop(got) {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %+v", got)
			}
			got = append(got, ev)
		case <-deadline:
			t.Fatalf("watch: timed out waiting, got %+v", got)
		}
	}
	return got
}

// changes keeps the change events (not state, sync or reset) of evs.
func changes(evs []client.WatchEvent) []client.WatchEvent {
	var out []client.WatchEvent
	for _, ev := range evs {
		switch ev.Type {
		case client.WatchState, client.WatchSync, client.WatchReset:
		default:
			out = append(out, ev)
		}
	}
	return out
}

func hasSync(evs []client.WatchEvent) bool {
	for _, ev := range evs {
		if ev.Type == client.WatchSync {
			return true
		}
	}
	return false
}

func TestBlockingReadReturnsOnChange(t *testing.T) {
	nodes := startCluster(t, 3)
	_, fol := leaderOf(t, nodes)
	c := client.New([]string{fol.url})
	ctx := context.Background()
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: "svc", Holder: "a", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	k0, err := c.KeyWait(ctx, "svc", 0, time.Minute)
	if err != nil || k0.Token != g.Token || k0.WatchIndex == 0 {
		t.Fatalf("read at index 0: %+v, %v", k0, err)
	}
	// The header carries the index too, through a follower.
	resp, err := http.Get(fol.url + "/v1/keys/svc?index=0")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h, _ := strconv.ParseUint(resp.Header.Get(client.IndexHeader), 10, 64); h < k0.WatchIndex {
		t.Fatalf("%s %q, want at least %d", client.IndexHeader, resp.Header.Get(client.IndexHeader), k0.WatchIndex)
	}
	// Nothing changes the key: the wait ends with the same state.
	same, err := c.KeyWait(ctx, "svc", k0.WatchIndex, 200*time.Millisecond)
	if err != nil || same.Token != g.Token || same.State != "held" || same.WatchIndex < k0.WatchIndex {
		t.Fatalf("quiet wait: %+v, %v", same, err)
	}
	got := make(chan *client.IndexedKey, 1)
	go func() {
		k, err := c.KeyWait(ctx, "svc", same.WatchIndex, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- k
	}()
	// Another key's change does not end the wait; the release does.
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "other", Holder: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "svc", Holder: "a", Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	select {
	case k := <-got:
		if k == nil || k.State != "released" || k.WatchIndex <= same.WatchIndex {
			t.Fatalf("after the release: %+v", k)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("blocking read did not return after the key changed")
	}
	if _, err := c.KeyWait(ctx, "svc", 0, 0); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"index=-1", "index=x", "wait=1h", "wait=zz"} {
		resp, err := http.Get(fol.url + "/v1/keys/svc?" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400", bad, resp.StatusCode)
		}
	}
}

func TestWatchStreamThroughFollowerResumes(t *testing.T) {
	nodes := startCluster(t, 3)
	_, fol := leaderOf(t, nodes)
	c := client.New([]string{fol.url})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g0, err := c.Acquire(ctx, client.AcquireRequest{Key: "jobs/a", Holder: "h0", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	ch := c.Watch(ctx, client.WatchOptions{Prefix: "jobs/"})
	start := collect(t, ch, 30*time.Second, hasSync)
	if len(start) != 2 || start[0].Type != client.WatchState || start[0].Token != g0.Token {
		t.Fatalf("fresh watch starts with %+v", start)
	}
	// Handoff: a waiter gets the key in the entry that frees it.
	waited := make(chan *client.Grant, 1)
	go func() {
		g, err := c.Acquire(ctx, client.AcquireRequest{Key: "jobs/a", Holder: "h1", TTL: "30s", Wait: "30s"})
		if err != nil {
			t.Error(err)
		}
		waited <- g
	}()
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "other", Holder: "x"}); err != nil {
		t.Fatal(err)
	}
	g2, err := c.Acquire(ctx, client.AcquireRequest{Key: "jobs/b", Holder: "h2", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "jobs/b", Holder: "h2", Token: g2.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, client.ReleaseRequest{Key: "jobs/a", Holder: "h0", Token: g0.Token}); err != nil {
		t.Fatal(err)
	}
	g1 := <-waited
	evs := changes(collect(t, ch, 30*time.Second, func(evs []client.WatchEvent) bool {
		cs := changes(evs)
		return len(cs) >= 3 && cs[len(cs)-1].Holder == "h1"
	}))
	want := []string{"granted", "released"}
	if evs[0].Key != "jobs/b" || evs[0].Type != want[0] || evs[1].Type != want[1] || evs[1].Token != g2.Token {
		t.Fatalf("events %+v", evs)
	}
	// The waiter was registered before or after the release: either a
	// handoff, or a release then a grant.
	last := evs[len(evs)-1]
	if last.Key != "jobs/a" || last.Token != g1.Token || last.Holder != "h1" {
		t.Fatalf("last event %+v, want the grant %+v", last, g1)
	}
	if last.Type == "handed_off" && (last.PrevToken != g0.Token || last.Ended != "released") {
		t.Fatalf("handoff %+v does not name the ended grant %d", last, g0.Token)
	}
	// Resume after the first event: the rest again, in order, nothing else.
	raw, err := http.Get(fol.url + "/v1/watch?prefix=jobs/&from=" + strconv.FormatUint(evs[0].Index, 10))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Body.Close()
	if ct := raw.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var resumed []client.WatchEvent
	_ = readSSE(raw.Body, func(id, name string, data []byte) error {
		if name == client.WatchSync {
			return io.EOF
		}
		if id == "" || !strings.Contains(string(data), `"index":`+id) {
			t.Fatalf("event %s id %q data %s", name, id, data)
		}
		if i := mustIndex(t, id); i <= last.Index { // later changes (a retried acquire's renewal) may follow
			resumed = append(resumed, client.WatchEvent{Type: name, Index: i})
		}
		return nil
	})
	if len(resumed) != len(evs)-1 || resumed[0].Index != evs[1].Index || resumed[len(resumed)-1].Index != last.Index {
		t.Fatalf("resume from %d gave %+v, want the events after it of %+v", evs[0].Index, resumed, evs)
	}
}

func mustIndex(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWatchOfCompactedHistory(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, _ := leaderOf(t, nodes)
	for _, n := range nodes {
		n.node.FSM().Feed().SetLimits(2, 0)
	}
	c := client.New([]string{lead.url})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var g *client.Grant
	for i := 0; i < 4; i++ {
		var err error
		if g, err = c.Acquire(ctx, client.AcquireRequest{Key: "k" + strconv.Itoa(i), Holder: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get(lead.url + "/v1/watch?from=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Fatalf("watch from a compacted index: status %d, want 410", resp.StatusCode)
	}
	// The client resyncs: reset, then the current state.
	evs := collect(t, c.Watch(ctx, client.WatchOptions{From: 1}), 30*time.Second, hasSync)
	if evs[0].Type != client.WatchReset || evs[0].Reason != "compacted" {
		t.Fatalf("watch from a compacted index: %+v", evs)
	}
	states := 0
	for _, ev := range evs {
		if ev.Type == client.WatchState {
			states++
		}
	}
	if states != 4 || evs[len(evs)-1].Type != client.WatchSync || evs[len(evs)-1].Index < g.Token.Seq() {
		t.Fatalf("resync gave %+v", evs)
	}
	if evs := collect(t, c.Watch(ctx, client.WatchOptions{Key: strings.Repeat("k", client.MaxKeyLen+1)}), 30*time.Second, func(evs []client.WatchEvent) bool { return len(evs) > 0 }); evs[0].Type != client.WatchError || !strings.Contains(evs[0].Reason, "key") {
		t.Fatalf("a watch refused for good: %+v", evs)
	}
	for _, bad := range []string{"key=a&prefix=b", "from=x", "progress=1ns"} {
		resp, err := http.Get(lead.url + "/v1/watch?" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("watch?%s: status %d, want 400", bad, resp.StatusCode)
		}
	}
}

// TestSSEReset checks the event that ends a stream a watcher cannot
// resume: a watcher that lagged, or a node that restored a snapshot.
func TestSSEReset(t *testing.T) {
	for err, reason := range map[error]string{fsm.ErrLagged: "lagged", fsm.ErrReset: "restored"} {
		rec := httptest.NewRecorder()
		sw := &sseWriter{cache: &frameCache{}, w: rec, rc: http.NewResponseController(rec)}
		sw.reset(err)
		var got []client.WatchEvent
		_ = readSSE(strings.NewReader(rec.Body.String()), func(id, name string, data []byte) error {
			got = append(got, client.WatchEvent{Type: name, Reason: reason})
			if id != "" || !strings.Contains(string(data), `"reason":"`+reason+`"`) {
				return fmt.Errorf("reset event id %q data %s", id, data)
			}
			return nil
		})
		if len(got) != 1 || got[0].Type != client.WatchReset {
			t.Fatalf("%v: %+v", err, got)
		}
	}
}

func TestValueOnAcquireReadAndWatch(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, _ := leaderOf(t, nodes)
	c := client.New([]string{lead.url})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.Watch(ctx, client.WatchOptions{Key: "leader"})
	collect(t, ch, 30*time.Second, hasSync)
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: "leader", Holder: "n1", Value: "http://10.0.0.1:8080"})
	if err != nil || g.Value != "http://10.0.0.1:8080" {
		t.Fatalf("acquire with a value: %+v %v", g, err)
	}
	k, err := c.Key(ctx, "leader")
	if err != nil || k.Value != g.Value {
		t.Fatalf("read: %+v %v", k, err)
	}
	evs := changes(collect(t, ch, 30*time.Second, func(evs []client.WatchEvent) bool { return len(changes(evs)) == 1 }))
	if evs[0].Value != g.Value || evs[0].Type != "granted" {
		t.Fatalf("event %+v", evs[0])
	}
	for _, bad := range []string{strings.Repeat("x", client.MaxValueLen+1), "a\nb"} {
		_, err := c.Acquire(ctx, client.AcquireRequest{Key: "v", Holder: "h", Value: bad})
		if !errors.Is(err, client.ErrBadRequest) {
			t.Fatalf("value %q: %v, want bad_request", bad, err)
		}
	}
}

func TestElectionCampaignObserveProclaimResign(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, fol := leaderOf(t, nodes)
	c := client.New([]string{lead.url, fol.url})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs := client.New([]string{fol.url}).NewElection("svc/leader", "observer", client.ElectionOptions{}).Observe(ctx)
	e1 := c.NewElection("svc/leader", "n1", client.ElectionOptions{TTL: 5 * time.Second, Value: "http://n1"})
	e2 := c.NewElection("svc/leader", "n2", client.ElectionOptions{TTL: 5 * time.Second, Value: "http://n2"})
	if _, err := e1.Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("leader before any campaign: %v", err)
	}
	if err := e1.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	won2 := make(chan error, 1)
	go func() { won2 <- e2.Campaign(ctx) }()
	next := func() client.Leader {
		t.Helper()
		select {
		case l := <-obs:
			return l
		case <-ctx.Done():
			t.Fatal("observer: no change")
		}
		return client.Leader{}
	}
	if l := next(); l.Holder != "n1" || l.Token != e1.Token() || l.Value != "http://n1" {
		t.Fatalf("observed %+v, want n1 with token %s", l, e1.Token())
	}
	if err := e1.Proclaim(ctx, "http://n1:2"); err != nil {
		t.Fatal(err)
	}
	if l := next(); l.Holder != "n1" || l.Token != e1.Token() || l.Value != "http://n1:2" {
		t.Fatalf("after proclaim: %+v", l)
	}
	t1 := e1.Token()
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won2; err != nil {
		t.Fatal(err)
	}
	if e2.Token() <= t1 {
		t.Fatalf("the new leader's token %s is not above %s", e2.Token(), t1)
	}
	for {
		l := next()
		if l.Token < t1 {
			t.Fatalf("observed %+v after token %s", l, t1)
		}
		if l.Holder == "n2" {
			if l.Token != e2.Token() || l.Value != "http://n2" {
				t.Fatalf("observed %+v, want n2 with token %s", l, e2.Token())
			}
			break
		}
	}
	if l, err := e1.Leader(ctx); err != nil || l.Holder != "n2" || l.Token != e2.Token() {
		t.Fatalf("leader: %+v %v", l, err)
	}
	select {
	case <-e2.Done():
		t.Fatalf("the leader's Done is closed: %v", e2.Err())
	default:
	}
	if err := e1.Proclaim(ctx, "x"); !errors.Is(err, client.ErrNotLeading) {
		t.Fatalf("proclaim after resign: %v", err)
	}
}

// stalledWriter is a response writer whose writes after the first sync
// event block until gate is closed: a watcher that stopped reading once
// its stream started.
type stalledWriter struct {
	h       http.Header
	gate    chan struct{}
	stalled chan struct{}
	once    sync.Once
	mu      sync.Mutex
	buf     strings.Builder
	synced  bool
}

func (w *stalledWriter) Header() http.Header { return w.h }
func (w *stalledWriter) WriteHeader(int)     {}
func (w *stalledWriter) FlushError() error   { return nil }

func (w *stalledWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	stall := w.synced
	w.synced = w.synced || strings.Contains(string(p), "event: sync")
	w.mu.Unlock()
	if stall {
		w.once.Do(func() { close(w.stalled) })
		<-w.gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.WriteString(string(p))
}

func (w *stalledWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestSlowWatcherGetsResetLagged: a watcher that stops reading while more
// changes than its bound are committed is sent a reset (lagged), not a
// stream with a gap.
func TestSlowWatcherGetsResetLagged(t *testing.T) {
	nodes := startCluster(t, 1)
	tn := nodes[0]
	leaderOfOne := func() error {
		if !tn.node.Ready() {
			return errors.New("not ready")
		}
		return nil
	}
	testutil.Eventually(t, 15*time.Second, leaderOfOne)
	tn.node.FSM().Feed().SetLimits(0, 3)
	srv := tn.srv.Config.Handler.(*Server)
	w := &stalledWriter{h: http.Header{}, gate: make(chan struct{}), stalled: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.watch(w, httptest.NewRequest(http.MethodGet, "/v1/watch?prefix=lag/", nil).WithContext(ctx))
	}()
	c := client.New([]string{tn.url})
	acquire := func(i int) {
		if _, err := c.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("lag/%d", i), Holder: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 15*time.Second, func() error {
		if !strings.Contains(w.String(), "event: sync") {
			return errors.New("no sync yet")
		}
		return nil
	})
	acquire(0)
	<-w.stalled // the stream is stuck writing the first change
	for i := 1; i <= 5; i++ {
		acquire(i)
	}
	close(w.gate)
	<-done
	out := w.String()
	if !strings.Contains(out, "event: reset\ndata: ") || !strings.Contains(out, `"reason":"lagged"`) || strings.Contains(out, "lag/5") {
		t.Fatalf("a watcher that stalled past its bound got:\n%s", out)
	}
}

// The end of a lock-delay reaches watchers over SSE: granted, expired with
// the lock-delay that starts, then lock_delay_ended of the same grant.
func TestWatchSeesLockDelayEnd(t *testing.T) {
	nodes := startCluster(t, 3)
	_, fol := leaderOf(t, nodes)
	c := client.New([]string{fol.url})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.Watch(ctx, client.WatchOptions{Key: "d"})
	collect(t, ch, 30*time.Second, hasSync)
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: "d", Holder: "h", TTL: "100ms", LockDelay: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	evs := changes(collect(t, ch, 30*time.Second, func(evs []client.WatchEvent) bool { return len(changes(evs)) >= 3 }))
	want := []string{"granted", "expired", "lock_delay_ended"}
	for i, ev := range evs[:3] {
		if ev.Type != want[i] || ev.Token != g.Token || ev.Holder != "h" {
			t.Fatalf("events %+v, want %v of token %s", evs, want, g.Token)
		}
	}
	if evs[1].LockDelay != "1s" || evs[2].State != "expired" || evs[2].LockDelay != "" {
		t.Fatalf("expiry %+v, delay end %+v", evs[1], evs[2])
	}
	// On the wire: the event's name and its data.
	raw, err := http.Get(fol.url + "/v1/watch?key=d&from=" + strconv.FormatUint(evs[1].Index, 10))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Body.Close()
	var name, data string
	_ = readSSE(raw.Body, func(id, n string, d []byte) error {
		name, data = n, string(d)
		return io.EOF
	})
	if name != "lock_delay_ended" || !strings.Contains(data, `"type":"lock_delay_ended"`) || !strings.Contains(data, `"token":"`+g.Token.String()+`"`) {
		t.Fatalf("first event after the expiry: %s %s", name, data)
	}
}
