package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/internal/testutil"
)

// Every request is answered by a round that started after it joined, and
// rounds are shared.
func TestConfirmerRoundsStartAfterJoin(t *testing.T) {
	var rounds atomic.Int64
	var mu sync.Mutex
	var starts []time.Time
	c := &confirmer{verify: func() error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		rounds.Add(1)
		time.Sleep(2 * time.Millisecond) // a heartbeat round trip
		return nil
	}}
	var wg sync.WaitGroup
	const n = 200
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			joined := time.Now()
			if err := c.confirm(context.Background()); err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			ok := false
			for _, s := range starts {
				ok = ok || !s.Before(joined)
			}
			if !ok {
				t.Error("answered by a round that started before the request joined")
			}
		}()
	}
	wg.Wait()
	if r := rounds.Load(); r >= n {
		t.Fatalf("%d rounds for %d requests: nothing shared", r, n)
	}
	testutil.Eventually(t, time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.inflight != 0 {
			return fmt.Errorf("%d loops left running", c.inflight)
		}
		return nil
	})
}

func TestConfirmerError(t *testing.T) {
	boom := errors.New("not leader")
	c := &confirmer{verify: func() error { return boom }}
	if err := c.confirm(context.Background()); !errors.Is(err, boom) {
		t.Fatal(err)
	}
}
