package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/fenced/fenced/client"

	"github.com/fenced/fenced/fence"
)

// awkwardStrings need escaping in JSON or HTML, or are not ASCII.
var awkwardStrings = []string{"", "plain/holder-1", `a"b`, `a\b`, "<script>", "a&b", "a>b", "tab\there", "nl\n", "\x00\x1f\x7f",
	"héllo", "\u2028\u2029", "\xff\xfe", "日本", "emoji 🙂"}

// encodingJSON is what writeJSON wrote before answers encoded themselves.
func encodingJSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	var vals []jsonAppender
	for _, s := range awkwardStrings {
		vals = append(vals,
			verifyAnswer{Allow: true, Reason: s},
			verifyAnswer{Reason: "stale_token", CurrentToken: fence.Token(1<<32 | 7), Holder: s},
			keepaliveAnswer{Holder: s},
			keepaliveAnswer{Holder: s, Renewed: []client.RenewResponse{}},
			keepaliveAnswer{Holder: "h", Renewed: []client.RenewResponse{{Key: s, Holder: s, Token: 1<<63 - 1, TTL: "10s"}, {Key: "k", TTL: s}}})
	}
	for _, v := range vals {
		want := encodingJSON(t, v)
		got := append(v.appendJSON(nil), '\n')
		if !bytes.Equal(got, want) {
			t.Errorf("%#v:\n got %s\nwant %s", v, got, want)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range awkwardStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := renewAnswer{Key: s, Holder: s, TTL: s}
		if got, want := append(v.appendJSON(nil), '\n'), encodingJSON(t, v); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s want %s", s, got, want)
		}
	})
}

// fastBodies are verify and keepalive bodies, those the fast path takes and
// those it must leave to decode.
var fastBodies = []string{
	`{"key":"orders-db","token":"4294967297","holder":"bob/worker-1"}`,
	`{"key":"orders-db","token":"4294967297"}`,
	` { "holder" : "bob" } `, "{\n\t\"holder\":\r\"bob\"}\n", `{}`, `{"holder":""}`,
	``, ` `, `{`, `}`, `[]`, `null`, `{"holder":"bob"}x`, `{"holder":"bob"}{}`, `{"holder":"bob",}`, `{"holder" "bob"}`,
	`{"holder":"bob","holder":"eve"}`, `{"holder":"bob","HOLDER":"eve"}`, `{"Holder":"bob"}`, `{"holder":"b\u006fb"}`,
	`{"holder":"b\"ob"}`, `{"holder":"béb"}`, `{"holder":1}`, `{"holder":null}`, `{"holder":"bob","extra":"x"}`,
	`{"key":"k","token":4294967297}`, `{"key":"k","token":"01"}`, `{"key":"k\u0000"}`, "{\"holder\":\"b\x00b\"}",
	`{"holder":"bob"`, `{"holder":"bob`, `{"holder":`, `{"holder"`, `{"`,
}

func FuzzDecodeFlatStrings(f *testing.F) {
	for _, b := range fastBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastDecode(t, body)
	})
}

func TestDecodeFlatStringsAgreesWithDecode(t *testing.T) {
	took := 0
	for _, b := range fastBodies {
		if checkFastDecode(t, []byte(b)) {
			took++
		}
	}
	// The first six, and the token "01", a string the handler refuses later.
	if took != 7 {
		t.Errorf("the fast path took %d of the bodies, want 7", took)
	}
}

// checkFastDecode fails t if decodeFlatStrings accepts body where decode
// refuses it or reads other values, and reports whether it accepted it.
func checkFastDecode(t *testing.T, body []byte) bool {
	t.Helper()
	var fast, slow client.VerifyRequest
	if !decodeFlatStrings(body, []string{"key", "token", "holder"}, []*string{&fast.Key, &fast.Token, &fast.Holder}) {
		if fast != (client.VerifyRequest{}) {
			t.Fatalf("%q: refused by the fast path, which still stored %+v", body, fast)
		}
		return false
	}
	if err := decode(body, &slow); err != nil {
		t.Fatalf("%q: the fast path took what decode refuses: %v", body, err)
	}
	if fast != slow {
		t.Fatalf("%q: fast path read %+v, decode %+v", body, fast, slow)
	}
	var fk, sk client.KeepaliveRequest
	if decodeFlatStrings(body, []string{"holder"}, []*string{&fk.Holder}) {
		if err := decode(body, &sk); err != nil || fk != sk {
			t.Fatalf("%q: keepalive: fast path read %+v, decode %+v, %v", body, fk, sk, err)
		}
	}
	return true
}

// filled returns a value of t with every field set to something that is not
// its zero value (slices hold one such element), so that a field an
// appender leaves out shows in its output.
func filled(t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.String:
		v.SetString("x<&")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1<<32 | 7)
	case reflect.Slice:
		v.Set(reflect.Append(reflect.MakeSlice(t, 0, 1), filled(t.Elem())))
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).IsExported() {
				v.Field(i).Set(filled(t.Field(i).Type))
			}
		}
	case reflect.Pointer:
		v.Set(filled(t.Elem()).Addr())
	}
	return v
}

// TestAppendJSONCoversEveryField guards the hand-written encoders against a
// field added to an answer later: with every field set, the output must
// still be encoding/json's.
func TestAppendJSONCoversEveryField(t *testing.T) {
	for _, v := range []jsonAppender{verifyAnswer{}, keepaliveAnswer{}, renewAnswer{}} {
		full := filled(reflect.TypeOf(v)).Interface()
		want := encodingJSON(t, full)
		if got := append(full.(jsonAppender).appendJSON(nil), '\n'); !bytes.Equal(got, want) {
			t.Errorf("%T with every field set:\n got %s\nwant %s", v, got, want)
		}
	}
}
