// Package ui is fenced's web console: a page of plain HTML, CSS and
// JavaScript, embedded in the binary and served by every node at /ui/. It
// reads the cluster only through the public HTTP API, as any client does,
// with the bearer token typed into it; it has no routes of its own.
package ui

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Files returns the console's files: index.html, app.js, style.css.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	return sub
}

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// CSP returns the Content-Security-Policy of the console's pages. Scripts
// and styles come only from the node itself (none inline, no eval), nothing
// may frame the page, and the page may fetch only from the node and from
// connect, the other members' API origins (each "scheme://host:port"), whose
// status it shows beside the node's.
func CSP(connect []string) string {
	src := "'self'"
	for _, c := range connect {
		if validOrigin(c) {
			src += " " + c
		}
	}
	return strings.Join([]string{
		"default-src 'none'",
		"script-src 'self'",
		"style-src 'self'",
		"img-src 'self' data:",
		"connect-src " + src,
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors 'none'",
	}, "; ")
}

// validOrigin accepts what a member's address gives: http or https, then
// host and port characters only, so an address cannot add a directive to
// the policy.
func validOrigin(o string) bool {
	rest, ok := strings.CutPrefix(o, "http://")
	if !ok {
		if rest, ok = strings.CutPrefix(o, "https://"); !ok {
			return false
		}
	}
	if rest == "" {
		return false
	}
	for _, c := range rest {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == ':', c == '[', c == ']':
		default:
			return false
		}
	}
	return true
}

// index is the page, with the origins its policy lets it fetch from
// written into it (a meta element, escaped by html/template), so that the
// script never tries one the policy of its own document refuses.
var index = template.Must(template.ParseFS(static, "static/index.html"))

// Handler serves the console under Prefix. connect names the origins the
// page may fetch from besides its own (see CSP); it is called per request,
// as members come and go.
func Handler(connect func() []string) http.Handler {
	files := http.FileServerFS(Files())
	return http.StripPrefix(Prefix[:len(Prefix)-1], http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		var origins []string
		if connect != nil {
			for _, o := range connect() {
				if validOrigin(o) {
					origins = append(origins, o)
				}
			}
		}
		h.Set("Content-Security-Policy", CSP(origins))
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path != "/" && r.URL.Path != "/index.html" {
			files.ServeHTTP(w, r)
			return
		}
		var b bytes.Buffer
		if err := index.Execute(&b, strings.Join(origins, " ")); err != nil {
			http.Error(w, "the console's page did not render", http.StatusInternalServerError)
			return
		}
		h.Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(b.Bytes())
	}))
}
