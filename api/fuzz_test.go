package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// requestTypes are the bodies the server decodes, by kind.
var requestTypes = []func() any{
	func() any { return new(client.AcquireRequest) },
	func() any { return new(client.RenewRequest) },
	func() any { return new(client.KeepaliveRequest) },
	func() any { return new(client.ReleaseRequest) },
	func() any { return new(client.VerifyRequest) },
	func() any { return new(client.JoinRequest) },
	func() any { return new(client.RemoveRequest) },
	func() any { return new(client.TransferRequest) },
}

// seedBodies are valid bodies of each kind, and a few that are not.
var seedBodies = []string{
	`{"checks":[{"key":"orders-db","token":"8589934593","holder":"bob"},{"key":"x","token":"-1"}]}`,
	`{"holders":["bob/worker-1","alice",""]}`,
	`{"key":"orders-db","holder":"bob/worker-1","ttl":"10s","wait":"1s","request_id":"r1","lock_delay":"1s"}`,
	`{"key":"orders-db","holder":"bob/worker-1","token":"8589934593"}`,
	`{"holder":"bob/worker-1"}`,
	`{"key":"orders-db","holder":"bob/worker-1","token":"8589934593","force":false}`,
	`{"key":"orders-db","token":"8589934593","holder":"bob"}`,
	`{"id":"n4","raft_addr":"127.0.0.1:7741","http_addr":"127.0.0.1:7740"}`,
	`{"id":"n4"}`,
	`{"id":"n2"}`,
	`{"key":"k","token":8589934593}`,
	`{"key":"k","holder":"h","holder":"bob"}`,
	`{"key":"\u0000","holder":"h"}`,
	`{"key":"k","force":true}`,
	"{\"key\":\"k\"}\n{}",
	"\xff",
	`{"key":"a","KEY":"b","holder":"h"}`,
	`{"key":"a","k\u0065y":"b","holder":"h"}`,
	`{"key":"k\ud800","holder":"h"}`,
	`{"key":"k\ud83d\ude00","holder":"h"}`,
	`{"key":"k\ufffd","holder":"h"}`,
}

// FuzzDecodeRequest feeds arbitrary bodies to the strict decoder with every
// request type: it never panics, and what it accepts encodes and decodes
// back to the same value (nothing is silently changed on the way in), has no
// field twice, and has a U+FFFD only where the body wrote one.
func FuzzDecodeRequest(f *testing.F) {
	for i, b := range seedBodies {
		f.Add(uint8(i), []byte(b))
	}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		v := requestTypes[int(kind)%len(requestTypes)]()
		if err := decode(body, v); err != nil {
			return
		}
		if name, dup := duplicateName(body); dup {
			t.Fatalf("accepted %q with field %q twice", body, name)
		}
		if strings.Contains(fmt.Sprint(v), "\ufffd") && !bytes.Contains(body, []byte("\ufffd")) && !bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) {
			t.Fatalf("accepted %q as %+v: a U+FFFD the body did not write", body, v)
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("accepted %q does not encode: %v", body, err)
		}
		w := requestTypes[int(kind)%len(requestTypes)]()
		err = decode(again, w)
		if errors.Is(err, fence.ErrMalformed) && zeroToken(v) {
			return // an absent token encodes as "0", which is never a token
		}
		if err != nil || !reflect.DeepEqual(v, w) {
			t.Fatalf("accepted %q does not round-trip: %v (%+v / %+v)", body, err, v, w)
		}
	})
}

// duplicateName is the reference for the decoder's duplicate check: a walk
// of every token, slow but plain, that reports an object at any depth with
// two names equal but for case.
func duplicateName(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	type obj struct {
		names []string
		name  bool // the next string is a name
	}
	var stack []*obj
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		top := (*obj)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				if top != nil {
					top.name = true
				}
				stack = append(stack, &obj{name: true})
			case '[':
				if top != nil {
					top.name = true
				}
				stack = append(stack, nil)
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.name {
				for _, n := range top.names {
					if strings.EqualFold(n, tok) {
						return tok, true
					}
				}
				top.names = append(top.names, tok)
				top.name = false
				continue
			}
		}
		if top != nil {
			top.name = true
		}
	}
}

// zeroToken reports whether v has a Token field holding zero.
func zeroToken(v any) bool {
	f := reflect.ValueOf(v).Elem().FieldByName("Token")
	return f.IsValid() && f.Kind() == reflect.Uint64 && f.Uint() == 0
}

// recordingNode is a Node that answers every call with success and records
// the calls that would change state.
type recordingNode struct {
	mu     sync.Mutex
	writes []string
	leader string
}

func (n *recordingNode) wrote(s string) {
	n.mu.Lock()
	n.writes = append(n.writes, s)
	n.mu.Unlock()
}

func (n *recordingNode) Acquire(_ context.Context, a cluster.AcquireArgs) (cluster.Grant, error) {
	n.wrote("acquire")
	return cluster.Grant{KeyState: fsm.KeyState{Key: a.Key, Holder: a.Holder, Token: 1<<32 | 1, TTL: a.TTL, State: fsm.Held}}, nil
}

func (n *recordingNode) AcquireMulti(_ context.Context, a cluster.AcquireMultiArgs) ([]cluster.Grant, error) {
	n.wrote("acquire_multi")
	out := make([]cluster.Grant, len(a.Keys))
	for i, k := range a.Keys {
		out[i] = cluster.Grant{KeyState: fsm.KeyState{Key: k, Holder: a.Holder, Token: 1<<32 | 1, TTL: a.TTL, State: fsm.Held}}
	}
	return out, nil
}

func (n *recordingNode) Renew(_ context.Context, key, holder string, tok fence.Token) (fsm.KeyState, time.Time, error) {
	n.wrote("renew")
	return fsm.KeyState{Key: key, Holder: holder, Token: tok, TTL: time.Second, State: fsm.Held}, time.Now(), nil
}

func (n *recordingNode) Keepalive(_ context.Context, holder string, _ func(string) bool) ([]cluster.RenewedLease, error) {
	n.wrote("keepalive")
	return nil, nil
}

func (n *recordingNode) Release(_ context.Context, a cluster.ReleaseArgs) (fsm.KeyState, error) {
	n.wrote("release")
	return fsm.KeyState{Key: a.Key, Holder: a.Holder, Token: a.Token, State: fsm.Released}, nil
}

func (n *recordingNode) ReleaseMulti(_ context.Context, a cluster.ReleaseMultiArgs) ([]fsm.KeyState, error) {
	n.wrote("release_multi")
	out := make([]fsm.KeyState, len(a.Keys))
	for i, k := range a.Keys {
		out[i] = fsm.KeyState{Key: k.Key, Holder: a.Holder, Token: k.Token, State: fsm.Released}
	}
	return out, nil
}

func (n *recordingNode) RenewMulti(_ context.Context, holder string, keys []fsm.ReleaseKey) ([]cluster.RenewedLease, error) {
	n.wrote("renew_multi")
	out := make([]cluster.RenewedLease, len(keys))
	for i, k := range keys {
		out[i] = cluster.RenewedLease{Key: fsm.KeyState{Key: k.Key, Holder: holder, Token: k.Token, TTL: time.Second, State: fsm.Held}, Deadline: time.Now()}
	}
	return out, nil
}

func (n *recordingNode) Verify(context.Context, string, fence.Token, string) (cluster.Verdict, error) {
	return cluster.Verdict{Reason: cluster.ReasonUnknownKey}, nil
}

func (n *recordingNode) KeepaliveBatch(_ context.Context, holders []string, _ func(string) bool) ([][]cluster.RenewedLease, error) {
	n.wrote("keepalive")
	return make([][]cluster.RenewedLease, len(holders)), nil
}

func (n *recordingNode) VerifyBatch(_ context.Context, checks []cluster.VerifyCheck) ([]cluster.Verdict, error) {
	out := make([]cluster.Verdict, len(checks))
	for i := range out {
		out[i] = cluster.Verdict{Reason: cluster.ReasonUnknownKey}
	}
	return out, nil
}

func (n *recordingNode) Key(_ context.Context, key string) (cluster.KeyInfo, bool, error) {
	return cluster.KeyInfo{KeyState: fsm.KeyState{Key: key, Holder: "h", Token: 1<<32 | 1, State: fsm.Held}}, true, nil
}

func (n *recordingNode) Keys(context.Context, fsm.PageQuery) ([]cluster.KeyInfo, bool, error) {
	return nil, false, nil
}

func (n *recordingNode) Join(context.Context, string, string, string) error {
	n.wrote("join")
	return nil
}

func (n *recordingNode) Remove(context.Context, string) error {
	n.wrote("remove")
	return nil
}

func (n *recordingNode) TransferLeadership(id string) error {
	n.wrote("transfer")
	n.mu.Lock()
	n.leader = id
	n.mu.Unlock()
	return nil
}

func (n *recordingNode) OpenBackup(context.Context, *cluster.BackupKey) (*cluster.BackupStream, error) {
	return nil, cluster.ErrNotReady
}

func (n *recordingNode) Restore(context.Context, []byte, cluster.RestoreOptions) (cluster.RestoreResult, error) {
	n.wrote("restore")
	return cluster.RestoreResult{}, nil
}

func (n *recordingNode) Status() cluster.Status { return cluster.Status{ID: "n1", Ready: true} }
func (n *recordingNode) Ready() bool            { return true }
func (n *recordingNode) Leader() (string, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.leader == "" {
		return "n1", "127.0.0.1:7700"
	}
	return n.leader, "127.0.0.1:7700"
}

// handlerPaths are the POST endpoints whose bodies FuzzHandlers sends.
var handlerPaths = []string{"/v1/acquire", "/v1/renew", "/v1/keepalive", "/v1/release", "/v1/verify",
	"/v1/cluster/join", "/v1/cluster/remove", "/v1/cluster/transfer", "/v1/verify/batch", "/v1/keepalive/batch"}

// FuzzHandlers sends arbitrary bodies to every POST endpoint of a server with
// authentication on, as a client or an admin: a refused request (any 4xx)
// never reaches the node, nothing is answered with a 500, and every answer
// is JSON.
func FuzzHandlers(f *testing.F) {
	for i, b := range seedBodies {
		f.Add(uint8(i), i%2 == 0, []byte(b))
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte(testClientToken+" client bob\n"+testAdminToken+" admin ops\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	tokens, err := LoadTokens(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, kind uint8, admin bool, body []byte) {
		node := &recordingNode{}
		s := NewSecureServer(node, hclog.NewNullLogger(), ServerOptions{Tokens: tokens})
		req := httptest.NewRequest(http.MethodPost, handlerPaths[int(kind)%len(handlerPaths)], bytes.NewReader(body))
		tok := testClientToken
		if admin {
			tok = testAdminToken
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		switch {
		case rec.Code >= 500:
			t.Fatalf("%s %q: %d %s", req.URL.Path, body, rec.Code, rec.Body)
		case rec.Code >= 400 && len(node.writes) > 0:
			t.Fatalf("%s %q was refused (%d %s) but reached the node: %v", req.URL.Path, body, rec.Code, rec.Body, node.writes)
		case !json.Valid(rec.Body.Bytes()):
			t.Fatalf("%s %q: answer is not JSON: %s", req.URL.Path, body, rec.Body)
		}
	})
}
