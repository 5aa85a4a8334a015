package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/internal/testutil"
)

// openWatch opens a watch stream with token and returns its status; a
// stream that was served stays open until the test ends.
func openWatch(t *testing.T, url, path, token string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	return resp.StatusCode
}

// TestStreamsPerIdentity: one identity's watches and blocking reads are
// bounded on a node (a never-reading watcher pinned 0.6 MB each), refused
// with 429 too_many_watches past the bound; another identity is not
// affected, and a closed stream frees its place.
func TestStreamsPerIdentity(t *testing.T) {
	tn := startSecureNode(t, cluster.Limits{}, ServerOptions{MaxStreamsPerIdentity: 2})
	// The two streams that fill bob's share are held open for the test:
	// each is opened again whenever it ends (a node still taking over, or
	// loaded, may answer one at once), so the share is full eventually.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	holdStream(ctx, tn.url+"/v1/watch?prefix=a", testClientToken)
	// A blocking read answers only when it ends: it is left waiting.
	holdStream(ctx, tn.url+"/v1/keys/k?index=1&wait=1m", testClientToken)
	// A watch is refused with a stream that says so and ends (a 429
	// would end a browser's EventSource for good).
	testutil.Eventually(t, 30*time.Second, func() error {
		a := getStream(t, tn.url+"/v1/watch?prefix=b", "Authorization", "Bearer "+testClientToken)
		if a.status != http.StatusOK || len(a.events) != 1 || a.events[0] != client.WatchUnavailable || a.data[0].Reason != "too_many_watches" {
			return fmt.Errorf("a third stream of bob: %+v, want unavailable too_many_watches", a)
		}
		return nil
	})
	if status, _, _ := send(t, tn.url, "GET", "/v1/keys/k", "", testClientToken); status == http.StatusTooManyRequests {
		t.Fatal("a plain read was counted as a stream")
	}
	if status := openWatch(t, tn.url, "/v1/watch?prefix=c", testAdminToken); status != http.StatusOK {
		t.Fatalf("another identity's stream: %d", status)
	}
	c := client.New([]string{tn.url}, client.WithBearerToken(testClientToken))
	kctx, kcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer kcancel()
	if _, err := c.KeyWait(kctx, "k", 1, time.Second); !errors.Is(err, client.ErrTooManyWatches) {
		t.Fatalf("a blocking read past the bound: %v, want ErrTooManyWatches", err)
	}
	// A stream that ends frees its place.
	cancel()
	testutil.Eventually(t, 30*time.Second, func() error {
		if status, _, _ := send(t, tn.url, "GET", "/v1/keys/k?index=1&wait=10ms", "", testClientToken); status == http.StatusTooManyRequests {
			return fmt.Errorf("still refused after a stream ended")
		}
		return nil
	})
}

// holdStream keeps a request of url open until ctx ends, sending it again
// whenever its answer ends.
func holdStream(ctx context.Context, url, token string) {
	go func() {
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}
