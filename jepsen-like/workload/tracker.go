package workload

import (
	"context"
	"errors"
	"io"
	"math/rand"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// The API client retries a write whose attempt ended ambiguously (sent, then
// no answer) with the same request, and returns the answer of the last
// attempt. That answer can be a definite refusal although an earlier attempt
// took effect: an acquire committed, its answer lost, the lease expired, and
// the retry finds the key held by someone else. The history must then say
// "unknown", not "failed". The client does not expose its attempts, so the
// harness watches them at the transport.

type trackerKey struct{}

// attempts records whether any attempt of one operation ended ambiguously.
type attempts struct{ ambiguous atomic.Bool }

func withAttempts(ctx context.Context) (context.Context, *attempts) {
	a := &attempts{}
	return context.WithValue(ctx, trackerKey{}, a), a
}

// clusterTransport is the workloads' transport to the nodes: a short dial
// timeout, so a partitioned node costs a second, and a few kept-alive
// connections per node.
func clusterTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
}

// trackedClient is an HTTP client over clusterTransport whose attempts
// the history tracks (trackingTransport); timeout bounds each request, 0
// for none.
func trackedClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: trackingTransport{base: clusterTransport()}}
}

// shuffled returns a copy of endpoints in an order drawn from rng, so the
// clients spread over the nodes.
func shuffled(rng *rand.Rand, endpoints []string) []string {
	eps := append([]string(nil), endpoints...)
	rng.Shuffle(len(eps), func(a, b int) { eps[a], eps[b] = eps[b], eps[a] })
	return eps
}

// trackingTransport marks an operation ambiguous when an attempt was sent and
// got no complete answer, or got the server's outcome_unknown (504).
type trackingTransport struct{ base http.RoundTripper }

func (t trackingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	a, _ := req.Context().Value(trackerKey{}).(*attempts)
	resp, err := t.base.RoundTrip(req)
	if a == nil {
		return resp, err
	}
	if err != nil {
		var op *net.OpError
		if !(errors.As(err, &op) && op.Op == "dial") {
			a.ambiguous.Store(true)
		}
		return resp, err
	}
	if resp.StatusCode == http.StatusGatewayTimeout {
		a.ambiguous.Store(true)
	}
	resp.Body = &trackedBody{ReadCloser: resp.Body, a: a}
	return resp, nil
}

// trackedBody marks the operation ambiguous when the answer's body is cut.
type trackedBody struct {
	io.ReadCloser
	a *attempts
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.a.ambiguous.Store(true)
	}
	return n, err
}
