package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
)

// streamAnswer is a watch answer as an EventSource reads it.
type streamAnswer struct {
	status      int
	contentType string
	retry       int // the first retry field, in milliseconds
	events      []string
	data        []client.WatchEvent
}

func getStream(t *testing.T, url string, header ...string) streamAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := streamAnswer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	sc := bufio.NewScanner(resp.Body)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "retry: ") && a.retry == 0:
			a.retry, _ = strconv.Atoi(strings.TrimPrefix(line, "retry: "))
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var ev client.WatchEvent
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev)
			a.events, a.data = append(a.events, name), append(a.data, ev)
			if name == client.WatchSync {
				return a // a live stream: enough
			}
		}
	}
	return a
}

// TestWatchANodeCannotServeYetIsRetriedByEventSource: a browser's
// EventSource stops for good on any answer but 200 text/event-stream, so a
// node that cannot serve a stream yet (no leader, not ready, a limit)
// answers 200 with a retry field and an unavailable event saying why, then
// ends the stream; EventSource reconnects after the retry delay. A stream
// that is served carries a retry field too.
func TestWatchANodeCannotServeYetIsRetriedByEventSource(t *testing.T) {
	srv := httptest.NewServer(NewServer(&failingNode{err: cluster.ErrNotReady}, hclog.NewNullLogger()))
	defer srv.Close()
	a := getStream(t, srv.URL+"/v1/watch?prefix=a")
	if a.status != http.StatusOK || a.contentType != "text/event-stream" || a.retry < 1000 || a.retry > 2000 ||
		len(a.events) != 1 || a.events[0] != client.WatchUnavailable || a.data[0].Reason != "unavailable" {
		t.Fatalf("a node that cannot serve: %+v", a)
	}
	// A limit says when to come back.
	limited := httptest.NewServer(NewSecureServer(&failingNode{err: cluster.ErrNotReady}, hclog.NewNullLogger(), ServerOptions{RateLimit: 0.001, RateBurst: 1}))
	defer limited.Close()
	getStream(t, limited.URL+"/v1/watch")
	a = getStream(t, limited.URL+"/v1/watch")
	if a.status != http.StatusOK || len(a.events) != 1 || a.events[0] != client.WatchUnavailable || a.data[0].Reason != "rate_limited" || a.retry < 1000 {
		t.Fatalf("a watch over the rate limit: %+v", a)
	}
	// Bad parameters are refused for good, as before.
	if a := getStream(t, srv.URL+"/v1/watch?prefix=a&key=b"); a.status != http.StatusBadRequest {
		t.Fatalf("bad parameters: %+v", a)
	}
	// A served stream says how soon to reconnect.
	_, _, url := startOne(t, nil)
	if a := getStream(t, url+"/v1/watch?prefix=a"); a.status != http.StatusOK || a.retry < 1000 || a.retry > 2000 || a.events[len(a.events)-1] != client.WatchSync {
		t.Fatalf("a served stream: %+v", a)
	}
}
