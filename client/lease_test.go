package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// ttlServer is a fake fenced that grants every acquire with grantTTL and
// renews with renewTTL, whatever TTL was asked for: as the cluster does for
// a key whose TTL the same holder's later acquire changed.
type ttlServer struct {
	grantTTL, renewTTL string

	mu        sync.Mutex
	renewedAt []time.Time // when each renew arrived
}

func (s *ttlServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/acquire":
		var req AcquireRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		_ = json.NewEncoder(w).Encode(Grant{Key: req.Key, Holder: req.Holder, Token: 8589934593, Epoch: 2, Seq: 1, TTL: s.grantTTL})
	case "/v1/renew":
		s.mu.Lock()
		s.renewedAt = append(s.renewedAt, time.Now())
		s.mu.Unlock()
		var req RenewRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		_ = json.NewEncoder(w).Encode(RenewResponse{Key: req.Key, Holder: req.Holder, Token: req.Token, TTL: s.renewTTL})
	default:
		_ = json.NewEncoder(w).Encode(ReleaseResponse{Key: "k", Token: 8589934593, State: "released"})
	}
}

func (s *ttlServer) lastRenew() (time.Time, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.renewedAt) == 0 {
		return time.Time{}, 0
	}
	return s.renewedAt[len(s.renewedAt)-1], len(s.renewedAt)
}

// TestLeaseDeadlineFollowsServerTTL: a Lease counts its deadline from the
// TTL the server answered (Grant.TTL, then RenewResponse.TTL), not from the
// TTL it asked for, and renews often enough for that TTL.
func TestLeaseDeadlineFollowsServerTTL(t *testing.T) {
	fake := &ttlServer{grantTTL: "3s", renewTTL: "1500ms"}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := New([]string{srv.URL})
	ctx := context.Background()

	l, err := c.Lease(ctx, "k", "h", LeaseOptions{TTL: 30 * time.Second})
	answered := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	if dl := l.Deadline(); dl.After(answered.Add(3 * time.Second)) {
		t.Fatalf("the server granted a 3s lease, yet the Lease's deadline is %v after the answer", dl.Sub(answered))
	}
	// The renewals report 1.5s: the deadline follows, and renewals come
	// often enough to keep that lease.
	eventually(t, 10*time.Second, func() error {
		if _, n := fake.lastRenew(); n < 2 {
			return errors.New("fewer than 2 renewals yet")
		}
		return nil
	})
	last, _ := fake.lastRenew()
	if dl := l.Deadline(); dl.After(last.Add(1500 * time.Millisecond)) {
		t.Fatalf("the server renewed for 1.5s, yet the deadline is %v after the last renewal arrived", dl.Sub(last))
	}
	select {
	case <-l.Done():
		t.Fatalf("the lease ended although every renewal succeeded: %v", l.Err())
	default:
	}
}

// TestLeaseOptionsRefused: a negative margin, or one that leaves no time of
// the TTL, is refused before anything is sent.
func TestLeaseOptionsRefused(t *testing.T) {
	fake := &ttlServer{grantTTL: "10s", renewTTL: "10s"}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := New([]string{srv.URL})
	for _, o := range []LeaseOptions{
		{TTL: 10 * time.Second, Margin: -time.Second},
		{TTL: 10 * time.Second, Margin: 10 * time.Second},
		{TTL: -time.Second},
	} {
		if l, err := c.Lease(context.Background(), "k", "h", o); !errors.Is(err, ErrBadRequest) {
			if l != nil {
				_ = l.Release(context.Background())
			}
			t.Fatalf("%+v: %v, want ErrBadRequest", o, err)
		}
	}
}
