package workload

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
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
