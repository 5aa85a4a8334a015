package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
)

// A lock's deadline follows the TTL the server granted, not the one fencectl
// asked for: the same holder's acquire elsewhere may have shortened it, and
// the server can grant the key to another holder once its own TTL ran out.
func TestKeeperDeadlineFollowsServerTTL(t *testing.T) {
	lt, err := newLockTiming(30*time.Second, 0, 0) // margin 10s
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	k := newKeeper(nil, client.Grant{Key: "k", Holder: "h", Token: 4294967297, TTL: "3s"}, lt, sent)
	if !k.expired(sent) {
		t.Fatalf("the server granted 3s and the kill margin is %v, yet the deadline is %v after the send time; want it passed at once",
			lt.margin, k.deadline().Sub(sent))
	}

	k = newKeeper(nil, client.Grant{Key: "k", Holder: "h", Token: 4294967297, TTL: "12s"}, lt, sent)
	if got, want := k.deadline().Sub(sent), 2*time.Second; got != want {
		t.Fatalf("server TTL 12s, margin 10s: deadline %v after the send time, want %v", got, want)
	}

	k = newKeeper(nil, client.Grant{Key: "k", Holder: "h", Token: 4294967297, TTL: "soon"}, lt, sent)
	if !k.expired(sent) {
		t.Fatalf("a grant without a usable TTL must end the lock at once (fail closed); deadline %v after the send time", k.deadline().Sub(sent))
	}
}

// A renewal answered with a shorter TTL shortens the deadline from its send
// time.
func TestKeeperRenewalTakesServerTTL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(client.RenewResponse{Key: "k", Holder: "h", Token: 4294967297, TTL: "11s"})
	}))
	defer srv.Close()
	lt, err := newLockTiming(30*time.Second, 0, 0) // margin 10s
	if err != nil {
		t.Fatal(err)
	}
	k := newKeeper(client.New([]string{srv.URL}), client.Grant{Key: "k", Holder: "h", Token: 4294967297, TTL: "30s"}, lt, time.Now())
	before := time.Now()
	if err := k.renew(t.Context(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(k.deadline()); left > time.Second || k.deadline().Before(before) {
		t.Fatalf("renewal answered 11s with a 10s margin: %v left until the deadline, want at most 1s", left)
	}
}
