package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/internal/testutil"
)

// A multi-key set renewed and released as a set over HTTP through a
// follower: a set naming another's grant or a stale token is refused naming
// the key, with no grant changed; bad input is a 400 naming the field; a
// release whose answer was lost is retried with its request id, and the
// repeat, after a waiter took a key of the set, is answered with the grants
// the first one ended and leaves the waiter's grant alone.
func TestReleaseAndRenewMultiOverHTTP(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, fol := leaderOf(t, nodes)
	c := client.New([]string{fol.url})
	ctx := context.Background()
	mg, err := c.AcquireMulti(ctx, client.AcquireMultiRequest{Keys: []string{"a", "b"}, Holder: "h", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	set := mg.Refs()
	rn, err := c.RenewMulti(ctx, "h", set)
	if err != nil || len(rn.Renewed) != 2 || rn.Renewed[1].Key != "b" || rn.Renewed[1].Token != set[1].Token || rn.Renewed[1].Proof == "" {
		t.Fatalf("renew the set: %+v %v", rn, err)
	}

	stale := []client.GrantRef{set[0], {Key: "b", Token: set[1].Token + 1}}
	for _, tc := range []struct {
		name   string
		call   func() error
		want   error
		naming string
	}{
		{"renew, another holder", func() error { _, err := c.RenewMulti(ctx, "o", set); return err }, client.ErrNotHolder, `"a"`},
		{"renew, a stale token", func() error { _, err := c.RenewMulti(ctx, "h", stale); return err }, client.ErrStaleToken, `"b"`},
		{"release, another holder", func() error {
			_, err := c.ReleaseMulti(ctx, client.ReleaseMultiRequest{Keys: set, Holder: "o"})
			return err
		}, client.ErrNotHolder, `"a"`},
		{"release, a stale token", func() error {
			_, err := c.ReleaseMulti(ctx, client.ReleaseMultiRequest{Keys: stale, Holder: "h"})
			return err
		}, client.ErrStaleToken, `"b"`},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.naming) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// Bad input never reaches the log.
	applied := lead.node.FSM().Applied()
	for _, path := range []string{"/v1/release/multi", "/v1/renew/multi"} {
		for _, b := range []struct{ body, field string }{
			{`{"keys":[],"holder":"h"}`, "keys"},
			{`{"keys":[{"key":"a","token":"1"},{"key":"a","token":"2"}],"holder":"h"}`, "keys"},
			{`{"keys":[` + strings.Repeat(`{"key":"x","token":"1"},`, client.MaxMultiKeys) + `{"key":"y","token":"1"}],"holder":"h"}`, "keys"},
			{`{"keys":[{"key":"","token":"1"}],"holder":"h"}`, "keys[].key"},
			{`{"keys":[{"key":"a"}],"holder":"h"}`, "keys[].token"},
			{`{"keys":[{"key":"a","token":"1"}]}`, "holder"},
		} {
			code, m := post(t, fol.url, path, b.body)
			msg, _ := m["message"].(string)
			if code != http.StatusBadRequest || !strings.Contains(msg, b.field) {
				t.Errorf("%s %.60s: %d %v, want 400 naming %s", path, b.body, code, m, b.field)
			}
		}
	}
	if got := lead.node.FSM().Applied(); got != applied {
		t.Fatalf("bad input was proposed: applied %d -> %d", applied, got)
	}
	for _, k := range set {
		if st, _ := lead.node.FSM().Get(k.Key); st.State != fsm.Held {
			t.Fatalf("a refused set ended %s: %+v", k.Key, st)
		}
	}

	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, client.AcquireRequest{Key: "b", Holder: "w", TTL: "1m", Wait: "1m"})
		waited <- err
	}()
	testutil.Eventually(t, 10*time.Second, func() error {
		if lead.node.Status().Waiters != 1 {
			return errors.New("the waiter is not queued yet")
		}
		return nil
	})
	req := client.ReleaseMultiRequest{Keys: set, Holder: "h", RequestID: "rm-1"}
	lossy := client.New([]string{fol.url}, client.WithHTTPClient(&http.Client{Transport: &loseAnswer{next: http.DefaultTransport, path: "/v1/release/multi"}}))
	out, err := lossy.ReleaseMulti(ctx, req)
	t.Logf("a release whose first answer was lost: %+v, %v", out, err)
	if err := <-waited; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	body, _ := json.Marshal(req)
	code, m := post(t, fol.url, "/v1/release/multi", string(body))
	rel, _ := m["released"].([]any)
	if code != http.StatusOK || len(rel) != 2 {
		t.Fatalf("the repeat: %d %v", code, m)
	}
	if tok, _ := rel[1].(map[string]any)["token"].(string); tok != set[1].Token.String() {
		t.Fatalf("the repeat answers token %s for b, not the grant it ended (%s)", tok, set[1].Token)
	}
	k, err := c.Key(ctx, "b")
	if err != nil || k.State != "held" || k.Holder != "w" {
		t.Fatalf("after the repeat b is %+v, %v: the repeat ended the waiter's grant", k, err)
	}
	if k, err := c.Key(ctx, "a"); err != nil || k.State != "released" {
		t.Fatalf("a after the set's release: %+v %v", k, err)
	}
}
