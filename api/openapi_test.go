package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/proof"
	"github.com/fenced/fenced/fsm"
)

// The OpenAPI document is checked by github.com/pb33f/libopenapi-validator:
// it implements OpenAPI 3.1 (JSON Schema 2020-12: const, type arrays,
// examples), which the document uses, where kin-openapi covers 3.0 and only
// part of 3.1.

// spec parses the embedded document and returns a validator and its model.
func spec(t testing.TB) (validator.Validator, *v3.Document) {
	t.Helper()
	return specFrom(t, OpenAPI)
}

func specFrom(t testing.TB, text []byte) (validator.Validator, *v3.Document) {
	t.Helper()
	doc, err := libopenapi.NewDocument(text)
	if err != nil {
		t.Fatalf("api/openapi.yaml does not parse: %v", err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("api/openapi.yaml is not a valid OpenAPI 3 model: %v", err)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		t.Fatalf("api/openapi.yaml: validator: %v", errors.Join(errs...))
	}
	return v, &model.Model
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	v, _ := spec(t)
	if ok, errs := v.ValidateDocument(); !ok {
		for _, e := range errs {
			t.Errorf("api/openapi.yaml is not a valid OpenAPI 3.1 document: %s (line %d)", e.Error(), e.SpecLine)
		}
	}
}

// contract drives a server and checks every exchange against the document,
// recording which (operation, status) pairs were seen.
type contract struct {
	t    testing.TB
	v    validator.Validator
	doc  *v3.Document
	hc   *http.Client
	mu   sync.Mutex
	seen map[string]bool // "GET /v1/keys/{key} 404"
}

func newContract(t testing.TB) *contract {
	v, doc := spec(t)
	return &contract{t: t, v: v, doc: doc, hc: &http.Client{Timeout: 30 * time.Second}, seen: map[string]bool{}}
}

// contractCall is one request and the answer it must get.
type contractCall struct {
	method, path, body string
	header             []string // name, value, ...
	status             int
	code               string // the error code of a non-2xx answer
	// badRequest: the request itself breaks the document (the server must
	// refuse it too); only the answer is validated then. Otherwise the
	// request must conform.
	badRequest bool
}

// do sends c to base, checks the status and the error code, validates the
// request and the answer against the document, and returns the answer body.
func (k *contract) do(base string, c contractCall) []byte {
	k.t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, base+c.path, body)
	if err != nil {
		k.t.Fatal(err)
	}
	switch {
	case c.body != "" && strings.HasPrefix(c.path, "/v1/snapshot/restore"):
		req.Header.Set("Content-Type", "application/octet-stream")
	case c.body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		req.Header.Set(c.header[i], c.header[i+1])
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		k.t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	route := k.route(req)
	where := fmt.Sprintf("%s %s (route %s, body %s) answered %d", c.method, c.path, route, c.body, resp.StatusCode)
	if resp.StatusCode != c.status {
		k.t.Errorf("%s: want status %d; body: %s", where, c.status, data)
		return data
	}
	if c.code != "" {
		var er client.ErrorResponse
		if json.Unmarshal(data, &er) != nil || er.Code != c.code {
			k.t.Errorf("%s: want error code %q; body: %s", where, c.code, data)
		}
	}
	k.mu.Lock()
	k.seen[route+" "+strconv.Itoa(resp.StatusCode)] = true
	k.mu.Unlock()
	// The validator reads the bodies; give it fresh copies.
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(strings.NewReader(c.body))
	resp.Body = io.NopCloser(bytes.NewReader(data))
	if !c.badRequest {
		if ok, errs := k.v.ValidateHttpRequest(vreq); !ok {
			for _, e := range errs {
				k.t.Errorf("%s: the REQUEST breaks the document: %s", where, describe(e))
			}
		}
		vreq.Body = io.NopCloser(strings.NewReader(c.body))
	}
	if ok, errs := k.v.ValidateHttpResponse(vreq, resp); !ok {
		for _, e := range errs {
			k.t.Errorf("%s: the ANSWER breaks the document: %s; answer body: %s", where, describe(e), data)
		}
	}
	return data
}

// slow sends c's headers and half its body, then waits for the answer
// without sending the rest; it checks and validates the answer like do.
func (k *contract) slow(base string, c contractCall) {
	k.t.Helper()
	u, err := url.Parse(base)
	must(k.t, err)
	conn, err := net.Dial("tcp", u.Host)
	must(k.t, err)
	defer conn.Close()
	ct := "application/json"
	if strings.HasPrefix(c.path, "/v1/snapshot/restore") {
		ct = "application/octet-stream"
	}
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n", c.method, c.path, u.Host, ct, len(c.body))
	for i := 0; i+1 < len(c.header); i += 2 {
		head += c.header[i] + ": " + c.header[i+1] + "\r\n"
	}
	_, err = io.WriteString(conn, head+"\r\n"+c.body[:len(c.body)/2])
	must(k.t, err)
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
	must(k.t, err)
	req.Header.Set("Content-Type", ct)
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		k.t.Fatalf("%s %s with a stalled body: %v", c.method, c.path, err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	route := k.route(req)
	where := fmt.Sprintf("%s %s (route %s, body stalled) answered %d", c.method, c.path, route, resp.StatusCode)
	var er client.ErrorResponse
	if resp.StatusCode != c.status || json.Unmarshal(data, &er) != nil || er.Code != c.code {
		k.t.Errorf("%s: want %d %s; body: %s", where, c.status, c.code, data)
		return
	}
	k.mu.Lock()
	k.seen[route+" "+strconv.Itoa(resp.StatusCode)] = true
	k.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(data))
	if ok, errs := k.v.ValidateHttpResponse(req, resp); !ok {
		for _, e := range errs {
			k.t.Errorf("%s: the ANSWER breaks the document: %s; answer body: %s", where, describe(e), data)
		}
	}
}

// describe is a validator error with each schema failure's field path.
func describe(e *verrors.ValidationError) string {
	var b strings.Builder
	b.WriteString(e.Message + ": " + e.Reason)
	for _, f := range e.SchemaValidationErrors {
		fmt.Fprintf(&b, "\n\t\tat %s: %s", f.FieldPath, f.Reason)
	}
	return b.String()
}

// route names the document's operation a request matches ("" when none).
func (k *contract) route(r *http.Request) string {
	for path, item := range k.doc.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			if strings.EqualFold(method, r.Method) && pathMatches(path, r.URL.Path) {
				return strings.ToUpper(method) + " " + path
			}
		}
	}
	return "(no route of the document) " + r.Method + " " + r.URL.Path
}

// pathMatches matches a document path ("/v1/keys/{key}") to a request path.
func pathMatches(tmpl, path string) bool {
	if i := strings.Index(tmpl, "{"); i >= 0 {
		return strings.HasPrefix(path, tmpl[:i]) && len(path) > i
	}
	return tmpl == path
}

// documented lists every "METHOD path status" of the document.
func (k *contract) documented() []string {
	var out []string
	for path, item := range k.doc.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for code := range op.Responses.Codes.FromOldest() {
				out = append(out, strings.ToUpper(method)+" "+path+" "+code)
			}
		}
	}
	sort.Strings(out)
	return out
}

// notDriven are documented answers the contract test cannot provoke, each
// with the reason. The test fails if one of them is provoked after all, so
// the list stays true.
var notDriven = map[string]string{
	"GET /v1/cluster 403":          needsCert,
	"GET /v1/keys 403":             needsCert,
	"POST /v1/verify/batch 403":    needsCert,
	"POST /v1/keepalive/batch 403": needsCert,
	"GET /v1/watch/index 403":      needsCert,
	"GET /v1/watch/index 503":      "the failing node stub serves no read index; a follower asks the leader for it (TestWatchStreamThroughFollowerResumes)",
}

const needsCert = "only a certificate identity with no role (or the peer role) is refused here; the contract test authenticates with bearer tokens"

// TestOpenAPIContract drives every route of real servers (a cluster node,
// a secured node, and a node whose every call fails with a chosen error)
// through success and each documented error, validating each request and
// answer against api/openapi.yaml; then checks that every documented answer
// was seen.
func TestOpenAPIContract(t *testing.T) {
	k := newContract(t)
	t.Run("cluster", func(t *testing.T) { k.t = t; driveCluster(k) })
	t.Run("secure", func(t *testing.T) { k.t = t; driveSecure(k) })
	t.Run("failures", func(t *testing.T) { k.t = t; driveFailures(k) })
	k.t = t
	for _, d := range k.documented() {
		reason, excused := notDriven[d]
		switch {
		case !k.seen[d] && !excused:
			t.Errorf("documented answer never provoked by the contract test: %s (drive it, or list it in notDriven with the reason)", d)
		case k.seen[d] && excused:
			t.Errorf("%s is listed as not driven (%s) but was provoked: remove it from notDriven", d, reason)
		}
	}
	doc := map[string]bool{}
	for _, d := range k.documented() {
		doc[d] = true
	}
	for s := range k.seen {
		if !doc[s] {
			t.Errorf("answer seen but not documented: %s", s)
		}
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// driveCluster exercises the success paths and the refusals of a real
// single-node cluster.
func driveCluster(k *contract) {
	n := startCluster(k.t.(*testing.T), 1)[0]
	base := n.url
	post := func(path, body string, status int, code string) []byte {
		return k.do(base, contractCall{method: "POST", path: path, body: body, status: status, code: code})
	}
	bad := func(path, body string, code string) {
		k.do(base, contractCall{method: "POST", path: path, body: body, status: 400, code: code, badRequest: true})
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/v1/openapi.yaml", "/v1/cluster", "/v1/debug/state"} {
		k.do(base, contractCall{method: "GET", path: p, status: 200})
	}
	k.do(base, contractCall{method: "GET", path: "/v1/watch/index", status: 200})
	k.do(base, contractCall{method: "GET", path: "/v1/watch?prefix=a&key=b", status: 400, code: "bad_request", badRequest: true})
	k.do(base, contractCall{method: "GET", path: "/v1/watch?from=999999", status: 410, code: "compacted"})

	var g client.Grant
	must(k.t, json.Unmarshal(post("/v1/acquire", `{"key":"orders/db","holder":"alice","ttl":"30s","request_id":"r1"}`, 200, ""), &g))
	post("/v1/acquire", `{"key":"orders/db","holder":"alice","ttl":"30s"}`, 200, "")
	k.do(base, contractCall{method: "GET", path: "/v1/keys/orders%2Fdb?index=1&wait=10ms", status: 200}) // a blocking read
	post("/v1/acquire", `{"key":"orders/db","holder":"bob","ttl":"30s"}`, 409, "held")
	// A semaphore: its permits, its refusals and its read.
	post("/v1/acquire", `{"key":"pool","holder":"alice","ttl":"30s","limit":2,"request_id":"p1"}`, 200, "")
	post("/v1/acquire", `{"key":"pool","holder":"bob","ttl":"30s","limit":2}`, 200, "")
	post("/v1/acquire", `{"key":"pool","holder":"carol","ttl":"30s","limit":2}`, 409, "held")
	post("/v1/acquire", `{"key":"pool","holder":"carol","ttl":"30s","limit":3}`, 409, "limit_mismatch")
	bad("/v1/acquire", `{"key":"pool","holder":"carol","limit":0}`, "bad_request")
	k.do(base, contractCall{method: "GET", path: "/v1/keys/pool", status: 200})
	post("/v1/acquire", `{"key":"doc","holder":"reader","ttl":"30s","mode":"shared"}`, 200, "")
	k.do(base, contractCall{method: "GET", path: "/v1/keys/doc", status: 200})
	// Several keys at once: all, or a refusal naming the held key.
	var mg client.MultiGrant
	must(k.t, json.Unmarshal(post("/v1/acquire/multi", `{"keys":["m1","m2"],"holder":"alice","ttl":"30s","request_id":"mm"}`, 200, ""), &mg))
	post("/v1/acquire/multi", `{"keys":["m3","m2"],"holder":"bob","ttl":"30s"}`, 409, "held")
	bad("/v1/acquire/multi", `{"keys":["m3","m3"],"holder":"bob"}`, "bad_request")
	// The set renewed and released as a set: all, or a refusal naming the key.
	set := []client.GrantRef{{Key: "m1", Token: mg.Grants[0].Token}, {Key: "m2", Token: mg.Grants[1].Token}}
	post("/v1/renew/multi", jsonOf(client.RenewMultiRequest{Keys: set, Holder: "alice"}), 200, "")
	post("/v1/renew/multi", jsonOf(client.RenewMultiRequest{Keys: set, Holder: "bob"}), 409, "not_holder")
	post("/v1/renew/multi", jsonOf(client.RenewMultiRequest{Keys: append(set[:1:1], client.GrantRef{Key: "nope", Token: 1}), Holder: "alice"}), 404, "unknown_key")
	bad("/v1/renew/multi", `{"keys":[],"holder":"alice"}`, "bad_request")
	bad("/v1/renew/multi", `{"keys":[{"key":"m1"}],"holder":"alice"}`, "malformed_token")
	post("/v1/release/multi", jsonOf(client.ReleaseMultiRequest{Keys: set, Holder: "bob"}), 409, "not_holder")
	post("/v1/release/multi", jsonOf(client.ReleaseMultiRequest{Keys: append(set[:1:1], client.GrantRef{Key: "nope", Token: 1}), Holder: "alice"}), 404, "unknown_key")
	post("/v1/release/multi", jsonOf(client.ReleaseMultiRequest{Keys: set, Holder: "alice", RequestID: "rm"}), 200, "")
	post("/v1/release/multi", jsonOf(client.ReleaseMultiRequest{Keys: set, Holder: "alice", RequestID: "rm"}), 200, "")
	bad("/v1/release/multi", `{"keys":[{"key":"m1","token":"1"},{"key":"m1","token":"1"}],"holder":"alice"}`, "bad_request")
	bad("/v1/release/multi", `{"keys":[{"key":"m1","token":"1"}],"holder":"alice","force":true}`, "bad_request")
	post("/v1/acquire", `{"key":"other","holder":"bob","ttl":"2s","lock_delay":"1s","wait":"0s"}`, 200, "")
	bad("/v1/acquire", `{"holder":"bob"}`, "bad_request")
	bad("/v1/acquire", `{"key":"k","holder":"bob","extra":1}`, "bad_request")
	bad("/v1/acquire", `{"key":"k","holder":"bob","ttl":"forever"}`, "bad_request")
	k.do(base, contractCall{method: "POST", path: "/v1/acquire", body: `{"key":"k","holder":"bob"}`, header: []string{"Content-Type", "text/plain"},
		status: 415, code: "unsupported_media_type", badRequest: true})

	tok := g.Token.String()
	post("/v1/renew", jsonOf(client.RenewRequest{Key: "orders/db", Holder: "alice", Token: g.Token}), 200, "")
	post("/v1/renew", jsonOf(client.RenewRequest{Key: "orders/db", Holder: "bob", Token: g.Token}), 409, "not_holder")
	post("/v1/renew", jsonOf(client.RenewRequest{Key: "nope", Holder: "bob", Token: g.Token}), 404, "unknown_key")
	bad("/v1/renew", `{"key":"orders/db","holder":"alice","token":"012"}`, "malformed_token")
	post("/v1/keepalive", `{"holder":"alice"}`, 200, "")
	bad("/v1/keepalive", `{"holder":""}`, "bad_request")

	post("/v1/verify", `{"key":"orders/db","token":"`+tok+`","holder":"alice"}`, 200, "")
	post("/v1/verify", `{"key":"orders/db","token":"1"}`, 200, "")
	bad("/v1/verify", `{"key":"orders/db","token":"-1"}`, "malformed_token")
	bad("/v1/verify", `{"key":"","token":"1"}`, "bad_request")
	k.do(base, contractCall{method: "POST", path: "/v1/verify", body: `{"key":"k","token":"1"}`, header: []string{"Content-Type", "text/plain"},
		status: 415, code: "unsupported_media_type", badRequest: true})
	post("/v1/verify/batch", `{"checks":[{"key":"orders/db","token":"`+tok+`","holder":"alice"},{"key":"orders/db","token":"-1"},{"key":"nope","token":"1"}]}`, 200, "")
	bad("/v1/verify/batch", `{"checks":[]}`, "bad_request")
	k.do(base, contractCall{method: "POST", path: "/v1/verify/batch", body: `{"checks":[{"key":"k","token":"1"}]}`, header: []string{"Content-Type", "text/plain"},
		status: 415, code: "unsupported_media_type", badRequest: true})
	post("/v1/keepalive/batch", `{"holders":["alice","bob",""]}`, 200, "")
	bad("/v1/keepalive/batch", `{"holders":[]}`, "bad_request")

	k.do(base, contractCall{method: "GET", path: "/v1/keys", status: 200})
	k.do(base, contractCall{method: "GET", path: "/v1/keys?prefix=orders/&limit=10", status: 200})
	k.do(base, contractCall{method: "GET", path: "/v1/keys?limit=-1", status: 400, code: "bad_request", badRequest: true})
	k.do(base, contractCall{method: "GET", path: "/v1/keys/orders%2Fdb", status: 200})
	k.do(base, contractCall{method: "GET", path: "/v1/keys/missing", status: 404, code: "unknown_key"})
	k.do(base, contractCall{method: "GET", path: "/v1/keys/bad%01key", status: 400, code: "bad_request"})

	post("/v1/release", jsonOf(client.ReleaseRequest{Key: "orders/db", Holder: "bob", Token: g.Token}), 409, "not_holder")
	post("/v1/release", jsonOf(client.ReleaseRequest{Key: "missing", Holder: "bob", Token: g.Token}), 404, "unknown_key")
	post("/v1/release", jsonOf(client.ReleaseRequest{Key: "orders/db", Holder: "alice", Token: g.Token}), 200, "")
	post("/v1/release", jsonOf(client.ReleaseRequest{Key: "orders/db", Holder: "alice", Token: g.Token}), 200, "")
	bad("/v1/release", `{"key":"orders/db","holder":"alice"}`, "malformed_token")

	post("/v1/acl/check", `{"identity":"bob","right":"lock","key":"orders/db"}`, 200, "")
	bad("/v1/acl/check", `{"identity":"bob","right":"write","key":"orders/db"}`, "bad_request")
	k.do(base, contractCall{method: "POST", path: "/v1/acl/check", body: `{}`, header: []string{"Content-Type", "text/plain"},
		status: 415, code: "unsupported_media_type", badRequest: true})

	k.do(base, contractCall{method: "GET", path: "/v1/signing-keys", status: 200})
	post("/v1/signing-keys/rotate", `{"overlap":"1h"}`, 200, "")
	bad("/v1/signing-keys/rotate", `{"overlap":"forever"}`, "bad_request")
	k.do(base, contractCall{method: "POST", path: "/v1/signing-keys/rotate", body: `{}`, header: []string{"Content-Type", "text/plain"},
		status: 415, code: "unsupported_media_type", badRequest: true})
	bad("/v1/cluster/join", `{"id":"n9","raft_addr":"127.0.0.1:1","signing_key":"short"}`, "bad_request")
	bad("/v1/cluster/join", `{"raft_addr":"127.0.0.1:1"}`, "bad_request")
	bad("/v1/cluster/remove", `{}`, "bad_request")
	bad("/v1/cluster/transfer", `{"id":1}`, "bad_request")

	resp, err := http.Get(base + "/v1/snapshot")
	must(k.t, err)
	backup, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	k.do(base, contractCall{method: "GET", path: "/v1/snapshot", status: 200})
	k.do(base, contractCall{method: "POST", path: "/v1/snapshot/restore?above_epoch=1", body: string(backup), status: 200,
		header: []string{"Content-Type", "application/octet-stream"}})
	k.do(base, contractCall{method: "POST", path: "/v1/snapshot/restore?margin=x", body: string(backup), status: 400, code: "bad_request",
		header: []string{"Content-Type", "application/octet-stream"}, badRequest: true})
}

// driveSecure exercises authentication, authorization and the rate limit.
func driveSecure(k *contract) {
	n := startSecureNode(k.t.(*testing.T), cluster.Limits{MaxKeysPerHolder: 1}, ServerOptions{RateLimit: 1000, RateBurst: 1000})
	base := n.url
	client := []string{"Authorization", "Bearer " + testClientToken}
	admin := []string{"Authorization", "Bearer " + testAdminToken}
	k.do(base, contractCall{method: "POST", path: "/v1/acquire", body: `{"key":"k1","holder":"bob"}`, status: 401, code: "unauthenticated"})
	k.do(base, contractCall{method: "POST", path: "/v1/acquire", body: `{"key":"k1","holder":"bob"}`, header: client, status: 200})
	k.do(base, contractCall{method: "POST", path: "/v1/acquire", body: `{"key":"k2","holder":"bob"}`, header: client, status: 429, code: "too_many_keys"})
	k.do(base, contractCall{method: "POST", path: "/v1/acquire", body: `{"key":"k1","holder":"alice"}`, header: client, status: 403, code: "forbidden"})
	k.do(base, contractCall{method: "POST", path: "/v1/acquire/multi", body: `{"keys":["k1"],"holder":"bob"}`, status: 401, code: "unauthenticated"})
	k.do(base, contractCall{method: "POST", path: "/v1/acquire/multi", body: `{"keys":["k1"],"holder":"alice"}`, header: client, status: 403, code: "forbidden"})
	k.do(base, contractCall{method: "POST", path: "/v1/acquire/multi", body: `{"keys":["k3"],"holder":"bob"}`, header: client, status: 429, code: "too_many_keys"})
	for _, c := range []contractCall{
		{method: "POST", path: "/v1/renew/multi", body: `{"keys":[{"key":"k1","token":"1"}],"holder":"alice"}`},
		{method: "POST", path: "/v1/release/multi", body: `{"keys":[{"key":"k1","token":"1"}],"holder":"alice"}`},
		{method: "POST", path: "/v1/renew", body: `{"key":"k1","holder":"alice","token":"1"}`},
		{method: "POST", path: "/v1/keepalive", body: `{"holder":"alice"}`},
		{method: "POST", path: "/v1/release", body: `{"key":"k1","holder":"alice","token":"1"}`},
		{method: "POST", path: "/v1/cluster/join", body: `{"id":"n9","raft_addr":"127.0.0.1:1"}`},
		{method: "POST", path: "/v1/cluster/remove", body: `{"id":"n9"}`},
		{method: "POST", path: "/v1/cluster/transfer", body: `{}`},
		{method: "POST", path: "/v1/signing-keys/rotate", body: `{}`},
		{method: "POST", path: "/v1/acl/check", body: `{"identity":"bob","right":"lock","key":"k"}`},
		{method: "POST", path: "/v1/snapshot/restore", body: `x`},
		{method: "GET", path: "/v1/snapshot"},
		{method: "GET", path: "/v1/debug/state"},
	} {
		c.header, c.status, c.code = client, 403, "forbidden"
		k.do(base, c)
		c.header, c.status, c.code = nil, 401, "unauthenticated"
		k.do(base, c)
	}
	for _, p := range []string{"/v1/keys", "/v1/keys/k1", "/v1/cluster", "/v1/watch", "/v1/watch/index"} {
		k.do(base, contractCall{method: "GET", path: p, status: 401, code: "unauthenticated"})
	}
	k.do(base, contractCall{method: "POST", path: "/v1/verify", body: `{"key":"k1","token":"1"}`, status: 401, code: "unauthenticated"})
	k.do(base, contractCall{method: "POST", path: "/v1/verify/batch", body: `{"checks":[{"key":"k1","token":"1"}]}`, status: 401, code: "unauthenticated"})
	k.do(base, contractCall{method: "POST", path: "/v1/keepalive/batch", body: `{"holders":["bob"]}`, status: 401, code: "unauthenticated"})
	// A holder the client may not act as is refused on its own.
	k.do(base, contractCall{method: "POST", path: "/v1/keepalive/batch", body: `{"holders":["bob","alice"]}`, header: client, status: 200})
	k.do(base, contractCall{method: "GET", path: "/v1/debug/state", header: admin, status: 200})
	k.do(base, contractCall{method: "GET", path: "/v1/openapi.yaml", status: 200}) // open to anyone, like /healthz

	// A key ACL: each right refused on a key no rule gives it, a verify
	// with its refusing verdict; an admin asks which rule decides.
	an := aclNode(k.t.(*testing.T), testACL)
	bob := []string{"Authorization", "Bearer " + bobToken}
	for _, c := range []contractCall{
		{method: "POST", path: "/v1/acquire", body: `{"key":"alice/k","holder":"bob"}`},
		{method: "POST", path: "/v1/renew", body: `{"key":"alice/k","holder":"bob","token":"4294967297"}`},
		{method: "POST", path: "/v1/release", body: `{"key":"alice/k","holder":"bob","token":"4294967297"}`},
		{method: "POST", path: "/v1/renew/multi", body: `{"keys":[{"key":"bob/k","token":"4294967297"},{"key":"alice/k","token":"4294967297"}],"holder":"bob"}`},
		{method: "POST", path: "/v1/release/multi", body: `{"keys":[{"key":"bob/k","token":"4294967297"},{"key":"alice/k","token":"4294967297"}],"holder":"bob"}`},
		{method: "GET", path: "/v1/keys/alice%2Fk"},
		{method: "GET", path: "/v1/watch?key=alice/k"},
	} {
		c.header, c.status, c.code = bob, 403, "forbidden"
		k.do(an.url, c)
	}
	k.do(an.url, contractCall{method: "POST", path: "/v1/verify", body: `{"key":"alice/k","token":"1"}`, header: []string{"Authorization", "Bearer " + aliceToken}, status: 200})
	k.do(an.url, contractCall{method: "GET", path: "/v1/keys?prefix=alice/", header: bob, status: 200})
	k.do(an.url, contractCall{method: "POST", path: "/v1/acl/check", body: `{"identity":"bob","right":"lock","key":"alice/k"}`,
		header: []string{"Authorization", "Bearer " + opsToken}, status: 200})
	noVerify := aclNode(k.t.(*testing.T), "bob lock bob/\n")
	k.do(noVerify.url, contractCall{method: "POST", path: "/v1/verify", body: `{"key":"bob/k","token":"1"}`, header: bob, status: 403, code: "forbidden"})
	k.do(noVerify.url, contractCall{method: "POST", path: "/v1/verify/batch", body: `{"checks":[{"key":"bob/k","token":"1"}]}`, header: bob, status: 200})

	// A body that does not arrive in time: the node reads it with a
	// deadline.
	timed := startSecureNode(k.t.(*testing.T), cluster.Limits{}, ServerOptions{BodyTimeout: 200 * time.Millisecond})
	for _, c := range append(append([]contractCall{}, writeCalls...), contractCall{method: "POST", path: "/v1/snapshot/restore", body: "x"},
		contractCall{method: "POST", path: "/v1/acl/check", body: `{"identity":"bob","right":"lock","key":"k"}`}) {
		c.header, c.status, c.code = admin, 408, "request_timeout"
		k.slow(timed.url, c)
	}
	// verify answers any body it cannot read with a refusing verdict.
	k.slow(timed.url, contractCall{method: "POST", path: "/v1/verify", body: `{"key":"k","token":"1"}`, header: admin, status: 400, code: "bad_request"})

	// The rate limit: a node allowing one request per second with no burst.
	slow := startSecureNode(k.t.(*testing.T), cluster.Limits{}, ServerOptions{RateLimit: 0.001, RateBurst: 1})
	k.do(slow.url, contractCall{method: "GET", path: "/v1/cluster", header: client, status: 200}) // spends the burst
	for _, c := range []contractCall{
		{method: "POST", path: "/v1/acquire", body: `{"key":"k","holder":"bob"}`},
		{method: "POST", path: "/v1/renew", body: `{"key":"k","holder":"bob","token":"1"}`},
		{method: "POST", path: "/v1/keepalive", body: `{"holder":"bob"}`},
		{method: "POST", path: "/v1/release", body: `{"key":"k","holder":"bob","token":"1"}`},
		{method: "POST", path: "/v1/renew/multi", body: `{"keys":[{"key":"k","token":"1"}],"holder":"bob"}`},
		{method: "POST", path: "/v1/release/multi", body: `{"keys":[{"key":"k","token":"1"}],"holder":"bob"}`},
		{method: "POST", path: "/v1/verify", body: `{"key":"k","token":"1"}`},
		{method: "POST", path: "/v1/verify/batch", body: `{"checks":[{"key":"k","token":"1"}]}`},
		{method: "POST", path: "/v1/keepalive/batch", body: `{"holders":["bob"]}`},
		{method: "GET", path: "/v1/keys"},
		{method: "GET", path: "/v1/keys/k"},
		{method: "GET", path: "/v1/cluster"},
		{method: "POST", path: "/v1/cluster/join", body: `{"id":"n9","raft_addr":"127.0.0.1:1"}`},
		{method: "POST", path: "/v1/cluster/remove", body: `{"id":"n9"}`},
		{method: "POST", path: "/v1/cluster/transfer", body: `{}`},
		{method: "POST", path: "/v1/signing-keys/rotate", body: `{}`},
		{method: "POST", path: "/v1/acl/check", body: `{"identity":"bob","right":"lock","key":"k"}`},
		{method: "GET", path: "/v1/snapshot"},
		{method: "POST", path: "/v1/snapshot/restore", body: `x`},
		{method: "GET", path: "/v1/debug/state"},
		{method: "GET", path: "/v1/watch/index"},
	} {
		c.header = client
		c.status, c.code = 429, "rate_limited"
		k.do(slow.url, c)
	}
	// A watch over the limit is a stream that says so and ends, which a
	// browser's EventSource retries (a 429 would end it for good).
	k.do(slow.url, contractCall{method: "GET", path: "/v1/watch", header: client, status: 200})
}

// failingNode is a Node whose every operation fails with err; ready and
// leader shape how the server treats it.
type failingNode struct {
	recordingNode
	err    error
	ready  bool
	leader bool
}

func (n *failingNode) Acquire(context.Context, cluster.AcquireArgs) (cluster.Grant, error) {
	return cluster.Grant{}, n.err
}
func (n *failingNode) AcquireMulti(context.Context, cluster.AcquireMultiArgs) ([]cluster.Grant, error) {
	return nil, n.err
}
func (n *failingNode) ReleaseMulti(context.Context, cluster.ReleaseMultiArgs) ([]fsm.KeyState, error) {
	return nil, n.err
}
func (n *failingNode) RenewMulti(context.Context, string, []fsm.ReleaseKey) ([]cluster.RenewedLease, error) {
	return nil, n.err
}
func (n *failingNode) Renew(context.Context, string, string, fence.Token) (fsm.KeyState, time.Time, error) {
	return fsm.KeyState{}, time.Time{}, n.err
}
func (n *failingNode) Keepalive(context.Context, string, func(string) bool) ([]cluster.RenewedLease, error) {
	return nil, n.err
}
func (n *failingNode) KeepaliveBatch(context.Context, []string, func(string) bool) ([][]cluster.RenewedLease, error) {
	return nil, n.err
}
func (n *failingNode) VerifyBatch(_ context.Context, checks []cluster.VerifyCheck) ([]cluster.Verdict, error) {
	out := make([]cluster.Verdict, len(checks))
	for i := range out {
		out[i] = cluster.Verdict{Reason: cluster.ReasonUnavailable}
	}
	return out, n.err
}
func (n *failingNode) Release(context.Context, cluster.ReleaseArgs) (fsm.KeyState, error) {
	return fsm.KeyState{}, n.err
}
func (n *failingNode) Verify(context.Context, string, fence.Token, string) (cluster.Verdict, error) {
	return cluster.Verdict{}, n.err
}
func (n *failingNode) Key(context.Context, string) (cluster.KeyInfo, bool, error) {
	return cluster.KeyInfo{}, false, n.err
}
func (n *failingNode) Keys(context.Context, fsm.PageQuery) ([]cluster.KeyInfo, bool, error) {
	return nil, false, n.err
}
func (n *failingNode) Join(context.Context, string, string, string) error { return n.err }
func (n *failingNode) Remove(context.Context, string) error               { return n.err }
func (n *failingNode) TransferLeadership(string) error                    { return n.err }
func (n *failingNode) OpenBackup(ctx context.Context, key *cluster.BackupKey) (*cluster.BackupStream, error) {
	if n.err == nil {
		return n.recordingNode.OpenBackup(ctx, key) // a fake has no state to back up
	}
	return nil, n.err
}
func (n *failingNode) Restore(context.Context, []byte, cluster.RestoreOptions) (cluster.RestoreResult, error) {
	return cluster.RestoreResult{}, n.err
}
func (n *failingNode) GrantProof(cluster.Grant, time.Time) string               { return "" }
func (n *failingNode) RegisterSigningKey(context.Context, string, []byte) error { return n.err }
func (n *failingNode) RotateSigningKey(context.Context, time.Duration) (proof.Key, error) {
	return proof.Key{}, n.err
}
func (n *failingNode) PublishedKeys(time.Time) []fsm.SigningKeyState { return nil }
func (n *failingNode) ClusterID() string                             { return "" }
func (n *failingNode) ID() string                                    { return "n1" }
func (n *failingNode) Status() cluster.Status                        { return cluster.Status{ID: "n1", Ready: n.ready} }
func (n *failingNode) Ready() bool                                   { return n.ready }
func (n *failingNode) Leader() (string, string) {
	if n.leader {
		return "n1", "127.0.0.1:7700"
	}
	return "", ""
}

// writeCalls are the requests of every write route, well formed.
var writeCalls = []contractCall{
	{method: "POST", path: "/v1/acquire", body: `{"key":"k","holder":"bob"}`},
	{method: "POST", path: "/v1/renew", body: `{"key":"k","holder":"bob","token":"4294967297"}`},
	{method: "POST", path: "/v1/keepalive", body: `{"holder":"bob"}`},
	{method: "POST", path: "/v1/release", body: `{"key":"k","holder":"bob","token":"4294967297"}`},
	{method: "POST", path: "/v1/cluster/join", body: `{"id":"n9","raft_addr":"127.0.0.1:1"}`},
	{method: "POST", path: "/v1/cluster/remove", body: `{"id":"n9"}`},
	{method: "POST", path: "/v1/cluster/transfer", body: `{"id":"n2"}`},
	{method: "POST", path: "/v1/keepalive/batch", body: `{"holders":["bob","alice"]}`},
	{method: "POST", path: "/v1/signing-keys/rotate", body: `{"overlap":"1h"}`},
	{method: "POST", path: "/v1/acquire/multi", body: `{"keys":["k","l"],"holder":"bob"}`},
	{method: "POST", path: "/v1/renew/multi", body: `{"keys":[{"key":"k","token":"4294967297"},{"key":"l","token":"4294967298"}],"holder":"bob"}`},
	{method: "POST", path: "/v1/release/multi", body: `{"keys":[{"key":"k","token":"4294967297"},{"key":"l","token":"4294967298"}],"holder":"bob"}`},
}

// readCalls are the requests of the routes that read through the leader.
var readCalls = []contractCall{
	{method: "GET", path: "/v1/keys"},
	{method: "GET", path: "/v1/keys/k"},
	{method: "GET", path: "/v1/snapshot"},
}

// driveFailures sends every route to nodes failing with each error the
// wire knows, and checks each answer has the documented status and shape.
func driveFailures(k *contract) {
	serve := func(n Node) string {
		srv := httptest.NewServer(NewServer(n, hclog.NewNullLogger()))
		k.t.Cleanup(srv.Close)
		return srv.URL
	}
	// Every error of every layer, through every route whose handler calls
	// the node.
	for _, w := range wireErrors {
		if status := client.StatusOfCode(w.code); status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusRequestTimeout ||
			w.code == "rate_limited" || w.code == "not_leader" || w.code == "not_ready" {
			continue // the security layer's own (driveSecure), or forwarded
		}
		base := serve(&failingNode{err: fmt.Errorf("test: %w", w.err), ready: true, leader: true})
		calls := append(append([]contractCall{}, writeCalls...), readCalls...)
		calls = append(calls, contractCall{method: "POST", path: "/v1/snapshot/restore", body: "x", header: []string{"Content-Type", "application/octet-stream"}})
		for _, c := range calls {
			c.status, c.code = client.StatusOfCode(w.code), w.code
			if !k.documents(c, w.code) {
				continue // the route's operation cannot fail so
			}
			k.do(base, c)
		}
	}
	// An internal error of the node: 500.
	base := serve(&failingNode{err: errors.New("disk on fire"), ready: true, leader: true})
	for _, c := range append(append([]contractCall{}, writeCalls...), readCalls...) {
		c.status, c.code = 500, "internal"
		k.do(base, c)
	}
	k.do(base, contractCall{method: "POST", path: "/v1/snapshot/restore", body: "x", header: []string{"Content-Type", "application/octet-stream"}, status: 500, code: "internal"})
	// A verify the cluster cannot answer is a refusing verdict.
	k.do(base, contractCall{method: "POST", path: "/v1/verify", body: `{"key":"k","token":"1"}`, status: 200})

	// A node that is not ready and knows no leader: nothing can be served.
	base = serve(&failingNode{err: cluster.ErrNotReady})
	k.do(base, contractCall{method: "GET", path: "/readyz", status: 503, code: "unavailable"})
	k.do(base, contractCall{method: "GET", path: "/v1/watch", status: 200}) // a stream: unavailable, then its end
	for _, c := range append(append([]contractCall{}, writeCalls...), readCalls...) {
		c.status, c.code = 503, "unavailable"
		k.do(base, c)
	}
	k.do(base, contractCall{method: "POST", path: "/v1/snapshot/restore", body: "x", header: []string{"Content-Type", "application/octet-stream"}, status: 503, code: "unavailable"})
	k.do(base, contractCall{method: "POST", path: "/v1/verify", body: `{"key":"k","token":"1"}`, status: 200})
	k.do(base, contractCall{method: "GET", path: "/v1/cluster", status: 200})

	// Bodies that are not JSON, on every JSON route.
	for _, c := range writeCalls {
		c.header, c.status, c.code, c.badRequest = []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type", true
		k.do(base, c)
	}

	// A node without StateReader cannot show its local state; membership
	// changes that succeed.
	base = serve(&recordingNode{})
	k.do(base, contractCall{method: "GET", path: "/v1/debug/state", status: 501, code: "not_implemented"})
	for _, c := range writeCalls[4:] {
		if c.path == "/v1/signing-keys/rotate" {
			continue // a node without signing refuses it (driveCluster rotates)
		}
		c.status = 200
		k.do(base, c)
	}
}

// documents reports whether the document lists, for c's route, an answer
// with c's status whose code may be code.
func (k *contract) documents(c contractCall, code string) bool {
	req := httptest.NewRequest(c.method, c.path, nil)
	route := k.route(req)
	if !k.documentedSet()[route+" "+strconv.Itoa(c.status)] {
		return false
	}
	// The codes each shared answer allows.
	codes := map[int][]string{
		404: {"unknown_key"},
		409: {"held", "not_holder", "stale_token", "expired", "grant_ended", "no_lease", "lock_delay"},
		429: {"rate_limited", "too_many_keys", "too_many_waiters", "too_many_ended_keys"},
	}
	allowed, listed := codes[c.status]
	if !listed {
		return true
	}
	// Only an acquire is refused because the key is held, delayed or a
	// limit is reached; only a grant's own operations because of its state.
	switch code {
	case "held", "lock_delay", "too_many_keys", "too_many_waiters", "too_many_ended_keys":
		return c.path == "/v1/acquire"
	case "unknown_key":
		return c.path != "/v1/acquire" && c.path != "/v1/keepalive"
	}
	for _, a := range allowed {
		if a == code {
			return true
		}
	}
	return false
}

func (k *contract) documentedSet() map[string]bool {
	out := map[string]bool{}
	for _, d := range k.documented() {
		out[d] = true
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestOpenAPIRoutesMatchMux checks that the routes the server registers
// (found in the package's source and confirmed against the live mux) are
// exactly the document's operations.
func TestOpenAPIRoutesMatchMux(t *testing.T) {
	_, doc := spec(t)
	for _, e := range routeDrift(t, doc) {
		t.Error(e)
	}
}

// TestOpenAPIRoutesCatchDrift is the positive control of the route check: a
// document missing a route, and one with a route the server lacks, fail it.
func TestOpenAPIRoutesCatchDrift(t *testing.T) {
	for _, tc := range []struct{ old, new, want string }{
		{"  /v1/cluster/remove:\n", "  /v1/cluster/removed:\n", "route POST /v1/cluster/remove is registered in the server's mux but missing from api/openapi.yaml"},
		{"  /v1/cluster/remove:\n", "  /v1/cluster/removed:\n", "route POST /v1/cluster/removed is in api/openapi.yaml but the server's mux has no such route"},
	} {
		_, doc := specFrom(t, bytes.Replace(OpenAPI, []byte(tc.old), []byte(tc.new), 1))
		errs := strings.Join(routeDrift(t, doc), "\n")
		if !strings.Contains(errs, tc.want) {
			t.Errorf("drift not caught: want %q in %q", tc.want, errs)
		}
	}
}

// routeDrift compares the routes of the server with the document's.
func routeDrift(t *testing.T, doc *v3.Document) []string {
	var drift []string
	documented := map[string]bool{}
	for path, item := range doc.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			documented[strings.ToUpper(method)+" "+muxPath(path)] = true
		}
	}
	registered := registeredRoutes(t)
	// The source scan must agree with the mux: each pattern found is one the
	// mux resolves to itself.
	s := NewServer(&recordingNode{}, hclog.NewNullLogger())
	for _, p := range registered {
		if p == "/" {
			continue
		}
		method, path, _ := strings.Cut(p, " ")
		concrete := strings.ReplaceAll(path, "{key...}", "k")
		_, got := s.mux.Handler(httptest.NewRequest(method, concrete, nil))
		if got != p {
			drift = append(drift, fmt.Sprintf("route %q found in the source, but the mux serves %s %s with %q", p, method, concrete, got))
		}
	}
	for _, p := range registered {
		if p == "/" {
			continue // the catch-all: 404 not_found and 405 method_not_allowed for paths of no route
		}
		if !documented[p] {
			drift = append(drift, fmt.Sprintf("route %s is registered in the server's mux but missing from api/openapi.yaml", p))
		}
		delete(documented, p)
	}
	for p := range documented {
		drift = append(drift, fmt.Sprintf("route %s is in api/openapi.yaml but the server's mux has no such route", p))
	}
	sort.Strings(drift)
	return drift
}

// muxPath turns a document path into the mux's pattern: the key path
// parameter matches the rest of the path.
func muxPath(p string) string { return strings.ReplaceAll(p, "{key}", "{key...}") }

// registeredRoutes finds every literal pattern given to s.mux.Handle or
// s.mux.HandleFunc in the package's non-test sources.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	must(t, err)
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		must(t, err)
		file, err := parser.ParseFile(fset, f, src, 0)
		must(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
				return true
			}
			if inner, ok := sel.X.(*ast.SelectorExpr); !ok || inner.Sel.Name != "mux" {
				return true
			}
			switch a := call.Args[0].(type) {
			case *ast.BasicLit:
				p, _ := strconv.Unquote(a.Value)
				out = append(out, p)
			case *ast.Ident:
				switch a.Name {
				case "openAPIRoute":
					out = append(out, openAPIRoute)
				case "pattern":
					// Server.Handle: handlers mounted by the caller
					// (/debug/pprof/ with --pprof) are outside the API.
				default:
					t.Errorf("%s: a route whose pattern is the identifier %s: give it as a literal so this test sees it", fset.Position(a.Pos()), a.Name)
				}
			}
			return true
		})
	}
	if len(out) < 10 {
		t.Fatalf("found only %d routes in the package's sources: the scan is broken: %v", len(out), out)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIContractCatchesDrift is the positive control of the contract
// test: a document that drifted from the server, in each way a change to
// the server would make it drift, must fail the same checks, naming what
// mismatched.
func TestOpenAPIContractCatchesDrift(t *testing.T) {
	ok := httptest.NewServer(NewServer(&recordingNode{}, hclog.NewNullLogger()))
	defer ok.Close()
	down := httptest.NewServer(NewServer(&failingNode{err: cluster.ErrNotReady}, hclog.NewNullLogger()))
	defer down.Close()
	acquire := contractCall{method: "POST", path: "/v1/acquire", body: `{"key":"k","holder":"h"}`, status: 200}
	for _, tc := range []struct {
		name, old, new string
		base           string
		c              contractCall
		want           string
	}{
		{"the token as a JSON number", "    Token:\n      description: A fencing token, `epoch << 32 | seq`, as decimal text (no sign, no leading zero, at most 19 digits). Compare as an integer.\n      type: string",
			"    Token:\n      description: drifted\n      type: integer", ok.URL, acquire, "ANSWER breaks the document"},
		{"a field the server sends, undocumented", "      required: [key, holder, token, epoch, seq, ttl]\n      properties:\n        key: { type: string }\n        holder: { type: string }\n        token: { $ref: \"#/components/schemas/Token\" }\n        epoch: { type: integer, minimum: 0 }\n",
			"      required: [key, holder, token, seq, ttl]\n      properties:\n        key: { type: string }\n        holder: { type: string }\n        token: { $ref: \"#/components/schemas/Token\" }\n",
			ok.URL, acquire, "additional properties 'epoch' not allowed"},
		{"a status the server answers, undocumented", `        "415": { $ref: "#/components/responses/UnsupportedMediaType" }` + "\n" + `        "429": { $ref: "#/components/responses/TooMany" }`,
			`        "429": { $ref: "#/components/responses/TooMany" }`, ok.URL,
			contractCall{method: "POST", path: "/v1/acquire", body: `{"key":"k","holder":"h"}`, header: []string{"Content-Type", "text/plain"}, status: 415, code: "unsupported_media_type", badRequest: true},
			"response code '415'"},
		{"an error code the server sends, undocumented", "busy, shutting_down, unavailable, seq_exhausted", "busy, shutting_down, seq_exhausted",
			down.URL, contractCall{method: "POST", path: "/v1/acquire", body: `{"key":"k","holder":"h"}`, status: 503, code: "unavailable"}, "ANSWER breaks the document"},
		{"a request field the server takes, undocumented", "        lock_delay:\n          allOf", "        lock_delay_x:\n          allOf",
			ok.URL, contractCall{method: "POST", path: "/v1/acquire", body: `{"key":"k","holder":"h","lock_delay":"1s"}`, status: 200}, "REQUEST breaks the document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Contains(OpenAPI, []byte(tc.old)) {
				t.Fatalf("the control's text is no longer in api/openapi.yaml: %q", tc.old)
			}
			rec := &recorder{TB: t}
			k := newContract(t)
			k.v, k.doc = specFrom(t, bytes.Replace(OpenAPI, []byte(tc.old), []byte(tc.new), 1))
			k.t = rec
			k.do(tc.base, tc.c)
			got := strings.Join(rec.errs, "\n")
			if len(rec.errs) == 0 || !strings.Contains(got, tc.want) {
				t.Fatalf("the drifted document was not caught (want an error containing %q); errors: %q", tc.want, got)
			}
			t.Logf("caught: %s", got)
		})
	}
}

// recorder keeps the errors of a check instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

// TestOpenAPIServed checks fenced serves the embedded document.
func TestOpenAPIServed(t *testing.T) {
	srv := httptest.NewServer(NewServer(&recordingNode{}, hclog.NewNullLogger()))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/openapi.yaml")
	must(t, err)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Equal(data, OpenAPI) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/yaml") {
		t.Fatalf("GET /v1/openapi.yaml: %d %q, %d bytes; want 200, the embedded document", resp.StatusCode, resp.Header.Get("Content-Type"), len(data))
	}
}
