package client

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// eventually polls cond until it returns nil or the timeout passes, then
// fails the test with cond's last error: tests wait with it, never with
// bare sleeps. (The server's tests have testutil.Eventually; this module
// shares no code with them.)
func eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %v", timeout, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// writeJSON and writeError answer as a fenced node does, for the node
// stand-ins of these tests.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, ErrorResponse{Code: code, Message: msg})
}
