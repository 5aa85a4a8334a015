package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
)

// TestShortTTLIsWarnedWithTheNumbers: a lock whose TTL cannot survive one
// leader failover with the cluster's timeouts says so, with the numbers
// (fencectl lock --ttl 5s passed its own minimum, yet its command was
// killed 1.1 s after a leader kill).
func TestShortTTLIsWarnedWithTheNumbers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(client.Status{ID: "n1", Ready: true, FailoverMS: 3300})
	}))
	defer srv.Close()
	for _, tc := range []struct {
		ttl  time.Duration
		warn bool
	}{{5 * time.Second, true}, {8 * time.Second, false}} {
		tm, err := newLockTiming(tc.ttl, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		e, _, stderr := testEnv(nil)
		s := &lockSession{e: e, c: client.New([]string{srv.URL}), t: tm}
		s.warnShortTTL(context.Background())
		s.warnShortTTL(context.Background()) // once per session
		got := stderr.String()
		if tc.warn != strings.Contains(got, "may not survive a leader failover") || tc.warn && (!strings.Contains(got, "3.3s") || !strings.Contains(got, "Use --ttl 7.5s")) {
			t.Errorf("--ttl %v: stderr %q", tc.ttl, got)
		}
		if strings.Count(got, "warning") > 1 {
			t.Errorf("--ttl %v: warned %d times", tc.ttl, strings.Count(got, "warning"))
		}
	}
}
