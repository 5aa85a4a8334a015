package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// watchPage is a page of another origin that watches a node with the
// browser's own EventSource and keeps what it heard in window.heard.
const watchPage = `<!doctype html>
<html><body><script>
window.heard = {granted: [], unavailable: 0, errors: 0, closed: false, lastId: "", opened: 0, synced: 0};
const es = new EventSource(new URLSearchParams(location.search).get("watch"));
es.addEventListener("granted", e => {
  window.heard.granted.push(JSON.parse(e.data).key);
  window.heard.lastId = e.lastEventId;
});
es.addEventListener("unavailable", e => { window.heard.unavailable++; });
es.onopen = () => { window.heard.opened++; };
es.addEventListener("sync", e => { window.heard.synced++; });
es.onerror = () => {
  window.heard.errors++;
  // An EventSource that got an answer it cannot use stops for good.
  if (es.readyState === EventSource.CLOSED) window.heard.closed = true;
};
</script></body></html>`

// heard is what the page reports.
type heard struct {
	Granted     []string `json:"granted"`
	Unavailable int      `json:"unavailable"`
	Errors      int      `json:"errors"`
	Closed      bool     `json:"closed"`
	LastID      string   `json:"lastId"`
	Opened      int      `json:"opened"`
	Synced      int      `json:"synced"`
}

// chromium returns the path of a Chromium binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium found (on Debian: apt-get install -y chromium); the browser test needs a real EventSource")
	return ""
}

// TestBrowserEventSourceSurvivesLeaderKillAndQuorumLoss: a page of another
// origin (allowed by --cors-origins) watches a follower with a real
// browser's EventSource. The leader is killed, then quorum is lost and
// found again: the node answers what it cannot serve in a way EventSource
// retries (never a status that ends it for good), and the page goes on
// receiving the grants made after each.
func TestBrowserEventSourceSurvivesLeaderKillAndQuorumLoss(t *testing.T) {
	bin := chromium(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(watchPage))
	}))
	defer page.Close()
	c := proccluster.StartTest(t, proccluster.Options{Nodes: 3, ExtraArgs: []string{"--cors-origins", page.URL}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	lead, err := c.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var watched, other *proccluster.Node
	for _, n := range c.Nodes {
		switch {
		case n == lead:
		case watched == nil:
			watched = n
		default:
			other = n
		}
	}

	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	watchURL := c.URL(watched) + "/v1/watch?prefix=b/&progress=1s"
	if _, err := chromedp.Run(bctx, chromedp.Navigate(page.URL+"/?watch="+url.QueryEscape(watchURL))); err != nil {
		t.Fatal(err)
	}
	read := func() heard {
		t.Helper()
		h, err := chromedp.Run(bctx, chromedp.Evaluate[heard](`window.heard`))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// waitGrant grants key through the nodes given and waits until the
	// page heard it.
	waitGrant := func(key string, through ...*proccluster.Node) {
		t.Helper()
		var eps []string
		for _, n := range through {
			eps = append(eps, n.HTTPAddr)
		}
		cl := client.New(eps)
		testutil.Eventually(t, time.Minute, func() error {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := cl.Acquire(actx, client.AcquireRequest{Key: key, Holder: "h", TTL: "1h"})
			return err
		})
		testutil.Eventually(t, time.Minute, func() error {
			h := read()
			if h.Closed {
				t.Fatalf("the page's EventSource stopped for good: %+v", h)
			}
			for _, k := range h.Granted {
				if k == key {
					return nil
				}
			}
			return fmt.Errorf("the page has not heard %s: %+v", key, h)
		})
	}
	// The stream started (its first sync): what comes next are changes.
	testutil.Eventually(t, time.Minute, func() error {
		if h := read(); h.Synced == 0 {
			return fmt.Errorf("the page's stream has not started: %+v", h)
		}
		return nil
	})
	waitGrant("b/0", c.Nodes...)

	// The leader dies: the follower's stream ends, and until a new leader
	// is ready it cannot serve one.
	c.Kill(lead)
	waitGrant("b/1", watched, other)

	// Quorum lost: the watched node alone serves nothing for a while.
	c.Kill(other)
	testutil.Eventually(t, time.Minute, func() error {
		h := read()
		if h.Closed {
			t.Fatalf("the page's EventSource stopped for good: %+v", h)
		}
		if h.Unavailable == 0 {
			return fmt.Errorf("the node has not yet said it cannot serve: %+v", h)
		}
		return nil
	})
	if err := c.StartNode(other); err != nil {
		t.Fatal(err)
	}
	if err := c.StartNode(lead); err != nil {
		t.Fatal(err)
	}
	waitGrant("b/2", c.Nodes...)
	h := read()
	if h.Closed || strings.Join(h.Granted, ",") != "b/0,b/1,b/2" {
		t.Fatalf("the page heard %+v, want b/0, b/1 and b/2 once each", h)
	}
	t.Logf("the page heard %v through %d reconnections, %d of them told the node could not serve yet", h.Granted, h.Errors, h.Unavailable)
}
