package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/metrics"
)

// A waiting acquire whose client goes away is counted as the client's
// doing (client_gone), not as a fault of the server (internal): operators
// alert on internal refusals, and a benchmark or a deploy that stops its
// waiters must not page them.
func TestClientGoneIsNotInternal(t *testing.T) {
	nodes := startCluster(t, 1)
	lead := nodes[0]
	if code, m := post(t, lead.url, "/v1/acquire", `{"key":"gone","holder":"a","ttl":"30s"}`); code != http.StatusOK {
		t.Fatalf("first acquire: %d %v", code, m)
	}
	waiters := promtest.ToFloat64(metrics.Waiters)
	internal := promtest.ToFloat64(metrics.Refusals.WithLabelValues("internal"))
	gone := promtest.ToFloat64(metrics.Refusals.WithLabelValues("client_gone"))

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, lead.url+"/v1/acquire",
		strings.NewReader(`{"key":"gone","holder":"b","ttl":"30s","wait":"20s"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	testutil.Eventually(t, 10*time.Second, func() error {
		if promtest.ToFloat64(metrics.Waiters) <= waiters {
			return errors.New("the second acquire does not wait yet")
		}
		return nil
	})
	cancel()
	<-done
	testutil.Eventually(t, 10*time.Second, func() error {
		if promtest.ToFloat64(metrics.Refusals.WithLabelValues("client_gone")) == gone {
			return errors.New("refusals{reason=client_gone} has not risen")
		}
		return nil
	})
	if got := promtest.ToFloat64(metrics.Refusals.WithLabelValues("internal")); got != internal {
		t.Fatalf("refusals{reason=internal} rose by %v when a waiting client went away", got-internal)
	}
}
