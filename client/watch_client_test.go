package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// streamServer is a node stand-in that answers each watch with the next of
// its scripted streams (a status, and the raw text of the stream), and
// records the query each came with.
type streamServer struct {
	mu      sync.Mutex
	streams []func(w http.ResponseWriter, r *http.Request)
	queries []string
}

func (s *streamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.queries = append(s.queries, r.URL.RawQuery+" last-event-id="+r.Header.Get("Last-Event-ID"))
	var next func(http.ResponseWriter, *http.Request)
	if len(s.streams) > 0 {
		next, s.streams = s.streams[0], s.streams[1:]
	}
	s.mu.Unlock()
	if next == nil {
		<-r.Context().Done() // nothing more to say: a quiet stream
		return
	}
	next(w, r)
}

// sse answers with a stream of raw text, then ends it (a cut connection).
func sse(text string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, text)
	}
}

func watchEvents(t *testing.T, s *streamServer, o WatchOptions, n int) []WatchEvent {
	t.Helper()
	srv := httptest.NewServer(s)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []WatchEvent
	for ev := range New([]string{srv.URL}).Watch(ctx, o) {
		got = append(got, ev)
		if len(got) == n {
			break
		}
	}
	if len(got) != n {
		t.Fatalf("got %d events, want %d: %+v", len(got), n, got)
	}
	return got
}

func describeEvents(evs []WatchEvent) string {
	var b []string
	for _, ev := range evs {
		b = append(b, fmt.Sprintf("%s %d %s", ev.Type, ev.Index, ev.Key))
	}
	return strings.Join(b, ", ")
}

// TestWatchDeliversAnEntrysEventsOnce: the events of one entry (a
// reclamation's deleted events) carry one id, on the last. A stream cut
// among them is resumed from the id before the entry, which gets them all
// again: the client delivers none of them before the entry's id came, so
// each is delivered once.
func TestWatchDeliversAnEntrysEventsOnce(t *testing.T) {
	s := &streamServer{streams: []func(http.ResponseWriter, *http.Request){
		sse("id: 5\nevent: sync\ndata: {\"type\":\"sync\",\"index\":5}\n\n" +
			"event: deleted\ndata: {\"type\":\"deleted\",\"index\":9,\"key\":\"a\",\"state\":\"absent\"}\n\n"),
		sse("event: deleted\ndata: {\"type\":\"deleted\",\"index\":9,\"key\":\"a\",\"state\":\"absent\"}\n\n" +
			"id: 9\nevent: deleted\ndata: {\"type\":\"deleted\",\"index\":9,\"key\":\"b\",\"state\":\"absent\"}\n\n" +
			"id: 9\nevent: sync\ndata: {\"type\":\"sync\",\"index\":9}\n\n"),
	}}
	got := watchEvents(t, s, WatchOptions{Prefix: "", From: 4}, 4)
	if d := describeEvents(got); d != "sync 5 , deleted 9 a, deleted 9 b, sync 9 " {
		t.Fatalf("events: %s", d)
	}
	if !strings.Contains(s.queries[1], "from=5") {
		t.Fatalf("the second stream resumed with %q, want from=5", s.queries[1])
	}
}

// TestWatchMovesOnFromANodeThatCannotServeYet: a node that cannot serve a
// stream yet answers 200 with an unavailable event (so that a browser's
// EventSource retries); the Go client takes it as a refusal that may pass:
// it does not deliver it, and asks again (another endpoint, when it has
// more), resuming where it was.
func TestWatchMovesOnFromANodeThatCannotServeYet(t *testing.T) {
	s := &streamServer{streams: []func(http.ResponseWriter, *http.Request){
		sse("retry: 1500\n\nevent: unavailable\ndata: {\"type\":\"unavailable\",\"reason\":\"not_ready\"}\n\n"),
		sse("retry: 1500\n\nid: 7\nevent: sync\ndata: {\"type\":\"sync\",\"index\":7}\n\n"),
	}}
	got := watchEvents(t, s, WatchOptions{From: 7}, 1)
	if got[0].Type != WatchSync || got[0].Index != 7 {
		t.Fatalf("delivered %+v, want the sync of the stream that was served", got)
	}
	if len(s.queries) != 2 || !strings.Contains(s.queries[1], "from=7") {
		t.Fatalf("asked %q", s.queries)
	}
}
