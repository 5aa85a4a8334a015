package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/metrics"
)

// TestKeysPagination: a listing cut at its limit says so and gives the
// cursor to continue with (after=), and the pages together are the whole
// listing, in order, each key once.
func TestKeysPagination(t *testing.T) {
	nodes := startCluster(t, 1)
	c := client.New([]string{nodes[0].url})
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := c.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("page/%d", i), Holder: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	after := ""
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatalf("no end of the listing after %d pages: %v", page, all)
		}
		resp, err := http.Get(nodes[0].url + "/v1/keys?prefix=page/&limit=2&after=" + after)
		if err != nil {
			t.Fatal(err)
		}
		var kr struct {
			Keys      []client.KeyInfo `json:"keys"`
			Truncated bool             `json:"truncated"`
			Next      string           `json:"next"`
		}
		err = json.NewDecoder(resp.Body).Decode(&kr)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("page %d: status %d, %v", page, resp.StatusCode, err)
		}
		for _, k := range kr.Keys {
			all = append(all, k.Key)
		}
		if !kr.Truncated {
			if kr.Next != "" {
				t.Fatalf("last page with a cursor %q", kr.Next)
			}
			break
		}
		if len(kr.Keys) != 2 || kr.Next != kr.Keys[len(kr.Keys)-1].Key {
			t.Fatalf("page %d cut with keys %v and cursor %q", page, kr.Keys, kr.Next)
		}
		after = kr.Next
	}
	if fmt.Sprint(all) != "[page/0 page/1 page/2 page/3 page/4]" {
		t.Fatalf("pages together: %v", all)
	}
	// The Go client pages the same way.
	kr, err := c.KeysPage(ctx, "page/", "page/3", 0)
	if err != nil || len(kr.Keys) != 1 || kr.Keys[0].Key != "page/4" || kr.Truncated {
		t.Fatalf("KeysPage after page/3: %+v %v", kr, err)
	}
}

// TestMetricLabelsCoverCodes: every wire error code has its series of
// fenced_refusals_total from the start, and every verify reason its series
// of fenced_verifies_total.
func TestMetricLabelsCoverCodes(t *testing.T) {
	for _, w := range wireErrors {
		if !slices.Contains(metrics.RefusalReasons, w.code) {
			t.Errorf("wire code %q is not in metrics.RefusalReasons", w.code)
		}
	}
	for _, r := range []cluster.Reason{cluster.ReasonSuperseded, cluster.ReasonReleased, cluster.ReasonExpired, cluster.ReasonUnknownKey,
		cluster.ReasonNotGrantedYet, cluster.ReasonHolderMismatch, cluster.ReasonMalformed, cluster.ReasonUnavailable} {
		if !slices.Contains(metrics.VerifyRefuseReasons, string(r)) {
			t.Errorf("verify reason %q is not in metrics.VerifyRefuseReasons", r)
		}
	}
}

// GET /v1/keys?state= lists only the keys in that state, paging over them
// alone; an unknown state is a 400.
func TestKeysStateFilter(t *testing.T) {
	nodes := startCluster(t, 1)
	c := client.New([]string{nodes[0].url})
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		g, err := c.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("st/%d", i), Holder: "h"})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if _, err := c.Release(ctx, client.ReleaseRequest{Key: g.Key, Holder: "h", Token: g.Token}); err != nil {
				t.Fatal(err)
			}
		}
	}
	kr, err := c.ListKeys(ctx, client.KeysQuery{Prefix: "st/", State: "released", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(kr.Keys) != 1 || kr.Keys[0].Key != "st/1" || !kr.Truncated || kr.Next != "st/1" {
		t.Fatalf("first page of released keys: %+v", kr)
	}
	kr, err = c.ListKeys(ctx, client.KeysQuery{Prefix: "st/", State: "released", After: kr.Next, Limit: 1})
	if err != nil || len(kr.Keys) != 1 || kr.Keys[0].Key != "st/3" || kr.Truncated {
		t.Fatalf("second page of released keys: %+v %v", kr, err)
	}
	resp, err := http.Get(nodes[0].url + "/v1/keys?state=gone")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown state: %d, want 400", resp.StatusCode)
	}
}

// TestKeyShowsLockDelayAndWaiters: a key's read names its grant's
// lock-delay and how many acquires wait for it.
func TestKeyShowsLockDelayAndWaiters(t *testing.T) {
	nodes := startCluster(t, 1)
	c := client.New([]string{nodes[0].url})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "delayed", Holder: "a", TTL: "1m", LockDelay: "5s"}); err != nil {
		t.Fatal(err)
	}
	read := func() client.KeyInfo {
		t.Helper()
		resp, err := http.Get(nodes[0].url + "/v1/keys?prefix=delayed")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var kr client.KeysResponse
		if err := json.NewDecoder(resp.Body).Decode(&kr); err != nil || len(kr.Keys) != 1 {
			t.Fatalf("keys: %+v, %v", kr, err)
		}
		return kr.Keys[0]
	}
	if k := read(); k.LockDelay != "5s" || len(k.Waiters) != 0 || k.LockDelayRemaining != "" {
		t.Fatalf("before any waiter: %+v", k)
	}
	go func() {
		_, _ = c.Acquire(ctx, client.AcquireRequest{Key: "delayed", Holder: "b", TTL: "1m", Wait: "1m"})
	}()
	testutil.Eventually(t, 10*time.Second, func() error {
		if k := read(); len(k.Waiters) != 1 {
			return fmt.Errorf("one acquire waits, the key says %v", k.Waiters)
		}
		return nil
	})
}
