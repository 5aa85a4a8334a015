package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRedirectsAreNotFollowed: a node never redirects, so a 3xx comes from
// something else at that address; following it would send the request, and
// the bearer token, where the operator never pointed the client.
func TestRedirectsAreNotFollowed(t *testing.T) {
	var stolen []string
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen = append(stolen, r.Header.Get("Authorization"))
		writeJSON(w, http.StatusOK, Status{ID: "x", Ready: true})
	}))
	defer elsewhere.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	c := New([]string{redirector.URL}, WithBearerToken("secret-token-123456"), WithAttemptTimeout(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Status(ctx)
	if !errors.Is(err, ErrRedirected) || !strings.Contains(err.Error(), elsewhere.URL) {
		t.Fatalf("status through a redirect: %v; want ErrRedirected naming %s", err, elsewhere.URL)
	}
	_, err = c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"})
	if !errors.Is(err, ErrRedirected) {
		t.Fatalf("acquire through a redirect: %v; want ErrRedirected", err)
	}
	if len(stolen) != 0 {
		t.Fatalf("the redirect was followed %d times, with Authorization %q", len(stolen), stolen)
	}
}

// TestRedirectsAreNotFollowedWithAnHTTPClientOfTheCaller: WithHTTPClient
// keeps the rule; the caller's client is not changed.
func TestRedirectsAreNotFollowedWithAnHTTPClientOfTheCaller(t *testing.T) {
	followed := false
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { followed = true }))
	defer target.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusFound)
	}))
	defer redirector.Close()
	mine := &http.Client{}
	c := New([]string{redirector.URL}, WithHTTPClient(mine))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Status(ctx); !errors.Is(err, ErrRedirected) || followed {
		t.Fatalf("status: %v (followed: %v)", err, followed)
	}
	if mine.CheckRedirect != nil {
		t.Fatal("the caller's http.Client was changed")
	}
}

// TestCredentialsNeverGoOverPlainHTTP: a bearer token is sent over http
// only to a loopback address, or when the caller says the network is
// trusted; otherwise nothing is sent at all.
func TestCredentialsNeverGoOverPlainHTTP(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		writeJSON(w, http.StatusOK, Status{ID: "n1", Ready: true})
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The stand-in listens on 127.0.0.1; reach it by a name that is not
	// loopback to the check, as a remote node would be.
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := net.SplitHostPort(addr)
	remote := "http://fenced-node.invalid:" + port
	dial := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	c := New([]string{remote}, WithHTTPClient(dial), WithBearerToken("secret-token-123456"))
	if _, err := c.Status(ctx); !errors.Is(err, ErrInsecureCredentials) || !strings.Contains(err.Error(), "https") {
		t.Fatalf("a token over plain http to a remote node: %v; want ErrInsecureCredentials", err)
	}
	if len(got) != 0 {
		t.Fatalf("a request went out with Authorization %q", got)
	}
	if _, err := New([]string{remote}, WithHTTPClient(dial), WithBearerToken("secret-token-123456"), WithInsecureCredentials()).Status(ctx); err != nil {
		t.Fatalf("with WithInsecureCredentials: %v", err)
	}
	if _, err := New([]string{srv.URL}, WithBearerToken("secret-token-123456")).Status(ctx); err != nil {
		t.Fatalf("to a loopback address: %v", err)
	}
	if len(got) != 2 || got[0] != "Bearer secret-token-123456" {
		t.Fatalf("Authorization sent: %q", got)
	}
}
