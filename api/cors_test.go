package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func corsServer(t *testing.T, origins ...string) *Server {
	t.Helper()
	return NewSecureServer(&failingNode{ready: true, leader: true}, hclog.NewNullLogger(), ServerOptions{CORSOrigins: origins})
}

func corsAnswer(s *Server, method, path, origin string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// TestCORSLetsListedOriginsRead: a page of a listed origin may read the
// watch stream and the keys (with credentials: the origin is named, never
// "*"); any other origin, and every write, gets no CORS header, so the
// browser keeps the answer from the page. A preflight of a listed origin
// for those reads is answered without credentials.
func TestCORSLetsListedOriginsRead(t *testing.T) {
	s := corsServer(t, "https://console.example.com", "http://127.0.0.1:8080")
	for _, path := range []string{"/v1/watch", "/v1/keys", "/v1/keys/a/b", "/v1/cluster"} {
		w := corsAnswer(s, http.MethodGet, path, "https://console.example.com")
		h := w.Header()
		if h.Get("Access-Control-Allow-Origin") != "https://console.example.com" || h.Get("Access-Control-Allow-Credentials") != "true" ||
			!strings.Contains(h.Get("Vary"), "Origin") || !strings.Contains(h.Get("Access-Control-Expose-Headers"), "X-Fenced-Index") {
			t.Fatalf("GET %s from a listed origin: %v", path, h)
		}
	}
	for _, c := range []struct{ method, path, origin string }{
		{http.MethodGet, "/v1/watch", "https://evil.example.com"},
		{http.MethodGet, "/v1/watch", "https://console.example.com.evil.example.com"},
		{http.MethodGet, "/v1/watch", "http://console.example.com"},
		{http.MethodPost, "/v1/acquire", "https://console.example.com"},
		{http.MethodGet, "/v1/snapshot", "https://console.example.com"},
	} {
		if h := corsAnswer(s, c.method, c.path, c.origin).Header(); h.Get("Access-Control-Allow-Origin") != "" || h.Get("Access-Control-Allow-Credentials") != "" {
			t.Fatalf("%s %s from %s: CORS headers %v", c.method, c.path, c.origin, h)
		}
	}
	pre := corsAnswer(s, http.MethodOptions, "/v1/watch?prefix=a", "http://127.0.0.1:8080",
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "last-event-id, cache-control")
	h := pre.Header()
	if pre.Code != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "http://127.0.0.1:8080" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "GET") || !strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), "last-event-id") {
		t.Fatalf("preflight: %d %v", pre.Code, h)
	}
	for _, c := range []struct{ path, origin, method string }{
		{"/v1/acquire", "http://127.0.0.1:8080", "POST"},
		{"/v1/watch", "http://127.0.0.1:8080", "DELETE"},
		{"/v1/watch", "https://evil.example.com", "GET"},
	} {
		w := corsAnswer(s, http.MethodOptions, c.path, c.origin, "Access-Control-Request-Method", c.method)
		if w.Code == http.StatusNoContent || w.Header().Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("preflight of %s %s from %s: %d %v", c.method, c.path, c.origin, w.Code, w.Header())
		}
	}
	// No Origin, no CORS: a plain client's answers are unchanged.
	if h := corsAnswer(s, http.MethodGet, "/v1/keys", "").Header(); h.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("a request without Origin got %v", h)
	}
}

// TestCORSAnyOriginNeverWithCredentials: "*" lets any origin read, without
// credentials; a server without --cors-origins sends no CORS header.
func TestCORSAnyOriginNeverWithCredentials(t *testing.T) {
	h := corsAnswer(corsServer(t, "*"), http.MethodGet, "/v1/watch", "https://anywhere.example").Header()
	if h.Get("Access-Control-Allow-Origin") != "*" || h.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("any origin: %v", h)
	}
	if h := corsAnswer(corsServer(t), http.MethodGet, "/v1/watch", "https://anywhere.example").Header(); h.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("no CORS origins: %v", h)
	}
}

func TestParseCORSOrigins(t *testing.T) {
	got, err := ParseCORSOrigins(" https://Console.Example.com , http://127.0.0.1:8080/ ,*,https://a:443,http://[::1]:80")
	if err != nil || strings.Join(got, " ") != "https://console.example.com http://127.0.0.1:8080 * https://a http://[::1]" {
		t.Fatalf("parse: %q %v", got, err)
	}
	if got, err := ParseCORSOrigins(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %q %v", got, err)
	}
	for _, bad := range []string{"console.example.com", "ftp://x", "https://a/path", "https://a?q", "https://user@a", "https://a:port", "https://", "http://a,,http://b"} {
		if _, err := ParseCORSOrigins(bad); err == nil {
			t.Fatalf("%q: accepted", bad)
		}
	}
}
