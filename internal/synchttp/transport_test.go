package synchttp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countConns counts the connections a test server accepted.
func countConns(srv *httptest.Server) *atomic.Int64 {
	var n atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

func post(t *testing.T, hc *http.Client, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestRoundTripReusesOneConnection(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", r.Header.Get("Content-Type"))
		_, _ = w.Write(append([]byte("echo:"), b...))
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	hc := &http.Client{Transport: &Transport{}}
	for i := 0; i < 20; i++ {
		resp, body := post(t, hc, srv.URL+"/x", `{"n":1}`)
		if resp.StatusCode != 200 || body != `echo:{"n":1}` || resp.Header.Get("X-Echo") != "application/json" {
			t.Fatalf("answer %d: %d %q %v", i, resp.StatusCode, body, resp.Header)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("20 sequential requests used %d connections, want 1", n)
	}
}

func TestRoundTripReadsChunkedAndEmptyBodies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/empty" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		for i := 0; i < 3; i++ {
			_, _ = io.WriteString(w, strings.Repeat("x", 3000))
			w.(http.Flusher).Flush() // forces chunked encoding
		}
	}))
	defer srv.Close()
	hc := &http.Client{Transport: &Transport{}}
	for i := 0; i < 2; i++ {
		if _, body := post(t, hc, srv.URL+"/chunked", ""); len(body) != 9000 {
			t.Fatalf("chunked body: %d bytes, want 9000", len(body))
		}
		if resp, body := post(t, hc, srv.URL+"/empty", ""); resp.StatusCode != 204 || body != "" {
			t.Fatalf("empty answer: %d %q", resp.StatusCode, body)
		}
	}
}

func TestConnectionCloseIsNotReused(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	hc := &http.Client{Transport: &Transport{}}
	for i := 0; i < 3; i++ {
		if _, body := post(t, hc, srv.URL, ""); body != "bye" {
			t.Fatalf("body %q", body)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections for 3 requests answered Connection: close, want 3", n)
	}
}

// A request blocked on a slow answer ends when its context does, and its
// connection, left mid-exchange, is never used again.
func TestCancelEndsBlockedRequestAndDropsConnection(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	defer close(release)
	hc := &http.Client{Transport: &Transport{}}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/slow", strings.NewReader("{}"))
	start := time.Now()
	_, err := hc.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked request: err %v, want the context's deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("cancelled request returned after %v", took)
	}
	if _, body := post(t, hc, srv.URL+"/fast", ""); body != "ok" {
		t.Fatalf("body %q", body)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the cancelled one is not reused)", n)
	}
}

// The trace hook that callers use to tell "never sent" from "maybe served"
// fires before the request reaches the wire, and never for a failed dial.
func TestWroteHeadersTrace(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	hc := &http.Client{Transport: &Transport{DialTimeout: time.Second}}
	do := func(url string) (bool, error) {
		var wrote atomic.Bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return wrote.Load(), err
	}
	if wrote, err := do(srv.URL); err != nil || !wrote {
		t.Fatalf("served request: wrote=%v err=%v", wrote, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	wrote, err := do("http://" + addr)
	var op *net.OpError
	if err == nil || wrote || !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("refused dial: wrote=%v err=%v, want a dial error and no WroteHeaders", wrote, err)
	}
}

func TestTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "secure")
	}))
	defer srv.Close()
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	hc := &http.Client{Transport: &Transport{TLS: &tls.Config{RootCAs: pool}}}
	if _, body := post(t, hc, srv.URL, ""); body != "secure" {
		t.Fatalf("body %q", body)
	}
	// Without the server's CA the handshake fails as a certificate error.
	hc = &http.Client{Transport: &Transport{}}
	_, err := hc.Post(srv.URL, "text/plain", nil)
	var verr *tls.CertificateVerificationError
	if !errors.As(err, &verr) {
		t.Fatalf("untrusted server: err %v, want a certificate verification error", err)
	}
}

func TestRefusesOtherSchemes(t *testing.T) {
	hc := &http.Client{Transport: &Transport{}}
	if _, err := hc.Get("ftp://127.0.0.1/x"); err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
		t.Fatalf("ftp: err %v", err)
	}
}

// BenchmarkRoundTrip compares this transport with net/http's on the same
// loopback server (whose CPU is in the figures too): go test -bench .
// -benchmem ./internal/synchttp
func BenchmarkRoundTrip(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"holder":"h","renewed":[{"key":"k","holder":"h","token":"8589934593","ttl":"10s"}]}`)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"synchttp", &Transport{}},
		{"net-http", &http.Transport{MaxIdleConnsPerHost: 64}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			hc := &http.Client{Transport: tc.rt}
			defer hc.CloseIdleConnections()
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := hc.Post(srv.URL, "application/json", strings.NewReader(`{"holder":"h"}`))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
