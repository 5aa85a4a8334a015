package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
)

// streamUntil reads a raw watch stream until the event pred accepts, and returns
// the last id seen by then.
func streamUntil(t *testing.T, body io.Reader, pred func(id, name string, data []byte) bool) (last string) {
	t.Helper()
	err := readSSE(body, func(id, name string, data []byte) error {
		if id != "" {
			last = id
		}
		if pred(id, name, data) {
			return io.EOF
		}
		return nil
	})
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended: %v", err)
	}
	return last
}

// resumeStatus asks url for a watch from index and returns the status and
// the first event (or the error code) it answers with.
func resumeStatus(t *testing.T, url string, from string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/watch", nil)
	req.Header.Set("Last-Event-ID", from)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var er client.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&er)
		return resp.StatusCode, er.Code
	}
	var first string
	_ = readSSE(resp.Body, func(id, name string, data []byte) error {
		first = name + " " + id
		return io.EOF
	})
	return resp.StatusCode, first
}

// TestResumeAcrossABackupRestoreIsRefused: a watcher that saw the state up
// to the moment a backup was restored, and resumes from there (on any
// node), is refused (410 compacted): the state after that index was
// replaced by the restore, and no event says how. A fresh watch after the
// restore, and a resume from its own ids, are served.
func TestResumeAcrossABackupRestoreIsRefused(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, _ := leaderOf(t, nodes)
	c := client.New([]string{lead.url})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "r/a", Holder: "h", TTL: "1h"}); err != nil {
		t.Fatal(err)
	}
	data, _, err := c.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "r/b", Holder: "h", TTL: "1h"}); err != nil {
		t.Fatal(err)
	}
	// A watcher quiet at the newest index when the restore comes.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, lead.url+"/v1/watch?prefix=r/&progress=100ms", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	seen := streamUntil(t, resp.Body, func(_, name string, _ []byte) bool { return name == client.WatchSync })
	if _, err := c.Restore(ctx, data, 0, 0); err != nil {
		t.Fatal(err)
	}
	if id := streamUntil(t, resp.Body, func(_, name string, _ []byte) bool { return name == client.WatchReset }); id != "" {
		seen = id
	}
	for _, n := range nodes {
		testutil.Eventually(t, 30*time.Second, func() error {
			status, got := resumeStatus(t, n.url, seen)
			switch {
			case status == http.StatusServiceUnavailable:
				return fmt.Errorf("%s not serving yet", n.url)
			case status != http.StatusGone || got != "compacted":
				t.Fatalf("%s: a resume from %s, the watcher's last id before the restore: %d %s, want 410 compacted", n.url, seen, status, got)
			}
			return nil
		})
	}
	// A fresh watch serves the restored state; a resume from its sync is
	// served.
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, lead.url+"/v1/watch?prefix=r/", nil)
	fresh, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Body.Close()
	var states int
	sync := streamUntil(t, fresh.Body, func(_, name string, _ []byte) bool {
		if name == client.WatchState {
			states++
		}
		return name == client.WatchSync
	})
	if states != 1 {
		t.Fatalf("fresh watch after the restore: %d states, want the backup's one key", states)
	}
	if n, _ := strconv.ParseUint(sync, 10, 64); n <= mustIndex(t, seen) {
		t.Fatalf("the restored state's sync %s is not after the last id %s before the restore", sync, seen)
	}
	if status, got := resumeStatus(t, lead.url, sync); status != http.StatusOK || got != "sync "+sync {
		t.Fatalf("resume from the fresh watch's sync %s: %d %q", sync, status, got)
	}
}

// TestResumeFromAFutureIndexIsRefused: a resume from an index the cluster
// has not reached (an id kept from another cluster, or from before a
// restore) is refused (410 compacted) on every node, never answered with a
// sync that claims the stream is current there; a resume from an index the
// leader reached but a follower may not have applied yet is served by the
// follower once it applied it.
func TestResumeFromAFutureIndexIsRefused(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, fol := leaderOf(t, nodes)
	c := client.New([]string{lead.url})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, n := range nodes {
		for _, h := range [][2]string{{"Last-Event-ID", "999999"}, {"", "999999"}} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.url+"/v1/watch?key=f", nil)
			if h[0] != "" {
				req.Header.Set(h[0], h[1])
			} else {
				req.URL.RawQuery += "&from=" + h[1]
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var er client.ErrorResponse
			if resp.StatusCode == http.StatusOK {
				first := streamUntil(t, resp.Body, func(string, string, []byte) bool { return true })
				resp.Body.Close()
				t.Fatalf("%s: a resume from 999999 answered 200, first id %s", n.url, first)
			}
			_ = json.NewDecoder(resp.Body).Decode(&er)
			resp.Body.Close()
			if resp.StatusCode != http.StatusGone || er.Code != "compacted" {
				t.Fatalf("%s: a resume from 999999: %d %+v, want 410 compacted", n.url, resp.StatusCode, er)
			}
		}
	}
	// The Go client resyncs.
	evs := collect(t, c.Watch(ctx, client.WatchOptions{Key: "f", From: 999999}), 30*time.Second, hasSync)
	if evs[0].Type != client.WatchReset || evs[0].Reason != "compacted" || evs[len(evs)-1].Index >= 999999 {
		t.Fatalf("the Go client from 999999: %+v", evs)
	}
	// Ids the leader just served, resumed at once on a follower.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, lead.url+"/v1/watch?key=f", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	streamUntil(t, resp.Body, func(_, name string, _ []byte) bool { return name == client.WatchSync })
	for i := 0; i < 10; i++ {
		if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "f", Holder: "h", TTL: fmt.Sprintf("%ds", 10+i)}); err != nil {
			t.Fatal(err)
		}
		id := streamUntil(t, resp.Body, func(id, _ string, _ []byte) bool { return id != "" })
		if status, got := resumeStatus(t, fol.url, id); status != http.StatusOK || got == "" {
			t.Fatalf("a follower asked to resume from %s, which the leader served: %d %q", id, status, got)
		} else if n := mustIndex(t, got[len("sync "):]); n < mustIndex(t, id) {
			t.Fatalf("the follower resumed from %s with %q", id, got)
		}
	}
	// A blocking read from such an index answers at once (within the
	// test's deadline, not its 5 minutes) with the current index.
	kctx, kcancel := context.WithTimeout(ctx, 30*time.Second)
	defer kcancel()
	if k, err := client.New([]string{fol.url}).KeyWait(kctx, "f", 999999, client.MaxWait); err != nil || k.WatchIndex >= 999999 {
		t.Fatalf("a blocking read from 999999: %+v %v", k, err)
	}
}
