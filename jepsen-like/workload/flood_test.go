package workload

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fenced/fenced/jepsen-like/history"
)

// TestFirstEvent: the flood tells a refused watch from an open one by the
// answer's first event, as fenced refuses a limit with a stream that says
// unavailable and ends.
func TestFirstEvent(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   string
	}{
		{http.StatusForbidden, `{"code":"forbidden","message":"no"}`, "forbidden"},
		{http.StatusBadGateway, `not json`, "http_502"},
		{http.StatusOK, "retry: 1500\n\nevent: unavailable\ndata: {\"type\":\"unavailable\",\"reason\":\"too_many_watches\"}\n\n", "too_many_watches"},
		{http.StatusOK, "retry: 1000\n\nevent: state\ndata: {\"type\":\"state\",\"key\":\"mallory/q\"}\n\n", history.CodeOK},
		{http.StatusOK, "retry: 1000\n\n", history.CodeTransport},
	}
	for _, c := range cases {
		resp := &http.Response{StatusCode: c.status, Body: io.NopCloser(strings.NewReader(c.body))}
		_, cancel := context.WithCancel(context.Background())
		if got := firstEvent(resp, cancel); got != c.want {
			t.Errorf("%d %q: %s, want %s", c.status, c.body, got, c.want)
		}
		cancel()
	}
}
