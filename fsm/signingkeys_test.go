package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func pub(b byte) []byte { return bytes.Repeat([]byte{b}, signingPublicLen) }

func TestSigningKeyRoundTrip(t *testing.T) {
	c := SigningKey{Node: "n1", Kid: "kid-1", Public: pub(1), RetireOthersAt: 1700000000000}
	got, err := Decode(Encode(c))
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip %#v = %#v, %v", c, got, err)
	}
}

func TestSigningKeyRules(t *testing.T) {
	a := &applier{f: New(Config{})}
	for _, bad := range []SigningKey{
		{Kid: "k", Public: pub(1)},
		{Node: "n1", Public: pub(1)},
		{Node: "n1", Kid: "k", Public: pub(1)[:31]},
	} {
		if r := a.at(1, bad); !errors.Is(r.Err, ErrInvalid) {
			t.Fatalf("%+v: %v, want ErrInvalid", bad, r.Err)
		}
	}
	if n := len(a.f.SigningKeys()); n != 0 {
		t.Fatalf("refused registrations left %d keys", n)
	}

	a.at(1, SigningKey{Node: "n1", Kid: "a", Public: pub(1)})
	a.at(1, SigningKey{Node: "n2", Kid: "b", Public: pub(2)})
	if r := a.at(1, SigningKey{Node: "n2", Kid: "a", Public: pub(3)}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("another member's kid: %v", r.Err)
	}
	// Rotation: n1's key "a" starts its overlap, "c" is current.
	a.at(1, SigningKey{Node: "n1", Kid: "c", Public: pub(3), RetireOthersAt: 5000})
	want := map[string]int64{"a": 5000, "b": 0, "c": 0}
	for _, k := range a.f.SigningKeys() {
		if k.NotAfter != want[k.Kid] {
			t.Fatalf("key %s NotAfter %d, want %d", k.Kid, k.NotAfter, want[k.Kid])
		}
	}
	// A later rotation does not extend an overlap already running.
	a.at(1, SigningKey{Node: "n1", Kid: "d", Public: pub(4), RetireOthersAt: 9000})
	if k, _ := a.f.SigningKey("a"); k.NotAfter != 5000 {
		t.Fatalf("overlap of a moved to %d", k.NotAfter)
	}
	if k, _ := a.f.SigningKey("c"); k.NotAfter != 9000 {
		t.Fatalf("c NotAfter %d", k.NotAfter)
	}
	// At most MaxSigningKeysPerNode a member: the oldest go first.
	a.at(1, SigningKey{Node: "n1", Kid: "e", Public: pub(5), RetireOthersAt: 9000})
	a.at(1, SigningKey{Node: "n1", Kid: "f", Public: pub(6), RetireOthersAt: 9000})
	if _, ok := a.f.SigningKey("a"); ok {
		t.Fatal("the oldest key of n1 was kept beyond the bound")
	}
	n1 := 0
	for _, k := range a.f.SigningKeys() {
		if k.Node == "n1" {
			n1++
		}
	}
	if n1 != MaxSigningKeysPerNode {
		t.Fatalf("n1 has %d keys", n1)
	}
	assertRoundTrip(t, a.f)

	// A removed member's keys are forgotten.
	a.at(1, DelMember{ID: "n1"})
	keys := a.f.SigningKeys()
	if len(keys) != 1 || keys[0].Kid != "b" {
		t.Fatalf("after n1 left: %+v", keys)
	}
	assertRoundTrip(t, a.f)
}

func TestSigningKeysSnapshotVersion(t *testing.T) {
	a := &applier{f: New(Config{})}
	a.at(1, SetMember{ID: "n1", HTTPAddr: "x:1"})
	var before bytes.Buffer
	if err := a.f.Image().Encode(&before); err != nil {
		t.Fatal(err)
	}
	if v := before.Bytes()[4]; v >= snapVersion6 {
		t.Fatalf("a state without signing keys written as version %d", v)
	}
	a.at(1, SigningKey{Node: "n1", Kid: "a", Public: pub(1)})
	var after bytes.Buffer
	if err := a.f.Image().Encode(&after); err != nil {
		t.Fatal(err)
	}
	if v := after.Bytes()[4]; v != snapVersion6 {
		t.Fatalf("signing keys written as version %d", v)
	}
	img, err := DecodeImage(after.Bytes())
	if err != nil || len(img.SigningKeys) != 1 || !bytes.Equal(img.SigningKeys[0].Public, pub(1)) {
		t.Fatalf("decoded %+v, %v", img, err)
	}
}

func TestSigningKeysSnapshotRefusesImpossible(t *testing.T) {
	for name, keys := range map[string][]SigningKeyState{
		"short public":    {{Node: "n", Kid: "a", Public: pub(1)[:8], Index: 1}},
		"duplicate kid":   {{Node: "n", Kid: "a", Public: pub(1), Index: 1}, {Node: "m", Kid: "a", Public: pub(2), Index: 1}},
		"index order":     {{Node: "n", Kid: "a", Public: pub(1), Index: 2}, {Node: "n", Kid: "b", Public: pub(2), Index: 1}},
		"after applied":   {{Node: "n", Kid: "a", Public: pub(1), Index: 99}},
		"too many a node": {{Node: "n", Kid: "a", Public: pub(1), Index: 1}, {Node: "n", Kid: "b", Public: pub(1), Index: 1}, {Node: "n", Kid: "c", Public: pub(1), Index: 1}, {Node: "n", Kid: "d", Public: pub(1), Index: 1}, {Node: "n", Kid: "e", Public: pub(1), Index: 1}},
	} {
		img := &Image{Applied: 5, Members: map[string]string{}, SigningKeys: keys}
		var buf bytes.Buffer
		if err := img.Encode(&buf); err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeImage(buf.Bytes()); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v, want ErrBadSnapshot", name, err)
		}
	}
}
