package workload

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/jepsen-like/history"
	"github.com/fenced/fenced/jepsen-like/resource"
)

func TestListFirstReordersEveryClient(t *testing.T) {
	w := New(Config{Endpoints: []string{"10.0.0.1:7700", "10.0.0.2:7700", "10.0.0.3:7700"}, Clients: 3, Keys: 1, Seed: 3},
		history.NewRecorder(), resource.New(true))
	c := w.newClient(0)
	own := c.cl().Endpoints()
	if c.cl() != c.cl() {
		t.Fatal("the API client is rebuilt although the order did not change")
	}
	w.ListFirst("10.0.0.2:7700")
	eps := c.cl().Endpoints()
	if eps[0] != "http://10.0.0.2:7700" || len(eps) != 3 {
		t.Fatalf("endpoints %v, want 10.0.0.2 first", eps)
	}
	w.ListFirst("")
	if got := c.cl().Endpoints(); strings.Join(got, ",") != strings.Join(own, ",") {
		t.Fatalf("endpoints %v, want the client's own order %v back", got, own)
	}
}

// The no-attempt-deadline control: an attempt the API client would cut at
// its own deadline goes on until the operation's. The server answers only
// the first request, once released; it is released after the client moved
// on to a second attempt (normal mode) or while the first is held (control).
func TestNoAttemptDeadlineWaitsForTheOperation(t *testing.T) {
	for _, broken := range []string{"", BrokenNoAttemptDeadline} {
		var requests atomic.Int32
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if requests.Add(1) > 1 {
				<-r.Context().Done() // only the first request is ever answered
				return
			}
			select {
			case <-release:
				w.Write([]byte(`{"id":"n1","state":"Leader","leader_id":"n1"}`))
			case <-r.Context().Done():
			}
		}))
		w := New(Config{Endpoints: []string{srv.Listener.Addr().String()}, Clients: 1, Keys: 1, AttemptTimeout: 50 * time.Millisecond, Broken: broken},
			history.NewRecorder(), resource.New(true))
		c := w.newClient(0)
		octx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		done := make(chan error, 1)
		go func() {
			_, err := c.cl().Status(withOp(octx))
			done <- err
		}()
		want := int32(2) // the first attempt was cut, a second one sent
		if broken != "" {
			want = 1 // the first attempt is held
		}
		if err := testutil.Poll(20*time.Second, func() error {
			if n := requests.Load(); n < want {
				return fmt.Errorf("%d requests", n)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		close(release)
		if broken == "" {
			cancel()
		}
		err := <-done
		cancel()
		srv.Close()
		switch {
		case broken == "" && err == nil:
			t.Fatal("answered by an attempt that its deadline should have cut")
		case broken != "" && err != nil:
			t.Fatalf("held attempt: %v", err)
		case broken != "" && w.BrokenAnswers() == 0:
			t.Fatal("the control counted no held attempt")
		}
	}
}
