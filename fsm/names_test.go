package fsm

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"
)

// A request id of lower-case hex digits, an even number of them, is kept in
// half its bytes; every other is kept as it is; both come back as they
// were, and only the very same id matches.
func TestRequestIDPacking(t *testing.T) {
	id := "0123456789abcdef01234567"
	for _, tc := range []struct {
		id     string
		packed bool
	}{
		{"", false},
		{"0a", true},
		{id, true},
		{"ff00", true},
		{"0A", false},
		{strings.ToUpper(id), false},
		{"abc", false},
		{"r1", false},
		{"0123456789abcdeg", false},
		{"01 23", false},
	} {
		names, packed := joinNames("holder", tc.id, "key")
		if packed != tc.packed {
			t.Fatalf("%q packed %v, want %v", tc.id, packed, tc.packed)
		}
		stored := names[len("holder") : len(names)-len("key")]
		if want := len(tc.id) / map[bool]int{true: 2, false: 1}[packed]; len(stored) != want {
			t.Fatalf("%q kept in %d bytes, want %d", tc.id, len(stored), want)
		}
		if !strings.HasPrefix(names, "holder") || !strings.HasSuffix(names, "key") {
			t.Fatalf("%q: names %q", tc.id, names)
		}
		var buf []byte
		if got := unpackID(stored, packed); got != tc.id {
			t.Fatalf("%q unpacked as %q", tc.id, got)
		}
		if got := unpackIDInto(stored, packed, &buf); got != tc.id {
			t.Fatalf("%q unpacked into a buffer as %q", tc.id, got)
		}
		for _, other := range []string{tc.id, strings.ToUpper(tc.id), tc.id + "0", tc.id + "00", strings.TrimSuffix(tc.id, tc.id[max(0, len(tc.id)-2):]), "1" + tc.id[min(1, len(tc.id)):], ""} {
			if got := sameID(stored, packed, other); got != (other == tc.id) {
				t.Fatalf("sameID(%q kept, %q) = %v", tc.id, other, got)
			}
		}
	}
}

// genPackingCommand is genCommand with request ids that are packed, not
// packed, and near misses of each other (case, one digit, one digit more).
func genPackingCommand(t *rapid.T, f *FSM) Command {
	ids := []string{"", "r1", "ab", "AB", "0123456789abcdef01234567", "0123456789ABCDEF01234567",
		"0123456789abcdef0123456", "0123456789abcdef01234568", "0123456789abcdef0123456700"}
	switch c := genCommand(t, f).(type) {
	case Acquire:
		c.RequestID = rapid.SampledFrom(ids).Draw(t, "id")
		return c
	case Release:
		c.RequestID = rapid.SampledFrom(ids).Draw(t, "releaseID")
		return c
	default:
		return c
	}
}

// Packing request ids changes nothing anyone can see: random command
// sequences applied with packing and without give the same results, the
// same state and the same snapshot bytes, and both restore.
func TestPropertyPackingChangesNothing(t *testing.T) {
	defer func() { packIDs = true }()
	rapid.Check(t, func(t *rapid.T) {
		packed, plain := New(Config{MaxSeq: 4}), New(Config{MaxSeq: 4})
		term := uint64(1)
		n := rapid.IntRange(1, 150).Draw(t, "n")
		for i := 1; i <= n; i++ {
			term += uint64(rapid.IntRange(0, 1).Draw(t, "bump"))
			c := genPackingCommand(t, packed)
			log := &raft.Log{Index: uint64(i), Term: term, Type: raft.LogCommand, Data: Encode(c), AppendedAt: time.Unix(int64(i), 0)}
			packIDs = true
			a := packed.Apply(log)
			packIDs = false
			b := plain.Apply(log)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("command %d %+v:\npacked %+v\nplain  %+v", i, c, a, b)
			}
		}
		packIDs = true
		var got, want bytes.Buffer
		if err := packed.Image().Encode(&got); err != nil {
			t.Fatal(err)
		}
		if err := plain.Image().Encode(&want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("images differ")
		}
		if !bytes.Equal(persisted(t, packed), want.Bytes()) {
			t.Fatalf("the snapshot's bytes differ from the unpacked image's")
		}
		assertRoundTrip(t, packed)
	})
}
