package fence

import (
	"encoding/json"
	"errors"
	"testing"
	"testing/quick"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want Token
		err  error
	}{
		{"1", 1, nil},
		{"4294967297", 1<<32 | 1, nil},
		{"9223372036854775807", MaxToken, nil},
		{"", 0, ErrMalformed},
		{"0", 0, ErrMalformed},
		{"4294967296", 0, ErrMalformed}, // epoch 1, seq 0
		{"01", 0, ErrMalformed},
		{"+1", 0, ErrMalformed},
		{"-1", 0, ErrMalformed},
		{" 1", 0, ErrMalformed},
		{"1 ", 0, ErrMalformed},
		{"0x10", 0, ErrMalformed},
		{"1e3", 0, ErrMalformed},
		{"١", 0, ErrMalformed}, // Arabic-Indic digit one
		{"9223372036854775808", 0, ErrMalformed},
		{"18446744073709551615", 0, ErrMalformed},
		{"99999999999999999999", 0, ErrMalformed},
	}
	for _, c := range cases {
		got, err := Parse(c.in)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("Parse(%q) error = %v, want %v", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestCompose(t *testing.T) {
	tok, err := Compose(7, 3)
	if err != nil || tok.Epoch() != 7 || tok.Seq() != 3 || tok != 7<<32|3 {
		t.Fatalf("Compose(7,3) = %d %v", tok, err)
	}
	for _, c := range []struct{ e, s uint64 }{{MaxEpoch + 1, 1}, {1, 0}, {1, MaxSeq + 1}} {
		if _, err := Compose(c.e, c.s); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Compose(%d,%d) error = %v, want ErrOutOfRange", c.e, c.s, err)
		}
	}
	if tok, err := Compose(MaxEpoch, MaxSeq); err != nil || tok != MaxToken {
		t.Fatalf("Compose(max,max) = %d %v", tok, err)
	}
}

// Every composable token survives String → Parse, and ordering of tokens is
// the lexicographic order of (epoch, seq).
func TestRoundTripProperty(t *testing.T) {
	f := func(e uint32, s uint32) bool {
		e &= MaxEpoch
		if s == 0 {
			s = 1
		}
		tok, err := Compose(uint64(e), uint64(s))
		if err != nil {
			return false
		}
		back, err := Parse(tok.String())
		return err == nil && back == tok && back.Epoch() == uint64(e) && back.Seq() == uint64(s)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
	order := func(e1, s1, e2, s2 uint32) bool {
		e1, e2 = e1&MaxEpoch, e2&MaxEpoch
		s1, s2 = s1|1, s2|1
		a, _ := Compose(uint64(e1), uint64(s1))
		b, _ := Compose(uint64(e2), uint64(s2))
		lexLess := e1 < e2 || (e1 == e2 && s1 < s2)
		return (a < b) == lexLess
	}
	if err := quick.Check(order, nil); err != nil {
		t.Fatal(err)
	}
}

func TestJSONIsText(t *testing.T) {
	b, err := json.Marshal(struct{ T Token }{MaxToken})
	if err != nil || string(b) != `{"T":"9223372036854775807"}` {
		t.Fatalf("marshal = %s %v", b, err)
	}
	var v struct{ T Token }
	if err := json.Unmarshal([]byte(`{"T":"12x"}`), &v); err == nil {
		t.Fatal("accepted a malformed token")
	}
	if err := json.Unmarshal([]byte(`{"T":12}`), &v); err == nil {
		t.Fatal("accepted a JSON number")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1", "0", "01", "9223372036854775807", "-1", "4294967296"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		if err != nil {
			return
		}
		if tok.String() != s || tok.Seq() == 0 || tok > MaxToken {
			t.Fatalf("Parse(%q) accepted non-canonical %d", s, tok)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("9223372036854775807"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkString(b *testing.B) {
	b.ReportAllocs()
	t := MaxToken
	for b.Loop() {
		_ = t.String()
	}
}
