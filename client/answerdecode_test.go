package client

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/fenced/fenced/fence"
)

// sampleAnswers are verify and keepalive answers as servers send them.
func sampleAnswers() [][]byte {
	var out [][]byte
	add := func(v any) {
		b, _ := json.Marshal(v)
		out = append(out, b, append(b, '\n'))
	}
	add(VerifyResponse{Allow: true, Reason: "ok", CurrentToken: fence.Token(2<<32 | 7), Holder: "worker-1"})
	add(VerifyResponse{Reason: "superseded", CurrentToken: fence.Token(3<<32 | 1)})
	add(VerifyResponse{Reason: "unknown_key"})
	add(KeepaliveResponse{Holder: "h", Renewed: []RenewResponse{
		{Key: "a/1", Holder: "h", Token: fence.Token(1<<32 | 1), TTL: "30s"},
		{Key: "a/2", Holder: "h", Token: fence.Token(1<<32 | 2), TTL: "1m0s", Proof: "eyJhbGciOiJFZERTQSJ9.e30.c2ln"},
	}})
	add(KeepaliveResponse{Holder: "h", Renewed: []RenewResponse{}})
	add(KeepaliveResponse{Holder: "h"})
	return out
}

// The fast path takes the answers servers send, without falling back.
func TestDecodeAnswerTakesServersAnswers(t *testing.T) {
	for _, data := range sampleAnswers() {
		var v VerifyResponse
		var k KeepaliveResponse
		if !decodeAnswer(data, &v) && !decodeAnswer(data, &k) {
			t.Errorf("%q went to encoding/json", data)
		}
	}
}

// FuzzAnswerDecoder: whatever the fast path takes, it decodes exactly as
// encoding/json does, and it takes nothing encoding/json refuses.
func FuzzAnswerDecoder(f *testing.F) {
	for _, data := range sampleAnswers() {
		f.Add(data)
	}
	for _, s := range []string{`{}`, `{"allow":true,}`, `{"allow":null}`, `{"Allow":true}`, `{"allow":truex}`,
		`{"reason":"a\"b"}`, `{"reason":"é"}`, `{"current_token":"01"}`, `{"current_token":1}`, `{"current_token":"0"}`,
		`{"holder":"h","renewed":[{"key":"a","ttl":"1s"}],"renewed":[{"key":"b"}]}`, `{"renewed":[{}]}`, `{"renewed":[ ]}`,
		`{"renewed":null}`, `{"renewed":[{"token":"18446744073709551615"}]}`, `{"holder":"h"} x`, `{"holder":"h"}` + "\n\t ",
		` {"holder":"h"}`, `{"renewed":[{"key":"a"},]}`, `[]`, `{"holder":"h"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(got, want any, wantErr error) {
			t.Helper()
			taken := decodeAnswer(data, got)
			if !taken {
				return
			}
			if wantErr != nil {
				t.Fatalf("%q: taken by the fast path, refused by encoding/json: %v", data, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: decoded %+v, encoding/json %+v", data, got, want)
			}
		}
		var wantV, gotV VerifyResponse
		check(&gotV, &wantV, json.Unmarshal(data, &wantV))
		var wantK, gotK KeepaliveResponse
		check(&gotK, &wantK, json.Unmarshal(data, &wantK))
	})
}

// BenchmarkDecodeAnswer: a keepalive's answer of four leases, by the fast
// path and by encoding/json.
//
//	cd client && go test -run '^$' -bench DecodeAnswer
func BenchmarkDecodeAnswer(b *testing.B) {
	k := KeepaliveResponse{Holder: "bench/h0"}
	for i := 1; i <= 4; i++ {
		k.Renewed = append(k.Renewed, RenewResponse{Key: "bench/k", Holder: "bench/h0", Token: fence.Token(1<<32 | uint64(i)), TTL: "30s"})
	}
	data, _ := json.Marshal(k)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out KeepaliveResponse
			if !decodeAnswer(data, &out) {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out KeepaliveResponse
			if err := json.Unmarshal(data, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
