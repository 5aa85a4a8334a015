package guard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenced/fenced/fence"
)

// failingGuard answers every call with an error that is neither stale nor
// invalid, like a guard whose disk or database is gone.
type failingGuard struct{}

func (failingGuard) Admit(context.Context, string, fence.Token) error {
	return errors.New("disk on fire at /var/lib/secret")
}

func (failingGuard) Highest(context.Context, string) (fence.Token, error) { return 0, nil }

func TestMiddleware(t *testing.T) {
	g := NewMemory()
	var got []fence.Token // tokens the handler saw
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := TokenFrom(r.Context())
		if !ok {
			t.Error("handler called without a token in the context")
		}
		got = append(got, tok)
		w.WriteHeader(http.StatusNoContent)
	})
	mux := http.NewServeMux()
	mux.Handle("PUT /items/{id}", Middleware(g, KeyFromPathValue("id"), handler))
	mux.Handle("PUT /by-header", Middleware(g, KeyFromHeader("Resource"), handler))
	mux.Handle("PUT /broken", Middleware(failingGuard{}, KeyFromHeader("Resource"), handler))

	cases := []struct {
		name     string
		path     string
		headers  map[string][]string
		status   int
		code     string
		highest  string // "highest" in a stale answer
		admitted fence.Token
	}{
		{"missing token", "/items/a", nil, 400, CodeMalformedToken, "", 0},
		{"empty token", "/items/a", h("", ""), 400, CodeMalformedToken, "", 0},
		{"malformed token", "/items/a", h("12x", ""), 400, CodeMalformedToken, "", 0},
		{"leading zero", "/items/a", h("042", ""), 400, CodeMalformedToken, "", 0},
		{"signed token", "/items/a", h("+42", ""), 400, CodeMalformedToken, "", 0},
		{"zero token", "/items/a", h("0", ""), 400, CodeMalformedToken, "", 0},
		{"above 2^63-1", "/items/a", h("9223372036854775808", ""), 400, CodeMalformedToken, "", 0},
		{"two tokens", "/items/a", map[string][]string{HeaderName: {"4294967297", "4294967298"}}, 400, CodeMalformedToken, "", 0},
		{"ok", "/items/a", h("4294967302", ""), 204, "", "", 4294967302},
		{"equal ok", "/items/a", h("4294967302", ""), 204, "", "", 4294967302},
		{"stale", "/items/a", h("4294967301", ""), 409, CodeStaleToken, "4294967302", 0},
		{"other key independent", "/items/b", h("4294967297", ""), 204, "", "", 4294967297},
		{"higher than 2^53 stays exact", "/items/b", h("9007199254740997", ""), 204, "", "", 9007199254740997},
		{"stale above 2^53", "/items/b", h("9007199254740996", ""), 409, CodeStaleToken, "9007199254740997", 0},
		{"key from header", "/by-header", h("4294967297", "r1"), 204, "", "", 4294967297},
		{"missing key header", "/by-header", h("4294967297", ""), 400, CodeBadKey, "", 0},
		{"guard failure", "/broken", h("4294967297", "r1"), 503, CodeGuardUnavailable, "", 0},
	}
	for _, c := range cases {
		got = nil
		req := httptest.NewRequest(http.MethodPut, c.path, nil)
		for k, vs := range c.headers {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, rec.Code, c.status, rec.Body)
			continue
		}
		if c.admitted != 0 {
			if len(got) != 1 || got[0] != c.admitted {
				t.Errorf("%s: handler saw %v, want [%s]", c.name, got, c.admitted)
			}
			continue
		}
		if len(got) != 0 {
			t.Errorf("%s: handler called on a refusal", c.name)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", c.name, ct)
		}
		var body map[string]any // raw, to see strings versus numbers
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Errorf("%s: body %q: %v", c.name, rec.Body, err)
			continue
		}
		if body["code"] != c.code || body["message"] == "" || body["message"] == nil {
			t.Errorf("%s: body %v, want code %q and a message", c.name, body, c.code)
		}
		if c.highest != "" && body["highest"] != c.highest {
			t.Errorf("%s: highest %#v, want the string %q", c.name, body["highest"], c.highest)
		}
		if c.code == CodeGuardUnavailable && strings.Contains(rec.Body.String(), "secret") {
			t.Errorf("%s: storage error leaked into the answer: %s", c.name, rec.Body)
		}
	}
}

// h builds request headers: a Fencing-Token, and a Resource header unless key
// is "".
func h(tok, key string) map[string][]string {
	m := map[string][]string{HeaderName: {tok}}
	if key != "" {
		m["Resource"] = []string{key}
	}
	return m
}

func TestTokenFromWithoutMiddleware(t *testing.T) {
	if _, ok := TokenFrom(httptest.NewRequest(http.MethodGet, "/", nil).Context()); ok {
		t.Fatal("TokenFrom found a token in a plain request")
	}
}
