package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/fenced/fenced/client"
)

// Role is what an authenticated identity may do. An admin can do everything
// a client can.
type Role string

// Roles. RolePeer is a fenced node presenting its peer certificate: it may
// join or leave the cluster as itself and forward other identities'
// requests, nothing else.
const (
	RoleClient Role = "client"
	RoleAdmin  Role = "admin"
	RolePeer   Role = "peer"
)

// Identity is who made a request, as the server authenticated it.
type Identity struct {
	// Name is the certificate's common name or the token's name. A client
	// may act only as holders named Name or starting with "Name/".
	Name string
	Role Role
	// Method says how it was authenticated: "certificate", "token",
	// "peer" (a node's certificate), or "forwarded" (named by a peer that
	// forwarded the request over mutual TLS).
	Method string
}

func (id Identity) String() string {
	if id.Name == "" {
		return "anonymous"
	}
	return fmt.Sprintf("%s (%s, %s)", id.Name, id.Role, id.Method)
}

// MayActAs reports whether the identity may act as holder: an admin as
// anyone, anyone else only as a holder equal to its name or under it
// ("name/…"). Holders are chosen by clients, so without this binding any
// client could renew or release any other client's grant by naming its
// holder.
func (id Identity) MayActAs(holder string) bool {
	if id.Role == RoleAdmin {
		return true
	}
	return id.Name != "" && (holder == id.Name || strings.HasPrefix(holder, id.Name+"/"))
}

type identityKey struct{}

// IdentityFrom returns the identity a request was authenticated as; false
// when authentication is off or the request is anonymous.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok && id.Name != ""
}

func withIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// ownerOf returns the client identity an acquire is counted against by the
// per-identity limits: a client's name. Admins and anonymous requests
// (authentication off) are not counted per identity.
func ownerOf(ctx context.Context) string {
	if id, ok := IdentityFrom(ctx); ok && id.Role == RoleClient {
		return id.Name
	}
	return ""
}

// who names the identity of a request for the log.
func who(ctx context.Context) string {
	if id, ok := IdentityFrom(ctx); ok {
		return id.String()
	}
	return "anonymous"
}

// identityHeader carries the identity a follower authenticated to the
// leader. The leader believes it only from a node that presented a valid peer
// certificate on the connection; from anyone else it is ignored.
const identityHeader = "X-Fenced-Identity"

func encodeIdentity(id Identity) string {
	return url.Values{"name": {id.Name}, "role": {string(id.Role)}}.Encode()
}

func decodeIdentity(s string) (Identity, error) {
	v, err := url.ParseQuery(s)
	if err != nil {
		return Identity{}, err
	}
	id := Identity{Name: v.Get("name"), Role: Role(v.Get("role")), Method: "forwarded"}
	if id.Name == "" || !validRole(id.Role) {
		return Identity{}, errors.New("incomplete identity")
	}
	return id, nil
}

func validRole(r Role) bool { return r == RoleClient || r == RoleAdmin || r == RolePeer }

// MinTokenLen is the shortest bearer token a tokens file may hold: shorter
// ones could be guessed.
const MinTokenLen = 16

// Tokens is a bearer-token file, reloadable. Each line is
//
//	TOKEN ROLE NAME
//
// separated by blanks, where ROLE is client or admin and NAME is the identity
// name (the holder prefix a client may use). Blank lines and lines starting
// with # are ignored.
type Tokens struct {
	path string
	cur  atomic.Pointer[tokenSet]
}

// tokenSet is the content of one version of the tokens file.
type tokenSet struct {
	ids    map[[sha256.Size]byte]Identity
	digest string
}

// LoadTokens reads a tokens file.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the file again; on error the tokens in use are kept.
func (t *Tokens) Reload() error {
	data, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	m, err := ParseTokens(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("tokens file %s: %w", t.path, err)
	}
	sum := sha256.Sum256(data)
	t.cur.Store(&tokenSet{ids: m, digest: hex.EncodeToString(sum[:8])})
	return nil
}

// Len returns the number of tokens in use.
func (t *Tokens) Len() int { return len(t.cur.Load().ids) }

// Path returns the tokens file's path.
func (t *Tokens) Path() string { return t.path }

// Digest names the tokens in use: the first 16 hex digits of the SHA-256 of
// the file they were read from. It reveals nothing usable about a token.
func (t *Tokens) Digest() string { return t.cur.Load().digest }

// Lookup returns the identity of a token. Tokens are kept and compared as
// SHA-256 digests, so the lookup takes no time that depends on how much of a
// guess matches a real token.
func (t *Tokens) Lookup(token string) (Identity, bool) {
	id, ok := t.cur.Load().ids[sha256.Sum256([]byte(token))]
	return id, ok
}

// ParseTokens reads the tokens file format. Errors name the line, never the
// token.
func ParseTokens(r io.Reader) (map[[sha256.Size]byte]Identity, error) {
	m := map[[sha256.Size]byte]Identity{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: want \"TOKEN ROLE NAME\", got %d fields", line, len(f))
		}
		tok, role, name := f[0], Role(f[1]), f[2]
		switch {
		case len(tok) < MinTokenLen:
			return nil, fmt.Errorf("line %d: token shorter than %d characters", line, MinTokenLen)
		case role != RoleClient && role != RoleAdmin:
			return nil, fmt.Errorf("line %d: role %q is not client or admin", line, role)
		case len(name) > client.MaxHolderLen || strings.IndexFunc(name, unicode.IsControl) >= 0 || checkHolderPath(name) != nil:
			return nil, fmt.Errorf("line %d: name is not a valid holder name", line)
		}
		sum := sha256.Sum256([]byte(tok))
		if _, dup := m[sum]; dup {
			return nil, fmt.Errorf("line %d: token given twice", line)
		}
		m[sum] = Identity{Name: name, Role: role, Method: "token"}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return m, nil
}
