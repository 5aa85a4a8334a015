package api

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/fenced/fenced/client"
)

// BenchmarkDecode measures the strict decoder on the hot path's bodies.
func BenchmarkDecode(b *testing.B) {
	for _, bc := range []struct {
		name string
		body string
		v    func() any
	}{
		{"acquire", `{"key":"orders-db","holder":"bob/worker-1","ttl":"10s","request_id":"4f1c2b7a9d3e5f60718293a4"}`, func() any { return new(client.AcquireRequest) }},
		{"verify", `{"key":"orders-db","token":"8589934593","holder":"bob/worker-1"}`, func() any { return new(client.VerifyRequest) }},
		{"renew", `{"key":"orders-db","holder":"bob/worker-1","token":"8589934593"}`, func() any { return new(client.RenewRequest) }},
	} {
		body := []byte(bc.body)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := decode(body, bc.v()); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The share of the duplicate and surrogate checks in the above.
		b.Run(bc.name+"/strict-scan", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := checkStrictJSON(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHotAnswers compares, for verify and keepalive, the fast paths
// (decodeFlatStrings, appendJSON) with encoding/json doing the same work.
func BenchmarkHotAnswers(b *testing.B) {
	verifyBody := []byte(`{"key":"orders-db","token":"8589934593","holder":"bob/worker-1"}`)
	keepaliveBody := []byte(`{"holder":"bob/worker-1"}`)
	verdict := client.VerifyResponse{Allow: true, Reason: "ok"}
	renewed := client.KeepaliveResponse{Holder: "bob/worker-1", Renewed: []client.RenewResponse{{Key: "orders-db", Holder: "bob/worker-1", Token: 8589934593, TTL: "30s"}}}
	b.Run("verify/decode", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var req client.VerifyRequest
			if err := decode(verifyBody, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify/flat", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var req client.VerifyRequest
			if !decodeFlatStrings(verifyBody, []string{"key", "token", "holder"}, []*string{&req.Key, &req.Token, &req.Holder}) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("keepalive/decode", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var req client.KeepaliveRequest
			if err := decode(keepaliveBody, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("keepalive/flat", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var req client.KeepaliveRequest
			if !decodeFlatStrings(keepaliveBody, []string{"holder"}, []*string{&req.Holder}) {
				b.Fatal("refused")
			}
		}
	})
	for _, a := range []struct {
		name string
		v    jsonAppender
	}{{"verify", verifyAnswer(verdict)}, {"keepalive", keepaliveAnswer(renewed)}} {
		w := &sinkWriter{h: http.Header{}}
		b.Run(a.name+"/encode-json", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(200)
				_ = json.NewEncoder(w).Encode(a.v)
			}
		})
		b.Run(a.name+"/writeJSON", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				writeJSON(w, 200, a.v)
			}
		})
	}
}

// sinkWriter is a ResponseWriter that keeps nothing, so that a benchmark
// counts only the encoding.
type sinkWriter struct{ h http.Header }

func (w *sinkWriter) Header() http.Header         { return w.h }
func (w *sinkWriter) WriteHeader(int)             {}
func (w *sinkWriter) Write(p []byte) (int, error) { return len(p), nil }
