package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/fenced/fenced/acl"
	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
)

// ACL is a key ACL file (package acl), reloadable: which client identity may
// lock, read or verify which keys. With one, anything no rule allows is
// refused (403 forbidden) and changes nothing; admins have every right.
type ACL struct {
	path string
	cur  atomic.Pointer[acl.List]
}

// LoadACL reads an ACL file.
func LoadACL(path string) (*ACL, error) {
	a := &ACL{path: path}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload reads the file again; on error the rules in use are kept.
func (a *ACL) Reload() error {
	data, err := os.ReadFile(a.path)
	if err != nil {
		return fmt.Errorf("acl file: %w", err)
	}
	l, err := acl.Parse(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", a.path, err)
	}
	a.cur.Store(l)
	return nil
}

// Path returns the ACL file's path.
func (a *ACL) Path() string { return a.path }

// Digest names the rules in use (acl.List.Digest).
func (a *ACL) Digest() string { return a.cur.Load().Digest() }

// Len returns the number of rules in use.
func (a *ACL) Len() int { return a.cur.Load().Len() }

// Decide returns the rule that allows identity right on key (acl.List.Decide).
func (a *ACL) Decide(identity string, right acl.Right, key string) (acl.Rule, bool) {
	return a.cur.Load().Decide(identity, right, key)
}

// aclFor returns the rules that bind the request's identity, and its name:
// nil when none do (no ACL file, authentication off, an admin).
func (s *Server) aclFor(ctx context.Context) (*acl.List, string) {
	if s.sec == nil || s.sec.o.ACL == nil {
		return nil, ""
	}
	id, ok := IdentityFrom(ctx)
	if !ok || id.Role == RoleAdmin {
		return nil, ""
	}
	return s.sec.o.ACL.cur.Load(), id.Name
}

// may refuses, with 403 naming the right and the key, what the ACL does not
// allow the request's identity.
func (s *Server) may(ctx context.Context, right acl.Right, key string) error {
	l, name := s.aclFor(ctx)
	if l == nil || l.Allows(name, right, key) {
		return nil
	}
	return forbiddenKey(name, right, key)
}

func forbiddenKey(identity string, right acl.Right, key string) error {
	return refusal(ErrForbidden, "identity %q may not %s key %q: no rule of the ACL file gives it %s on it", identity, right, key, right)
}

// mayFilter returns the test of the keys the request's identity may
// exercise right on; nil when every key passes.
func (s *Server) mayFilter(ctx context.Context, right acl.Right) func(key string) bool {
	l, name := s.aclFor(ctx)
	if l == nil {
		return nil
	}
	if right == acl.Read {
		return l.Readable(name)
	}
	return func(key string) bool { return l.Allows(name, right, key) }
}

// The ACL check explains this node's ACL; admins only, as the rules name
// every identity's keys.
func init() { routeAccess["POST /v1/acl/check"] = accessAdmin }

// routeACL mounts the ACL check. It answers for the node asked, never
// forwarded: nodes may hold different files (fencectl status shows it).
func (s *Server) routeACL() {
	s.mux.HandleFunc("POST /v1/acl/check", func(w http.ResponseWriter, r *http.Request) {
		if err := checkContentType(r); err != nil {
			writeUnsupportedMediaType(w, err, false)
			return
		}
		body, err := readBody(w, r)
		if err == nil {
			var out any
			if out, err = s.aclCheck(r.Context(), body, r); err == nil {
				writeJSON(w, http.StatusOK, out)
				return
			}
		}
		writeErr(w, err)
	})
}

// aclCheck explains the node's ACL's verdict, for fencectl acl check.
func (s *Server) aclCheck(_ context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.ACLCheckRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	right, err := acl.ParseRight(req.Right)
	if err != nil {
		return nil, fmt.Errorf("%w: right: %v", cluster.ErrBadRequest, err)
	}
	if err := checkName("identity", req.Identity, client.MaxHolderLen, true); err != nil {
		return nil, err
	}
	if err := checkName("key", req.Key, client.MaxKeyLen, true); err != nil {
		return nil, err
	}
	out := client.ACLCheckResponse{Identity: req.Identity, Right: right.String(), Key: req.Key}
	if s.sec == nil || s.sec.o.ACL == nil {
		out.Allow, out.Reason = true, "no ACL file: every identity may act on every key its role allows"
		return out, nil
	}
	out.Digest = s.sec.o.ACL.Digest()
	r, ok := s.sec.o.ACL.Decide(req.Identity, right, req.Key)
	if !ok {
		out.Reason = "no rule gives this identity this right on this key (default deny)"
		return out, nil
	}
	out.Allow, out.Line, out.Rule = true, r.Line, r.String()
	out.Reason = fmt.Sprintf("line %d allows it", r.Line)
	return out, nil
}
