package api

import "testing"

// BenchmarkDecode measures the strict decoder on the hot path's bodies.
func BenchmarkDecode(b *testing.B) {
	for _, bc := range []struct {
		name string
		body string
		v    func() any
	}{
		{"acquire", `{"key":"orders-db","holder":"bob/worker-1","ttl":"10s","request_id":"4f1c2b7a9d3e5f60718293a4"}`, func() any { return new(AcquireRequest) }},
		{"verify", `{"key":"orders-db","token":"8589934593","holder":"bob/worker-1"}`, func() any { return new(VerifyRequest) }},
		{"renew", `{"key":"orders-db","holder":"bob/worker-1","token":"8589934593"}`, func() any { return new(RenewRequest) }},
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
