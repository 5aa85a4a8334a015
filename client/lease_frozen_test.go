package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/fence"
)

// freezable is a fake leader that can be frozen: while frozen it accepts
// requests and never answers, as a SIGSTOPped process does.
type freezable struct {
	srv    *httptest.Server
	frozen atomic.Bool
	renews atomic.Int64
	thaw   chan struct{}
}

func newFreezable(t *testing.T) *freezable {
	t.Helper()
	f := &freezable{thaw: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.frozen.Load() {
			select {
			case <-r.Context().Done():
			case <-f.thaw:
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/acquire":
			var req AcquireRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			_ = json.NewEncoder(w).Encode(Grant{Key: req.Key, Holder: req.Holder, Token: fence.Token(1<<32 | 1), Epoch: 1, Seq: 1, TTL: req.TTL})
		case "/v1/renew":
			f.renews.Add(1)
			_ = json.NewEncoder(w).Encode(RenewResponse{Key: "k", Holder: "h", Token: fence.Token(1<<32 | 1), TTL: "6s"})
		case "/v1/release":
			_ = json.NewEncoder(w).Encode(ReleaseResponse{Key: "k", State: "released"})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() { close(f.thaw) }) // runs first: frozen handlers return
	return f
}

// TestLeaseRenewsThroughWhicheverNodeAnswers: a Lease whose leader freezes
// keeps its grant by renewing through another node, well before its
// deadline; the frozen node does not hold the renewal until the lease is
// lost.
func TestLeaseRenewsThroughWhicheverNodeAnswers(t *testing.T) {
	a, b := newFreezable(t), newFreezable(t)
	c := New([]string{a.srv.URL, b.srv.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Lease(ctx, "k", "h", LeaseOptions{TTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	a.frozen.Store(true)
	eventually(t, 25*time.Second, func() error {
		select {
		case <-l.Done():
			t.Fatalf("lease lost with its first node frozen: %v", l.Err())
		default:
		}
		if n := b.renews.Load(); n < 3 {
			return errors.New("fewer than 3 renewals through the second node")
		}
		return nil
	})
	select {
	case <-l.Done():
		t.Fatalf("lease lost with its first node frozen: %v", l.Err())
	default:
	}
}
