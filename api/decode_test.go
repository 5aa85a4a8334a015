package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"
)

// strictCase is one request body sent to one endpoint, and the answer it must get.
type strictCase struct {
	name   string
	path   string
	ctype  string // "-": no Content-Type header
	body   string
	status int
	code   string // "" for a 200
}

var strictCases = []strictCase{
	{"duplicate key", "/v1/acquire", "", `{"key":"a","key":"b","holder":"h"}`, 400, "bad_request"},
	{"duplicate key in another case", "/v1/acquire", "", `{"key":"a","KEY":"b","holder":"h"}`, 400, "bad_request"},
	{"duplicate key spelled with an escape", "/v1/acquire", "", `{"key":"a","k\u0065y":"b","holder":"h"}`, 400, "bad_request"},
	{"duplicate holder", "/v1/keepalive", "", `{"holder":"a","holder":"b"}`, 400, "bad_request"},
	{"duplicate token", "/v1/release", "", `{"key":"k","holder":"h","token":"4294967297","token":"4294967298"}`, 400, "bad_request"},
	{"duplicate force", "/v1/release", "", `{"key":"k","force":false,"force":true,"token":"4294967297"}`, 400, "bad_request"},
	{"duplicate key of verify", "/v1/verify", "", `{"key":"a","key":"b","token":"4294967297"}`, 400, "bad_request"},
	{"duplicate id of join", "/v1/cluster/join", "", `{"id":"n4","id":"n5","raft_addr":"127.0.0.1:1"}`, 400, "bad_request"},
	{"lone high surrogate", "/v1/acquire", "", `{"key":"k\ud800","holder":"h"}`, 400, "bad_request"},
	{"lone low surrogate", "/v1/acquire", "", `{"key":"k\udc00x","holder":"h"}`, 400, "bad_request"},
	{"high surrogate then a letter", "/v1/acquire", "", `{"key":"k\ud800\u0041","holder":"h"}`, 400, "bad_request"},
	{"two high surrogates", "/v1/acquire", "", `{"key":"k\uD800\uD800","holder":"h"}`, 400, "bad_request"},
	{"lone surrogate in verify", "/v1/verify", "", `{"key":"k\ud800","token":"4294967297"}`, 400, "bad_request"},
	{"lone surrogate in a key name", "/v1/acquire", "", `{"key":"k","holder":"h","\ud800":1}`, 400, "bad_request"},
	{"surrogate pair", "/v1/acquire", "", `{"key":"k\ud83d\ude00","holder":"h"}`, 200, ""},
	{"no content type", "/v1/acquire", "-", `{"key":"k","holder":"h"}`, 200, ""},
	{"json with charset", "/v1/acquire", "application/json; charset=utf-8", `{"key":"k","holder":"h"}`, 200, ""},
	{"json in capitals", "/v1/acquire", "Application/JSON", `{"key":"k","holder":"h"}`, 200, ""},
	{"text/plain", "/v1/acquire", "text/plain", `{"key":"k","holder":"h"}`, 415, "unsupported_media_type"},
	{"form", "/v1/release", "application/x-www-form-urlencoded", `{"key":"k","force":true}`, 415, "unsupported_media_type"},
	{"json in latin1", "/v1/renew", "application/json; charset=latin1", `{"key":"k","holder":"h","token":"4294967297"}`, 415, "unsupported_media_type"},
	{"unparsable content type", "/v1/keepalive", "application/json; ;", `{"holder":"h"}`, 415, "unsupported_media_type"},
	{"verify as text", "/v1/verify", "text/plain", `{"key":"k","token":"4294967297"}`, 415, "unsupported_media_type"},
	{"token as a number to renew", "/v1/renew", "", `{"key":"k","holder":"h","token":4294967297}`, 400, "malformed_token"},
	{"token as a number to release", "/v1/release", "", `{"key":"k","holder":"h","token":4294967297}`, 400, "malformed_token"},
	{"token as a number to verify", "/v1/verify", "", `{"key":"k","token":4294967297}`, 400, "malformed_token"},
	{"token as true to verify", "/v1/verify", "", `{"key":"k","token":true}`, 400, "malformed_token"},
	{"token with a letter", "/v1/renew", "", `{"key":"k","holder":"h","token":"42x"}`, 400, "malformed_token"},
	{"token with a letter to verify", "/v1/verify", "", `{"key":"k","token":"42x"}`, 400, "malformed_token"},
	{"everything missing", "/v1/acquire", "", `{}`, 400, "bad_request"},
	{"everything missing from renew", "/v1/renew", "", `{}`, 400, "bad_request"},
	{"everything missing from verify", "/v1/verify", "", `{}`, 400, "bad_request"},
	{"bad durations", "/v1/acquire", "", `{"key":"k","holder":"h","ttl":"x","wait":"-1s"}`, 400, "bad_request"},
	{"unknown field", "/v1/acquire", "", `{"key":"k","holder":"h","color":"red"}`, 400, "bad_request"},
}

// TestStrictBodies: a duplicate field, a lone surrogate escape or a body that
// is not JSON by its Content-Type is refused and changes nothing; a token
// sent as a JSON number is malformed_token on every route; no message
// repeats its own prefix or spans lines.
func TestStrictBodies(t *testing.T) {
	for _, tc := range strictCases {
		t.Run(tc.name, func(t *testing.T) {
			node := &recordingNode{}
			s := NewServer(node, hclog.NewNullLogger())
			req := httptest.NewRequest(http.MethodPost, tc.path, bytes.NewReader([]byte(tc.body)))
			switch tc.ctype {
			case "":
				req.Header.Set("Content-Type", "application/json")
			case "-":
			default:
				req.Header.Set("Content-Type", tc.ctype)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			var er client.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil {
				t.Fatalf("answer is not JSON: %s", rec.Body)
			}
			if rec.Code != tc.status || er.Code != tc.code {
				t.Fatalf("%s %s: got %d %q (%s), want %d %q", tc.path, tc.body, rec.Code, er.Code, er.Message, tc.status, tc.code)
			}
			if rec.Code == http.StatusOK {
				return
			}
			if len(node.writes) > 0 {
				t.Fatalf("refused but reached the node: %v", node.writes)
			}
			checkMessage(t, er.Message)
			if tc.path == "/v1/verify" && (er.Allow == nil || *er.Allow || er.Reason != "malformed") {
				t.Fatalf("a refused verify carries no refusing verdict: %s", rec.Body)
			}
		})
	}
}

// checkMessage refuses an error message that spans lines or says its
// sentinel's text twice ("malformed token: ...: malformed token: ...").
func checkMessage(t *testing.T, msg string) {
	t.Helper()
	if msg == "" || strings.ContainsAny(msg, "\r\n") {
		t.Fatalf("message %q is empty or spans lines", msg)
	}
	for _, prefix := range []string{"bad request", "malformed token"} {
		if strings.Count(msg, prefix) > 1 {
			t.Fatalf("message %q repeats %q", msg, prefix)
		}
	}
}
