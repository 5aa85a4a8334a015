package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fenced/fenced/api"
)

// TestForcedReleaseNamesItsGrant: release --force without a token reads the
// key's current token once and sends it with every attempt, so a retry after
// a lost answer cannot end a later grant; it prints the token it ended.
func TestForcedReleaseNamesItsGrant(t *testing.T) {
	const tok = "8589934593"
	var mu sync.Mutex
	var releases []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet && r.URL.Path == "/v1/keys/db" {
			_ = json.NewEncoder(w).Encode(api.KeyInfo{Key: "db", Holder: "alice", Token: 8589934593, State: "held"})
			return
		}
		var req api.ReleaseRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		releases = append(releases, req.Token.String())
		n := len(releases)
		mu.Unlock()
		if req.Token == 0 {
			// What a server does with a tokenless forced release: it
			// ends whatever grant is current when the request arrives.
			_ = json.NewEncoder(w).Encode(api.ReleaseResponse{Key: "db", Token: 8589934594, Holder: "waiter", State: "released"})
			return
		}
		if n == 1 { // the first attempt: its answer is lost
			w.WriteHeader(http.StatusGatewayTimeout)
			_ = json.NewEncoder(w).Encode(api.ErrorResponse{Code: "outcome_unknown", Message: "leadership lost while committing"})
			return
		}
		_ = json.NewEncoder(w).Encode(api.ReleaseResponse{Key: "db", Token: req.Token, Holder: "alice", State: "released"})
	}))
	defer srv.Close()
	e, stdout, stderr := testEnv(map[string]string{"FENCE_ENDPOINTS": srv.URL})
	code := run(context.Background(), e, []string{"release", "--force", "db"})
	mu.Lock()
	defer mu.Unlock()
	if code != exitOK || len(releases) != 2 || releases[0] != tok || releases[1] != tok {
		t.Fatalf("exit %d, attempts sent tokens %q (want %s twice), stdout %q, stderr %q", code, releases, tok, stdout, stderr)
	}
	if !strings.Contains(stdout.String(), "token:   "+tok) || !strings.Contains(stdout.String(), "holder:  alice") {
		t.Fatalf("the output does not name the grant it ended: %q", stdout)
	}
}
