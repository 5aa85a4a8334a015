package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/fence"
)

// finishes runs f and returns its error, failing the test when f is still
// running at bound: the bound is the test's own, far above what f should
// take, and only there so a regression fails instead of hanging.
func finishes(t *testing.T, bound time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		t.Fatalf("still running after %v", bound)
		return nil
	}
}

// TestConnectTimeoutEndsRequestsNoEndpointAccepts: with a connect timeout,
// a request to endpoints that refuse every connection fails although the
// caller gave it an hour, as unavailable (nothing was sent, also for a
// write) and with no connection, naming each endpoint and why.
func TestConnectTimeoutEndsRequestsNoEndpointAccepts(t *testing.T) {
	a, b := refusedEndpoint(t), refusedEndpoint(t)
	c := New([]string{a, b}, WithConnectTimeout(50*time.Millisecond))
	for _, op := range []string{"status", "key", "acquire", "verify"} {
		t.Run(op, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			err := finishes(t, 30*time.Second, func() error { return runOp(ctx, c, op) })
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrNoConnection) || errors.Is(err, ErrUnknownOutcome) {
				t.Fatalf("%s: %v; want unavailable with no connection", op, err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: %v says the caller's deadline passed", op, err)
			}
			for _, ep := range []string{a, b} {
				if !strings.Contains(err.Error(), ep+": connection refused") {
					t.Fatalf("%s: error %q does not say %s refused the connection", op, err, ep)
				}
			}
		})
	}
}

// TestConnectTimeoutSparesConnectedNodes: a node that accepted the
// connection is waited for until the caller's deadline, as without the
// option (one that answers that it is not ready, one that accepts and never
// answers), and a refused endpoint next to a serving node costs nothing.
// The connect timeout is generous: a loopback connection is made well
// within it, so only the behaviour after it is tested.
func TestConnectTimeoutSparesConnectedNodes(t *testing.T) {
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "no leader")
	}))
	t.Cleanup(notReady.Close)
	for name, ep := range map[string]string{"answering": notReady.URL, "frozen": hangingEndpoint(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := New([]string{refusedEndpoint(t), ep}, WithConnectTimeout(time.Second), WithAttemptTimeout(200*time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := c.Key(ctx, "k")
			if errors.Is(err, ErrNoConnection) || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil {
				t.Fatalf("key: %v (caller's context: %v); want the caller's deadline", err, ctx.Err())
			}
		})
	}
	good := newFakeNode(t)
	c := New([]string{refusedEndpoint(t), good.srv.URL}, WithConnectTimeout(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Renew(ctx, "k", "h", fence.Token(1<<32|1)); err != nil {
		t.Fatalf("renew through the serving node: %v", err)
	}
}

// TestConnectTimeoutTrustsWrittenRequests: a transport that reports only
// that it wrote the request (no GotConn, as the benchmark's own transport)
// is taken as connected.
func TestConnectTimeoutTrustsWrittenRequests(t *testing.T) {
	hang := roundTripper(func(r *http.Request) (*http.Response, error) {
		if tr := httptrace.ContextClientTrace(r.Context()); tr != nil && tr.WroteHeaders != nil {
			tr.WroteHeaders()
		}
		<-r.Context().Done()
		return nil, r.Context().Err()
	})
	c := New([]string{"127.0.0.1:7700"}, WithHTTPClient(&http.Client{Transport: hang}),
		WithConnectTimeout(300*time.Millisecond), WithAttemptTimeout(2*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := c.Key(ctx, "k")
	if errors.Is(err, ErrNoConnection) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("key through a transport that wrote the request: %v; want the caller's deadline", err)
	}
}

// TestConnectTimeoutCutsAWriteWaitingToConnect: a write's first attempt
// runs in the caller's goroutine, where nothing but its own context can end
// it; the connect timeout must still end it when no connection was made,
// not the attempt's deadline, and the write is reported unavailable with
// no connection (nothing was sent), not as an unknown outcome.
func TestConnectTimeoutCutsAWriteWaitingToConnect(t *testing.T) {
	neverConnects := roundTripper(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done()
		return nil, r.Context().Err()
	})
	c := New([]string{"127.0.0.1:7700"}, WithHTTPClient(&http.Client{Transport: neverConnects}),
		WithConnectTimeout(100*time.Millisecond), WithAttemptTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, op := range []string{"acquire", "keepalive", "release"} {
		err := finishes(t, 20*time.Second, func() error {
			var err error
			switch op {
			case "acquire":
				_, err = c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"})
			case "keepalive":
				_, err = c.Keepalive(ctx, "h")
			case "release":
				_, err = c.Release(ctx, ReleaseRequest{Key: "k", Holder: "h", Token: fence.Token(1<<32 | 1)})
			}
			return err
		})
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrNoConnection) || errors.Is(err, ErrUnknownOutcome) {
			t.Fatalf("%s: %v; want unavailable with no connection", op, err)
		}
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestCallerDeadlineIsInTheError: a request the caller's deadline ended
// says so to errors.Is, as a request the endpoints refused for good does
// not.
func TestCallerDeadlineIsInTheError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := New([]string{refusedEndpoint(t)}).Key(ctx, "k")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("key past the caller's deadline: %v", err)
	}
	_, err = New([]string{"ftp://127.0.0.1:1"}).Key(context.Background(), "k")
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("key with no usable endpoint: %v", err)
	}
}

// TestUntrustedCertificateReasonIsWhole: a node whose certificate another
// CA of the same name signed is reported with the whole reason, not a
// fragment cut inside its quotes.
func TestUntrustedCertificateReasonIsWhole(t *testing.T) {
	ca, caKey := testCA(t, "test CA")
	other, _ := testCA(t, "test CA")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, Status{ID: "n1"})
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{testLeaf(t, ca, caKey)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(other)
	c := New([]string{srv.URL}, WithTLS(&tls.Config{RootCAs: roots}))
	_, err := c.Status(context.Background())
	if err == nil {
		t.Fatal("status through an untrusted certificate succeeded")
	}
	_, reason, _ := strings.Cut(err.Error(), srv.URL+": ")
	if !strings.HasPrefix(reason, "TLS: certificate signed by unknown authority") || strings.Count(reason, `"`)%2 != 0 {
		t.Fatalf("reason %q is not the whole certificate error", reason)
	}
}

func testCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func testLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "n1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// BenchmarkConnectTimeout is the cost the connect timeout adds to a request
// served at once (a trace and a timer per request).
func BenchmarkConnectTimeout(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, KeyInfo{Key: "k", Holder: "h", Token: fence.Token(1<<32 | 1), State: "held"})
	}))
	b.Cleanup(srv.Close)
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"off", nil}, {"2s", []Option{WithConnectTimeout(2 * time.Second)}}} {
		b.Run(tc.name, func(b *testing.B) {
			c := New([]string{srv.URL}, tc.opts...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Key(ctx, "k"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
