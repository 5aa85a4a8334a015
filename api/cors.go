package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fenced/fenced/client"
)

// corsRoutes are the routes a page of another origin may use: the watch
// stream and the reads a page watching keys needs. Writes and admin routes
// are never offered.
var corsRoutes = map[string]bool{
	"GET /v1/watch":         true,
	"GET /v1/keys":          true,
	"GET /v1/keys/{key...}": true,
	"GET /v1/cluster":       true,
}

// corsExposed are the answer headers a page may read.
var corsExposed = strings.Join([]string{client.IndexHeader, client.LeaderHeader, client.LeaderIDHeader, client.NodeHeader}, ", ")

// corsPolicy says which origins may read through a browser.
type corsPolicy struct {
	// any lets every origin read, without credentials ("*").
	any     bool
	origins map[string]bool
}

// ParseCORSOrigins reads a comma-separated list of origins
// ("https://console.example.com", "http://127.0.0.1:8080") or "*" for any
// origin, into their canonical form (lower case, no trailing slash). An
// entry that is not an origin (a path, a query, credentials, another
// scheme than http or https) is an error.
func ParseCORSOrigins(list string) ([]string, error) {
	var out []string
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	for _, raw := range strings.Split(list, ",") {
		o := strings.TrimSpace(raw)
		if o == "*" {
			out = append(out, o)
			continue
		}
		u, err := url.Parse(strings.TrimSuffix(o, "/"))
		switch {
		case o == "":
			return nil, fmt.Errorf("an empty origin in %q", list)
		case err != nil:
			return nil, fmt.Errorf("origin %q: %v", o, err)
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("origin %q: want http://HOST[:PORT] or https://HOST[:PORT]", o)
		case u.Host == "" || u.Hostname() == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
			return nil, fmt.Errorf("origin %q: an origin is a scheme, a host and a port, nothing more", o)
		case u.Port() == "" && strings.HasSuffix(u.Host, ":"):
			return nil, fmt.Errorf("origin %q: an empty port", o)
		}
		host := u.Host
		if u.Scheme == "http" && u.Port() == "80" || u.Scheme == "https" && u.Port() == "443" {
			host = strings.TrimSuffix(host, ":"+u.Port()) // browsers send no default port
		}
		out = append(out, strings.ToLower(u.Scheme+"://"+host))
	}
	return out, nil
}

// newCORSPolicy returns the policy of origins (as ParseCORSOrigins gives
// them), or nil when there is none.
func newCORSPolicy(origins []string) *corsPolicy {
	if len(origins) == 0 {
		return nil
	}
	p := &corsPolicy{origins: make(map[string]bool)}
	for _, o := range origins {
		if o == "*" {
			p.any = true
			continue
		}
		p.origins[strings.ToLower(o)] = true
	}
	return p
}

// cors adds the CORS headers for a request of another origin that may read
// the route it asks for, and answers its preflight. It returns true when it
// answered the request itself.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if s.corsPolicy == nil || origin == "" {
		return false
	}
	w.Header().Add("Vary", "Origin")
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	method := r.Method
	if preflight {
		method = r.Header.Get("Access-Control-Request-Method")
	}
	lookup := r.Clone(r.Context())
	lookup.Method = method
	if _, pattern := s.mux.Handler(lookup); method != http.MethodGet || !corsRoutes[pattern] {
		return false
	}
	h := w.Header()
	switch {
	case s.corsPolicy.origins[strings.ToLower(origin)]:
		// A named origin may send credentials (a client certificate).
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Credentials", "true")
	case s.corsPolicy.any:
		// Never "*" with credentials: browsers refuse it, and it would
		// let every page act with its visitor's certificate.
		h.Set("Access-Control-Allow-Origin", "*")
	default:
		return false
	}
	if !preflight {
		h.Set("Access-Control-Expose-Headers", corsExposed)
		return false
	}
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Methods", "GET")
	// EventSource sends Last-Event-ID (and Cache-Control) when it
	// reconnects; a script's fetch may send a bearer token.
	h.Set("Access-Control-Allow-Headers", "Authorization, Last-Event-ID, Cache-Control")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}
