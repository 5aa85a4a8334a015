package api

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fenced/fenced/client"
)

// TestRefusalNamesTheLeaderOfItsTime: a refusal written after a leader change
// names the new leader, not the one known when the request came.
func TestRefusalNamesTheLeaderOfItsTime(t *testing.T) {
	leader := "10.0.0.1:7810"
	for _, tc := range []struct {
		code int
		want string
	}{
		{http.StatusServiceUnavailable, "10.0.0.2:7810"},
		{http.StatusOK, "10.0.0.1:7810"}, // a success is not held up by asking again
	} {
		rec := httptest.NewRecorder()
		id := "n1"
		now := func() (string, string) { return id, leader }
		w := &statusWriter{ResponseWriter: rec, leader: now}
		setLeader(w.Header(), now)
		leader, id = "10.0.0.2:7810", "n2"
		w.WriteHeader(tc.code)
		if got := rec.Header().Get(client.LeaderHeader); got != tc.want {
			t.Errorf("status %d: %s names %q, want %q", tc.code, client.LeaderHeader, got, tc.want)
		}
		if got, want := rec.Header().Get(client.LeaderIDHeader), map[bool]string{true: "n2", false: "n1"}[tc.code/100 != 2]; got != want {
			t.Errorf("status %d: %s names %q, want %q", tc.code, client.LeaderIDHeader, got, want)
		}
		leader = "10.0.0.1:7810"
	}
}
