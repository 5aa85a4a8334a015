package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// A removed node never adds itself back: not while it runs (its announce loop
// used to rejoin a second after the removal), not after a restart with the
// same data dir (it used to rejoin through its old peers). It says so in its
// log and answers requests that need the cluster with 503 not_member at once,
// while /healthz stays up and /readyz fails. An operator can add it back.
func TestRemovedNodeStaysRemoved(t *testing.T) {
	c := startOpsCluster(t, 3)
	n1, n2, n3 := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	original := httpAddrs(n1, n2, n3)
	if _, err := c.Leader(context.Background(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	n4, err := c.AddNode("n4", "--join", n1.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	awaitVoters(t, original, "n1", "n2", "n3", "n4")
	// n4 itself must have seen the configuration with itself in it, and
	// recorded that it is a member (it logs it): only a node that was a
	// member can be removed, rather than still be joining.
	testutil.Eventually(t, 30*time.Second, func() error {
		logs, err := os.ReadFile(n4.LogPath)
		if err != nil {
			return err
		}
		if !strings.Contains(string(logs), "this node is a member of the cluster") {
			return errors.New("n4 has not seen itself in the configuration yet")
		}
		return nil
	})
	var removed struct {
		Voters int `json:"voters"`
	}
	fencectlJSON(t, original, &removed, "members", "remove", "n4")
	if removed.Voters != 3 {
		t.Fatalf("members remove n4: %+v", removed)
	}
	staysRemoved(t, original, n4)
	answersNotMember(t, n4)

	// A restart with the same data dir does not announce it either.
	c.Kill(n4)
	if err := c.StartNode(n4); err != nil {
		t.Fatal(err)
	}
	staysRemoved(t, original, n4)
	answersNotMember(t, n4)
	logs, err := os.ReadFile(n4.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "removed from the cluster") {
		t.Fatalf("n4's log does not say it was removed:\n%s", logLines(string(logs), 40))
	}

	// Adding it back is an operator's act, and then it serves again.
	fencectlJSON(t, original, &removed, "members", "add", "n4", n4.RaftAddr, "--http", n4.HTTPAddr)
	awaitVoters(t, original, "n1", "n2", "n3", "n4")
	via4 := client.New([]string{n4.HTTPAddr})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := via4.Acquire(ctx, client.AcquireRequest{Key: "back", Holder: "h", TTL: "10s"}); err != nil {
		t.Fatalf("acquire through n4 after it was added back: %v", err)
	}
}

// staysRemoved watches, through the remaining members, that n stays out of
// the configuration across several of its announce intervals (one second).
func staysRemoved(t *testing.T, endpoints []string, n *proccluster.Node) {
	t.Helper()
	end := time.Now().Add(5 * time.Second)
	for looks := 0; looks < 5 || time.Now().Before(end); looks++ {
		code, stdout, stderr := fencectl(t, endpoints, "members", "list", "-o", "json")
		if code != 0 {
			t.Logf("members list: exit %d: %s", code, stderr)
		} else {
			var v membersView
			if err := json.Unmarshal([]byte(stdout), &v); err != nil {
				t.Fatal(err)
			}
			for _, m := range v.Members {
				if m.ID == n.ID {
					t.Fatalf("%s is a member again (voter %v) after it was removed; its log:\n%s", n.ID, m.Voter, logLines(readNodeLog(n), 15))
				}
			}
		}
		time.Sleep(250 * time.Millisecond) // pacing between observations, not a wait for a condition
	}
}

// answersNotMember checks n's API: a request that needs the cluster gets 503
// not_member (no timeout, no forwarding), /healthz is up, /readyz fails.
func answersNotMember(t *testing.T, n *proccluster.Node) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second} // a request that hangs is the bug
	base := "http://" + n.HTTPAddr
	testutil.Eventually(t, 20*time.Second, func() error {
		body := bytes.NewReader([]byte(`{"key":"k","holder":"h","ttl":"5s"}`))
		resp, err := hc.Post(base+"/v1/acquire", "application/json", body)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e client.ErrorResponse
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != http.StatusServiceUnavailable || e.Code != "not_member" {
			return fmt.Errorf("acquire on %s: %d %s", n.ID, resp.StatusCode, b)
		}
		if !errors.Is(&client.Error{Status: resp.StatusCode, ErrorResponse: e}, client.ErrNotMember) {
			return fmt.Errorf("not_member does not unwrap to client.ErrNotMember")
		}
		return nil
	})
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatalf("%s on %s: %v", path, n.ID, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s on removed %s: %d, want %d", path, n.ID, resp.StatusCode, want)
		}
	}
}

func readNodeLog(n *proccluster.Node) string {
	b, _ := os.ReadFile(n.LogPath)
	return string(b)
}

func logLines(s string, lines int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
