package fence

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"testing"
)

// tokenCase is one row of testdata/tokens.json, the table every client
// (Go, Python, JavaScript) is tested against, so that they all accept the
// same texts as Parse.
type tokenCase struct {
	Input string `json:"input"`
	Valid bool   `json:"valid"`
	Value string `json:"value"`
	Why   string `json:"why"`
}

func loadTokenCases(t *testing.T) []tokenCase {
	t.Helper()
	data, err := os.ReadFile("../testdata/tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []tokenCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("testdata/tokens.json: %v", err)
	}
	if len(doc.Cases) == 0 {
		t.Fatal("testdata/tokens.json has no cases")
	}
	return doc.Cases
}

func TestParseSharedCases(t *testing.T) {
	for _, c := range loadTokenCases(t) {
		got, err := Parse(c.Input)
		if !c.Valid {
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("Parse(%q) = %d, %v; want ErrMalformed (%s)", c.Input, got, err, c.Why)
			}
			continue
		}
		want, perr := strconv.ParseUint(c.Value, 10, 64)
		if perr != nil {
			t.Errorf("case %q: value %q is not a uint64: %v", c.Input, c.Value, perr)
			continue
		}
		if err != nil || uint64(got) != want {
			t.Errorf("Parse(%q) = %d, %v; want %d (%s)", c.Input, got, err, want, c.Why)
			continue
		}
		if got.String() != c.Input {
			t.Errorf("Parse(%q).String() = %q: the text does not round-trip", c.Input, got.String())
		}
		var back Token
		if err := back.UnmarshalText([]byte(got.String())); err != nil || back != got {
			t.Errorf("UnmarshalText(%q) = %d, %v; want %d", got.String(), back, err, got)
		}
	}
}
