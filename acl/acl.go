// Package acl is fenced's key access control: which client identity may
// lock, read or verify which keys, from a file of rules an operator writes.
package acl

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Right is one kind of access to a key; a rule grants a set of them.
type Right uint8

// The rights a rule can grant.
const (
	// Lock: acquire (waiting included), renew, release and keep alive
	// grants of the key.
	Lock Right = 1 << iota
	// Read: read the key (GET /v1/keys, /v1/keys/{key}, blocking reads)
	// and watch it.
	Read
	// Verify: verify a token of the key (single and batch).
	Verify
)

var rightNames = []struct {
	r    Right
	name string
}{{Lock, "lock"}, {Read, "read"}, {Verify, "verify"}}

// String names a right, or a set of rights as a comma list.
func (r Right) String() string {
	var names []string
	for _, n := range rightNames {
		if r&n.r != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// ParseRight reads one right's name.
func ParseRight(s string) (Right, error) {
	for _, n := range rightNames {
		if s == n.name {
			return n.r, nil
		}
	}
	return 0, fmt.Errorf("%q is not a right (lock, read or verify)", s)
}

// Any is the identity of a rule that applies to every client identity.
const Any = "*"

// Limits of a rule's fields, those of the names they match.
const (
	maxIdentityLen = 128
	maxPrefixLen   = 256
)

// Rule grants Rights on every key that starts with Prefix to Identity (or
// to every identity, when it is Any). Line is where the file gives it.
type Rule struct {
	Line     int
	Identity string
	Rights   Right
	Prefix   string
}

// String gives the rule as the file writes it.
func (r Rule) String() string {
	return fmt.Sprintf("%s %s %s", r.Identity, r.Rights, strconv.Quote(r.Prefix))
}

// List is the rules of one ACL file. Nothing is allowed that no rule allows.
type List struct {
	rules  []Rule
	digest string
}

// ErrSyntax is the error of a file that is not a list of rules; its message
// names the line.
var ErrSyntax = errors.New("acl file")

// Parse reads an ACL file: one rule per line, "IDENTITY RIGHTS PREFIX"
// separated by blanks, where IDENTITY is a client identity's name or *,
// RIGHTS a comma list of lock, read and verify, and PREFIX the start of the
// keys the rule covers, bare or as a double-quoted string ("" covers every
// key). Blank lines and lines starting with # are ignored.
func Parse(r io.Reader) (*List, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	l := &List{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		rule, err := parseRule(text)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrSyntax, line, err)
		}
		rule.Line = line
		l.rules = append(l.rules, rule)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	sum := sha256.Sum256(data)
	l.digest = hex.EncodeToString(sum[:8])
	return l, nil
}

func parseRule(text string) (Rule, error) {
	identity, rest := cutField(text)
	rights, prefix := cutField(rest)
	if identity == "" || rights == "" || prefix == "" {
		return Rule{}, errors.New(`want "IDENTITY RIGHTS PREFIX" (PREFIX "" covers every key)`)
	}
	if err := checkIdentity(identity); err != nil {
		return Rule{}, err
	}
	var set Right
	for name := range strings.SplitSeq(rights, ",") {
		r, err := ParseRight(strings.TrimSpace(name))
		if err != nil {
			return Rule{}, err
		}
		set |= r
	}
	p, err := parsePrefix(prefix)
	if err != nil {
		return Rule{}, err
	}
	return Rule{Identity: identity, Rights: set, Prefix: p}, nil
}

// cutField returns the first blank-separated field of s and the rest,
// without its leading blanks.
func cutField(s string) (field, rest string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimLeft(s[i:], " \t")
}

// checkIdentity refuses a name no identity can have: identities are holder
// names (the tokens file's NAME, a certificate's CN), clean paths of
// printable segments.
func checkIdentity(s string) error {
	if s == Any {
		return nil
	}
	if len(s) > maxIdentityLen || !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return fmt.Errorf("identity %q is not a valid identity name", s)
	}
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("identity %q is not a valid identity name (a clean path, like the holders it owns)", s)
		}
	}
	return nil
}

// parsePrefix reads a bare or double-quoted prefix.
func parsePrefix(s string) (string, error) {
	if strings.HasPrefix(s, `"`) {
		p, err := strconv.Unquote(s)
		if err != nil {
			return "", fmt.Errorf("prefix %s is not a double-quoted string", s)
		}
		s = p
	} else if strings.ContainsAny(s, " \t") {
		return "", fmt.Errorf("prefix %q has blanks: quote it, or the line has extra fields", s)
	}
	if len(s) > maxPrefixLen || !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return "", fmt.Errorf("prefix %q is not a key prefix", s)
	}
	return s, nil
}

// Len returns the number of rules.
func (l *List) Len() int { return len(l.rules) }

// Digest names the rules in use: the first 16 hex digits of the SHA-256 of
// the file they were read from. Nodes given the same file report the same.
func (l *List) Digest() string { return l.digest }

// Allows reports whether identity may exercise right on key.
func (l *List) Allows(identity string, right Right, key string) bool {
	_, ok := l.Decide(identity, right, key)
	return ok
}

// Decide returns the rule that allows identity to exercise right on key,
// and false when none does. Of several, it is the one with the longest
// prefix, then the identity's own over *, then the first in the file: the
// rule an operator reading the file would point at.
func (l *List) Decide(identity string, right Right, key string) (Rule, bool) {
	var best Rule
	found := false
	for _, r := range l.rules {
		if r.Rights&right == 0 || !strings.HasPrefix(key, r.Prefix) || (r.Identity != identity && r.Identity != Any) {
			continue
		}
		if !found || len(r.Prefix) > len(best.Prefix) || len(r.Prefix) == len(best.Prefix) && r.Identity != Any && best.Identity == Any {
			best, found = r, true
		}
	}
	return best, found
}

// Readable returns a test of the keys identity may read, for filtering a
// listing or a watch stream.
func (l *List) Readable(identity string) func(key string) bool {
	var prefixes []string
	for _, r := range l.rules {
		if r.Rights&Read != 0 && (r.Identity == identity || r.Identity == Any) {
			prefixes = append(prefixes, r.Prefix)
		}
	}
	return func(key string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(key, p) {
				return true
			}
		}
		return false
	}
}

// Rules returns a copy of the rules, in file order.
func (l *List) Rules() []Rule { return append([]Rule(nil), l.rules...) }
