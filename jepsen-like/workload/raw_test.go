package workload

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
)

// TestRawRenewalsKeepTheNodeThatAnswered: the raw renewals post to the
// endpoint that answered the last one, as a careful script does, so a
// frozen node at the head of the list costs one attempt deadline, not one
// per renewal while it stays frozen.
func TestRawRenewalsKeepTheNodeThatAnswered(t *testing.T) {
	frozen, conns := testutil.FrozenListener(t)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"key":"k","holder":"h","token":"4294967297","ttl":"2s"}`))
	}))
	defer good.Close()
	eps := []string{frozen, strings.TrimPrefix(good.URL, "http://")}
	hc := &http.Client{Timeout: 200 * time.Millisecond, Transport: trackingTransport{base: clusterTransport()}}
	from := 0
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		actx, att := withAttempts(ctx)
		err := postRetrying(actx, hc, eps, &from, att, "/v1/renew", func(int) any { return client.RenewRequest{Key: "k", Holder: "h"} }, &client.RenewResponse{})
		cancel()
		if err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
	}
	if n := conns(); n != 1 {
		t.Fatalf("three renewals tried the frozen node %d times, want once (the first)", n)
	}
	if from != 1 {
		t.Fatalf("the next renewal starts at endpoint %d, want 1 (the node that answered)", from)
	}
}
