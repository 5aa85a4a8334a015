package api

import (
	"net/http"
	"testing"

	"github.com/fenced/fenced/cluster"
)

// TestForwardedHeaderGrantsNothingWithoutAPeerCertificate: a request that
// says a node forwarded it, on a connection that proved no node
// certificate, is rate limited like any other (it used to skip the limit
// with authentication off: 400 acquires at --rate-limit 20 went through).
func TestForwardedHeaderGrantsNothingWithoutAPeerCertificate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     ServerOptions
		token string
	}{
		{"plain", ServerOptions{RateLimit: 1, RateBurst: 5}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := serveNode(t, cluster.Limits{}, tc.o)
			limited := 0
			for range 20 {
				status, _, _ := send(t, tn.url, "POST", "/v1/verify", `{"key":"k","token":"1"}`, tc.token, forwardedHeader, "1")
				if status == http.StatusTooManyRequests {
					limited++
				}
			}
			if limited < 10 {
				t.Fatalf("%d of 20 requests claiming to be forwarded were rate limited at 1/s with a burst of 5; want the rest (15)", limited)
			}
		})
	}
}
