package api

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/ui"
)

func get(t *testing.T, h http.Handler, path string, hdr ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// TestConsoleServed: the console's files come with a policy that allows
// no inline script or style, and /ui leads to /ui/.
func TestConsoleServed(t *testing.T) {
	s := NewServer(&recordingNode{}, hclog.NewNullLogger())
	s.EnableConsole()
	for _, tc := range []struct{ path, ctype, body string }{
		{"/ui/", "text/html", `<script src="app.js" defer></script>`},
		{"/ui/app.js", "javascript", "textContent"},
		{"/ui/style.css", "text/css", "--fg"},
	} {
		resp := get(t, s, tc.path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), tc.ctype) || !strings.Contains(string(body), tc.body) {
			t.Errorf("GET %s: %d %q, body has %q: %v", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.body, strings.Contains(string(body), tc.body))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: policy %q lacks %q", tc.path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: policy %q allows something unsafe", tc.path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", tc.path)
		}
	}
	if resp := get(t, s, "/ui"); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want a redirect to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestConsoleOff: a server that was not asked for the console (fenced
// --ui=false) has no /ui/.
func TestConsoleOff(t *testing.T) {
	s := NewServer(&recordingNode{}, hclog.NewNullLogger())
	if resp := get(t, s, "/ui/"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /ui/ without the console: %d, want 404", resp.StatusCode)
	}
}

// TestConsoleNeedsNoCredentialsButItsDataDoes: with tokens on, anyone may
// load the page (it holds nothing), and the API it calls still refuses a
// request without a token.
func TestConsoleNeedsNoCredentialsButItsDataDoes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("0123456789abcdef0123 admin root\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSecureServer(&recordingNode{}, hclog.NewNullLogger(), ServerOptions{Tokens: tokens})
	s.EnableConsole()
	for _, tc := range []struct {
		path   string
		hdr    []string
		status int
	}{
		{"/ui/", nil, http.StatusOK},
		{"/ui/app.js", nil, http.StatusOK},
		{"/ui", nil, http.StatusTemporaryRedirect},
		{"/v1/cluster", nil, http.StatusUnauthorized},
		{"/v1/keys", nil, http.StatusUnauthorized},
		{"/v1/cluster", []string{"Authorization", "Bearer 0123456789abcdef0123"}, http.StatusOK},
	} {
		if resp := get(t, s, tc.path, tc.hdr...); resp.StatusCode != tc.status {
			t.Errorf("GET %s %v: %d, want %d", tc.path, tc.hdr, resp.StatusCode, tc.status)
		}
	}
}

// TestConsoleCSPNamesOnlyOrigins: a member's address cannot add a
// directive to the policy.
func TestConsoleCSPNamesOnlyOrigins(t *testing.T) {
	csp := ui.CSP([]string{"http://10.0.0.1:7700", "https://[::1]:7700", "http://x; script-src *", "javascript:alert(1)", "http://"})
	if !strings.Contains(csp, "connect-src 'self' http://10.0.0.1:7700 https://[::1]:7700;") {
		t.Errorf("policy %q lacks the members' origins", csp)
	}
	if strings.Contains(csp, "script-src *") || strings.Contains(csp, "javascript") {
		t.Errorf("policy %q took a hostile address", csp)
	}
	// The page is told the same origins as its policy names.
	h := ui.Handler(func() []string { return []string{"http://10.0.0.1:7700", `http://x"><script>alert(1)</script>`} })
	resp := get(t, h, "/ui/")
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `<meta name="fenced-connect" content="http://10.0.0.1:7700">`) || strings.Contains(string(body), "alert") {
		t.Errorf("the page names its origins as %s", body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self' http://10.0.0.1:7700;") {
		t.Errorf("policy %q", csp)
	}
}

// TestConsoleNeverParsesHTML: the console's script puts every name into
// the page as text, and its page has no inline script, style or handler,
// which the policy would refuse anyway.
func TestConsoleNeverParsesHTML(t *testing.T) {
	files := ui.Files()
	js, err := fs.ReadFile(files, "app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('on", "localStorage", "sessionStorage", "document.cookie"} {
		if strings.Contains(string(js), bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
	html, err := fs.ReadFile(files, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`<script>`, `<script [^>]*>[^<]`, `\son[a-z]+=`, `\sstyle=`, `<style`, `https?://`} {
		if regexp.MustCompile(re).Match(html) {
			t.Errorf("index.html matches %s", re)
		}
	}
}
