package acl

import (
	"errors"
	"strings"
	"testing"
)

const sample = `# billing's own keys, everyone may verify anything
billing   lock,read,verify  billing/
ops       read              ""
*         verify            ""
carol     lock              "shared space/"
carol     read              shared
`

func mustParse(t *testing.T, s string) *List {
	t.Helper()
	l, err := Parse(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestDecide(t *testing.T) {
	l := mustParse(t, sample)
	for _, tc := range []struct {
		identity string
		right    Right
		key      string
		line     int // 0: refused
	}{
		{"billing", Lock, "billing/db", 2},
		{"billing", Read, "billing/", 2},
		{"billing", Lock, "billingx/db", 0}, // a prefix is not a name: billing/ does not cover billingx/
		{"billing", Lock, "alice/db", 0},
		{"billing", Verify, "alice/db", 4},
		{"billing", Read, "alice/db", 0},
		{"ops", Read, "alice/db", 3},
		{"ops", Lock, "alice/db", 0},
		{"mallory", Verify, "x", 4},
		{"mallory", Read, "billing/db", 0},
		{"carol", Lock, "shared space/x", 5},
		{"carol", Read, "shared space/x", 6},
		{"carol", Verify, "shared space/x", 4},
		{"", Verify, "k", 4},
		{"", Lock, "k", 0},
	} {
		r, ok := l.Decide(tc.identity, tc.right, tc.key)
		switch {
		case tc.line == 0 && ok:
			t.Errorf("%s %s %q: allowed by line %d, want refused", tc.identity, tc.right, tc.key, r.Line)
		case tc.line != 0 && (!ok || r.Line != tc.line):
			t.Errorf("%s %s %q: %v by line %d, want allowed by line %d", tc.identity, tc.right, tc.key, ok, r.Line, tc.line)
		}
		if got := l.Allows(tc.identity, tc.right, tc.key); got != (tc.line != 0) {
			t.Errorf("Allows(%s %s %q) = %v", tc.identity, tc.right, tc.key, got)
		}
		if tc.right == Read && l.Readable(tc.identity)(tc.key) != (tc.line != 0) {
			t.Errorf("Readable(%s)(%q) disagrees with Decide", tc.identity, tc.key)
		}
	}
}

// TestDecideNamesTheMostSpecificRule: of several rules that allow, the one
// with the longest prefix, then the identity's own over *, is named.
func TestDecideNamesTheMostSpecificRule(t *testing.T) {
	l := mustParse(t, "* read \"\"\nbob read \"\"\n* read a/\nbob read a/b/\n")
	for key, line := range map[string]int{"x": 2, "a/x": 3, "a/b/c": 4} {
		if r, _ := l.Decide("bob", Read, key); r.Line != line {
			t.Errorf("%q: line %d, want %d", key, r.Line, line)
		}
	}
}

func TestParseRefusesBadLines(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"bob lock", "line 1: want"},
		{"bob\n", "line 1: want"},
		{"# c\n\nbob write x/", "line 3: \"write\" is not a right"},
		{"bob lock,,read x/", "line 1: \"\" is not a right"},
		{"bob/../x lock x/", "not a valid identity"},
		{"a//b lock x/", "not a valid identity"},
		{"bob lock a b", "has blanks: quote it"},
		{`bob lock "unterminated`, "not a double-quoted string"},
		{"bob lock \"a\\x00\"", "is not a key prefix"},
		{"bob lock " + strings.Repeat("x", 257), "is not a key prefix"},
	} {
		_, err := Parse(strings.NewReader(tc.file))
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an ErrSyntax naming %q", tc.file, err, tc.want)
		}
	}
}

func TestParseReadsQuotedAndTabbedFields(t *testing.T) {
	l := mustParse(t, "bob\tlock,verify\t\"with space/\"\n  ann read   plain/  \n")
	rs := l.Rules()
	if len(rs) != 2 || rs[0].Prefix != "with space/" || rs[0].Rights != Lock|Verify || rs[1].Identity != "ann" || rs[1].Prefix != "plain/" {
		t.Fatalf("rules %+v", rs)
	}
	if rs[0].String() != `bob lock,verify "with space/"` {
		t.Fatalf("String() = %s", rs[0])
	}
	if l.Digest() == "" || l.Digest() == mustParse(t, "bob read x/").Digest() {
		t.Fatalf("digest %q", l.Digest())
	}
}

func TestEmptyFileAllowsNothing(t *testing.T) {
	l := mustParse(t, "# nothing\n")
	if l.Allows("bob", Verify, "k") || l.Readable("bob")("k") {
		t.Fatal("an empty ACL file allowed something")
	}
}
