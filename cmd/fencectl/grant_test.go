package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
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
			_ = json.NewEncoder(w).Encode(client.KeyInfo{Key: "db", Holder: "alice", Token: 8589934593, State: "held"})
			return
		}
		var req client.ReleaseRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		releases = append(releases, req.Token.String())
		n := len(releases)
		mu.Unlock()
		if req.Token == 0 {
			// What a server does with a tokenless forced release: it
			// ends whatever grant is current when the request arrives.
			_ = json.NewEncoder(w).Encode(client.ReleaseResponse{Key: "db", Token: 8589934594, Holder: "waiter", State: "released"})
			return
		}
		if n == 1 { // the first attempt: its answer is lost
			w.WriteHeader(http.StatusGatewayTimeout)
			_ = json.NewEncoder(w).Encode(client.ErrorResponse{Code: "outcome_unknown", Message: "leadership lost while committing"})
			return
		}
		_ = json.NewEncoder(w).Encode(client.ReleaseResponse{Key: "db", Token: req.Token, Holder: "alice", State: "released"})
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

// grantServer is a fake fenced that decides acquires as the FSM does (the
// same holder gets its grant back; a request id whose grant ended gets
// grant_ended) and, while lose is set, applies each acquire but answers
// that its outcome is unknown, as a leader that lost its leadership does.
type grantServer struct {
	mu     sync.Mutex
	lose   bool
	holder string
	reqID  string
	token  uint64
}

func (s *grantServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req client.AcquireRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	renewed := false
	switch {
	case s.holder == "":
		s.holder, s.reqID, s.token = req.Holder, req.RequestID, 8589934593
	case s.holder == req.Holder:
		renewed = true
	default:
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(client.ErrorResponse{Code: "held", Message: "key is held", HeldBy: s.holder, RetryAfter: "10s"})
		return
	}
	if s.lose {
		w.WriteHeader(http.StatusGatewayTimeout)
		_ = json.NewEncoder(w).Encode(client.ErrorResponse{Code: "outcome_unknown", Message: "leadership lost while committing"})
		return
	}
	_ = json.NewEncoder(w).Encode(client.Grant{Key: req.Key, Holder: s.holder, Token: fence.Token(s.token), Epoch: 2, Seq: 1, TTL: req.TTL, Renewed: renewed})
}

// TestAcquireRepeatAfterUnknownOutcome: an acquire without --holder whose
// outcome stayed unknown says how to repeat it, and the repeat gets the
// grant its first attempt may have made instead of being refused by it.
func TestAcquireRepeatAfterUnknownOutcome(t *testing.T) {
	fake := &grantServer{lose: true}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	vars := map[string]string{"FENCE_ENDPOINTS": srv.URL, "FENCE_TIMEOUT": "300ms"}
	e, _, stderr := testEnv(vars)
	if code := run(context.Background(), e, []string{"acquire", "db", "--ttl", "30s"}); code != exitErr || !strings.Contains(stderr.String(), "outcome unknown") {
		t.Fatalf("first run: exit %d, stderr %q", code, stderr)
	}
	t.Logf("first run: %s", stderr)
	fake.mu.Lock()
	fake.lose = false
	fake.mu.Unlock()
	// Repeat it as the message says, or else as it was: the docs call a
	// repeat safe.
	args := []string{"acquire", "db", "--ttl", "30s"}
	if m := regexp.MustCompile(`--holder (\S+) --request-id (\S+)`).FindStringSubmatch(stderr.String()); m != nil {
		args = append(args, "--holder", m[1], "--request-id", m[2])
	}
	e2, stdout2, stderr2 := testEnv(vars)
	code := run(context.Background(), e2, args)
	if code != exitOK || !strings.Contains(stdout2.String(), "renewed:  yes") || !strings.Contains(stdout2.String(), "8589934593") {
		t.Fatalf("repeating %q after an unknown outcome (first run said %q): exit %d, stdout %q, stderr %q", args, stderr, code, stdout2, stderr2)
	}
}
