package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/internal/testutil"
)

// silentFollower is a follower whose leader may fall silent (the follower
// stops hearing its heartbeats), as cluster.Node.LeaderSilent tells.
type silentFollower struct {
	followerStub
	silent atomic.Bool
}

func (f *silentFollower) LeaderSilent() bool { return f.silent.Load() }

// acquireThrough posts an acquire to the node at url and returns the status
// and error code of its answer; the HTTP client gives up after 20 s, long
// after any forward this test expects to end.
func acquireThrough(t *testing.T, url string) (int, string) {
	t.Helper()
	body := []byte(`{"key":"k","holder":"h","ttl":"10s","request_id":"rid-1"}`)
	hc := &http.Client{Timeout: 20 * time.Second}
	resp, err := hc.Post(url+"/v1/acquire", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("no answer from the follower: %v", err)
	}
	defer resp.Body.Close()
	var e struct {
		Code string `json:"code"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Code
}

// TestFollowerDoesNotForwardToASilentLeader: a follower that has not heard
// from its leader lately (frozen, cut off) answers at once that it knows no
// serving leader, a refusal that says nothing was done, without sending the
// request to the leader, where it would wait until raft here stands a
// candidate or the client's attempt deadline passes.
func TestFollowerDoesNotForwardToASilentLeader(t *testing.T) {
	addr, conns := testutil.FrozenListener(t)
	f := &silentFollower{followerStub: followerStub{leaderID: "n1", leaderAddr: addr}}
	f.silent.Store(true)
	srv := httptest.NewServer(NewServer(f, hclog.NewNullLogger()))
	defer srv.Close()
	status, code := acquireThrough(t, srv.URL)
	if status != http.StatusServiceUnavailable || code != "unavailable" {
		t.Fatalf("acquire through a follower whose leader is silent: %d %q, want 503 unavailable", status, code)
	}
	if n := conns(); n != 0 {
		t.Fatalf("the follower opened %d connections to its silent leader, want none", n)
	}
}

// TestForwardEndsWhenTheLeaderFallsSilent: a write forwarded to the leader
// just before it froze ends once the follower stops hearing from it, as an
// unknown outcome (it may have been applied), long before raft would stand
// a candidate here or the forward's own timeout.
func TestForwardEndsWhenTheLeaderFallsSilent(t *testing.T) {
	addr, conns := testutil.FrozenListener(t)
	f := &silentFollower{followerStub: followerStub{leaderID: "n1", leaderAddr: addr}}
	srv := httptest.NewServer(NewServer(f, hclog.NewNullLogger()))
	defer srv.Close()
	go func() {
		// The leader falls silent once the forward reached it.
		_ = testutil.Poll(10*time.Second, func() error {
			if conns() == 0 {
				return errors.New("no forward yet")
			}
			return nil
		})
		f.silent.Store(true)
	}()
	status, code := acquireThrough(t, srv.URL)
	if status != http.StatusGatewayTimeout || code != "outcome_unknown" {
		t.Fatalf("acquire forwarded to a leader that fell silent: %d %q, want 504 outcome_unknown", status, code)
	}
	if conns() == 0 {
		t.Fatal("the forward never reached the leader: the test proves nothing")
	}
}
