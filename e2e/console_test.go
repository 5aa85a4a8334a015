package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// artifacts returns the directory the browser tests save screenshots in:
// $FENCED_ARTIFACTS when set (CI keeps it), else a temporary one.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FENCED_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser is a headless Chromium tab that records what a page must never
// do: open a dialog (alert, confirm), throw, log an error (a refused
// resource, a violation of its Content-Security-Policy).
type browser struct {
	ctx context.Context
	t   *testing.T
	dir string

	mu       sync.Mutex
	dialogs  []string
	problems []string
}

// newBrowser starts Chromium, or skips the test when there is none.
func newBrowser(t *testing.T, ctx context.Context) *browser {
	t.Helper()
	bin := chromium(t)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1360, 900))...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	b := &browser{ctx: bctx, t: t, dir: artifacts(t)}
	if err := chromedp.Listen(bctx, b.listen); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *browser) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *page.EventJavascriptDialogOpening:
		b.dialogs = append(b.dialogs, string(e.Type)+": "+e.Message)
		go func() {
			_, _ = chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}()
	case *runtime.EventExceptionThrown:
		b.problems = append(b.problems, "exception: "+e.ExceptionDetails.Text)
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError {
			b.problems = append(b.problems, "console.error")
		}
	case *log.EventEntryAdded:
		if e.Entry.Level == log.EntryLevelError {
			b.problems = append(b.problems, "log: "+e.Entry.Text+" "+e.Entry.URL)
		}
	}
}

// seen returns the dialogs and problems recorded so far.
func (b *browser) seen() (dialogs, problems []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...), append([]string(nil), b.problems...)
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

// screenshot saves the whole page as name.png in the artifacts directory.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
	return path
}

// consoleView is what the console shows, read from its DOM.
type consoleView struct {
	Main    bool   `json:"main"`
	Login   bool   `json:"login"`
	Conn    string `json:"conn"`
	Who     string `json:"who"`
	Error   string `json:"error"`
	Admin   bool   `json:"admin"`
	Members int    `json:"members"`
	Rows    []struct {
		Key     string `json:"key"`
		Shown   string `json:"shown"`
		Holder  string `json:"holder"`
		Epoch   string `json:"epoch"`
		Seq     string `json:"seq"`
		State   string `json:"state"`
		Lease   string `json:"lease"`
		Delay   string `json:"delay"`
		Waiters string `json:"waiters"`
		Value   string `json:"value"`
	} `json:"rows"`
	Feed []struct {
		Type  string `json:"type"`
		Key   string `json:"key"`
		Index string `json:"index"`
	} `json:"feed"`
	// Elements counts the elements of the page by tag name, in the keys
	// table and the feed, where names from the cluster are shown.
	Elements map[string]int `json:"elements"`
	Imgs     int            `json:"imgs"`
}

const readConsole = `(() => {
  const $ = (id) => document.getElementById(id);
  const text = (tr, sel) => { const c = tr.querySelector(sel); return c ? c.textContent : ''; };
  const elements = {};
  document.querySelectorAll('#keys *, #feed *').forEach((e) => { elements[e.tagName.toLowerCase()] = (elements[e.tagName.toLowerCase()] || 0) + 1; });
  return {
    main: !$('main').hidden, login: !$('login').hidden, conn: $('conn').textContent, who: $('whoami').textContent, error: $('error').textContent,
    admin: !$('admin-cluster').hidden, members: document.querySelectorAll('#members tbody tr').length,
    rows: [...document.querySelectorAll('#keys tbody tr')].map((tr) => ({
      key: tr.dataset.key, shown: tr.cells[0].textContent, holder: text(tr, '.holder'), epoch: text(tr, '.epoch'), seq: text(tr, '.seq'),
      state: tr.cells[4].textContent, lease: text(tr, '.lease'), delay: text(tr, '.delay'), waiters: text(tr, '.waiters'), value: text(tr, '.value') })),
    feed: [...document.querySelectorAll('#feed li')].map((li) => ({ type: li.dataset.type, key: li.dataset.key, index: li.dataset.index })),
    elements: elements, imgs: document.querySelectorAll('img').length,
  };
})()`

func (b *browser) view() consoleView {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[consoleView](readConsole))
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

// row returns the keys table's row of key.
func (v consoleView) row(key string) (int, bool) {
	for i, r := range v.Rows {
		if r.Key == key {
			return i, true
		}
	}
	return 0, false
}

// feedOf returns the feed's events of key, oldest first ("type@index").
func (v consoleView) feedOf(key string) []string {
	var out []string
	for i := len(v.Feed) - 1; i >= 0; i-- {
		if e := v.Feed[i]; e.Key == key {
			out = append(out, e.Type)
		}
	}
	return out
}

// hostileKey would run a script if the page parsed it as HTML.
const hostileKey = `<img src=x onerror=alert(1)>`

// TestConsole drives the web console of a real three-node cluster in
// Chromium: a grant made with the client shows in the keys table, with its
// lease counting down; a handoff and a release appear in the feed in
// order; a key named like markup is shown as text; and the feed goes on,
// losing and repeating nothing, when the node that serves the page is
// killed and started again.
func TestConsole(t *testing.T) {
	// The browser's context bounds every step of the test: a page that
	// never shows what a step waits for fails it instead of hanging.
	bounded, stop := context.WithTimeout(context.Background(), 8*time.Minute)
	defer stop()
	b := newBrowser(t, bounded)
	c := proccluster.StartTest(t, proccluster.Options{Nodes: 3, ExtraArgs: []string{"--cors-origins", "*"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lead, err := c.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	served := c.Nodes[0]
	if served == lead {
		served = c.Nodes[1] // a follower: its reads and watches go through the leader
	}
	// The page reads the other members at the addresses its node knows
	// when it serves it: wait until it knows them all.
	testutil.Eventually(t, time.Minute, func() error {
		st, err := client.New([]string{served.HTTPAddr}).Status(ctx)
		if err != nil {
			return err
		}
		for _, m := range st.Members {
			if m.HTTPAddr == "" {
				return fmt.Errorf("%s does not know %s's address yet", served.ID, m.ID)
			}
		}
		return nil
	})
	b.do(chromedp.Navigate(c.URL(served) + "/ui/"))
	testutil.Eventually(t, time.Minute, func() error {
		if v := b.view(); !v.Main || v.Conn != "live" || v.Members != 3 {
			return fmt.Errorf("the console is not live yet: %+v", v)
		}
		return nil
	})
	cl := c.Client()

	// A grant shows in the table, with epoch and seq apart.
	start := time.Now()
	g, err := cl.Acquire(ctx, client.AcquireRequest{Key: "orders/db", Holder: "alice", TTL: "40s", Value: "10.0.0.7:5432", LockDelay: "3s"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		v := b.view()
		i, ok := v.row("orders/db")
		if !ok {
			return fmt.Errorf("orders/db not in the table: %+v", v.Rows)
		}
		r := v.Rows[i]
		if r.Holder != "alice" || r.Epoch != fmt.Sprint(g.Epoch) || r.Seq != fmt.Sprint(g.Seq) || r.State != "held" || r.Value != "10.0.0.7:5432" || r.Delay != "3s" {
			return fmt.Errorf("orders/db shown as %+v, granted %+v", r, g)
		}
		return nil
	})
	t.Logf("the grant showed in the table %v after it was acknowledged", time.Since(start).Round(time.Millisecond))

	// The lease counts down between two reads of the page.
	lease := func() time.Duration {
		v := b.view()
		i, _ := v.row("orders/db")
		d, err := time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(v.Rows[i].Lease, "m0", "m"), "h0", "h"))
		if err != nil {
			t.Fatalf("lease shown as %q: %v", v.Rows[i].Lease, err)
		}
		return d
	}
	first := lease()
	testutil.Eventually(t, 30*time.Second, func() error {
		if now := lease(); now >= first || now <= 0 {
			return fmt.Errorf("lease shown %v, then %v", first, now)
		}
		return nil
	})

	// A handoff to a waiter, then a release, in the feed in that order.
	ga, err := cl.Acquire(ctx, client.AcquireRequest{Key: "jobs/nightly", Holder: "a", TTL: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan *client.Grant, 1)
	go func() {
		g, err := cl.Acquire(ctx, client.AcquireRequest{Key: "jobs/nightly", Holder: "b", TTL: "1m", Wait: "1m"})
		if err != nil {
			t.Error(err)
		}
		waited <- g
	}()
	testutil.Eventually(t, 30*time.Second, func() error {
		st, err := cl.Status(ctx)
		if err != nil || st.Waiters == 0 {
			return fmt.Errorf("b is not waiting yet: %v", err)
		}
		return nil
	})
	testutil.Eventually(t, 30*time.Second, func() error {
		v := b.view()
		if i, ok := v.row("jobs/nightly"); !ok || v.Rows[i].Waiters != "1" {
			return fmt.Errorf("the table does not show b waiting for jobs/nightly: %+v", v.Rows)
		}
		return nil
	})
	if _, err := cl.Release(ctx, client.ReleaseRequest{Key: "jobs/nightly", Holder: "a", Token: ga.Token}); err != nil {
		t.Fatal(err)
	}
	gb := <-waited
	if gb == nil {
		t.FailNow()
	}
	if _, err := cl.Release(ctx, client.ReleaseRequest{Key: "jobs/nightly", Holder: "b", Token: gb.Token}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		// A renewal may come between (the client retried b's acquire:
		// its own grant again).
		var got []string
		for _, e := range b.view().feedOf("jobs/nightly") {
			if e != "renewed" {
				got = append(got, e)
			}
		}
		if strings.Join(got, ",") != "granted,handed_off,released" {
			return fmt.Errorf("the feed of jobs/nightly is %q, want granted, handed_off, released", got)
		}
		return nil
	})

	// A key named like markup, with a value like a script, is text.
	if _, err := cl.Acquire(ctx, client.AcquireRequest{Key: hostileKey, Holder: "mallory", TTL: "1m", Value: "<script>alert(2)</script>"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		v := b.view()
		i, ok := v.row(hostileKey)
		if !ok {
			return fmt.Errorf("the hostile key is not in the table: %+v", v.Rows)
		}
		if v.Rows[i].Shown != hostileKey || v.Rows[i].Value != "<script>alert(2)</script>" {
			return fmt.Errorf("the hostile key is shown as %q, value %q", v.Rows[i].Shown, v.Rows[i].Value)
		}
		if n := len(v.feedOf(hostileKey)); n == 0 {
			return fmt.Errorf("the hostile key's grant is not in the feed")
		}
		return nil
	})
	v := b.view()
	if v.Imgs != 0 || v.Elements["img"] != 0 || v.Elements["script"] != 0 {
		t.Fatalf("the page made elements from a key or value: %d img, elements %v", v.Imgs, v.Elements)
	}
	b.screenshot("console")

	// The hostile key's own page shows its name as text too.
	b.do(chromedp.Navigate(c.URL(served) + "/ui/#/key/" + url.PathEscape(hostileKey)))
	testutil.Eventually(t, 30*time.Second, func() error {
		title, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById('key-title').textContent + '|' + document.querySelectorAll('#timeline li').length + '|' + document.querySelectorAll('img, script:not([src])').length`))
		if err != nil || title != hostileKey+"|1|0" {
			return fmt.Errorf("the hostile key's page: %q (title|grants|elements made), %v", title, err)
		}
		return nil
	})

	// The key's page: its grants as a timeline.
	b.do(chromedp.Navigate(c.URL(served) + "/ui/#/key/jobs%2Fnightly"))
	testutil.Eventually(t, 30*time.Second, func() error {
		n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('#timeline li').length`))
		if err != nil || n != 2 {
			return fmt.Errorf("the timeline of jobs/nightly has %d grants, want 2 (%v)", n, err)
		}
		return nil
	})
	b.screenshot("console-key")

	// Back to the table; then the node serving the page dies and comes
	// back, while grants are made through the others.
	b.do(chromedp.Navigate(c.URL(served) + "/ui/#/"))
	testutil.Eventually(t, time.Minute, func() error {
		if v := b.view(); v.Conn != "live" {
			return fmt.Errorf("the console is not live: %q", v.Conn)
		}
		return nil
	})
	c.Kill(served)
	var others []string
	for _, n := range c.Nodes {
		if n != served {
			others = append(others, n.HTTPAddr)
		}
	}
	oc := client.New(others)
	acquire := func(cl *client.Client, key string) {
		testutil.Eventually(t, time.Minute, func() error {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := cl.Acquire(actx, client.AcquireRequest{Key: key, Holder: "r", TTL: "10m"})
			return err
		})
	}
	acquire(oc, "restart/while-down")
	if err := c.StartNode(served); err != nil {
		t.Fatal(err)
	}
	acquire(cl, "restart/after")
	testutil.Eventually(t, 2*time.Minute, func() error {
		v := b.view()
		if len(v.feedOf("restart/after")) == 0 {
			return fmt.Errorf("the feed has not resumed: conn %q", v.Conn)
		}
		return nil
	})
	v = b.view()
	seen := map[string]int{}
	var resets int
	for _, e := range v.Feed {
		if e.Type == "reset" {
			resets++
			continue
		}
		seen[e.Type+" "+e.Key+" @"+e.Index]++
	}
	for ev, n := range seen {
		if n > 1 {
			t.Errorf("the feed shows %s %d times", ev, n)
		}
	}
	if got := v.feedOf("restart/while-down"); len(got) == 0 || got[0] != "granted" || strings.Count(strings.Join(got, ","), "granted") != 1 {
		t.Errorf("the grant made while the page's node was down: feed %v, want it once (resets: %d)", got, resets)
	}
	if resets != 0 {
		t.Errorf("the feed was reset %d times: history lost across the restart", resets)
	}
	// Leadership handed on from the page (authentication is off: every
	// caller may).
	before, err := c.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b.do(chromedp.Click("#transfer"))
	testutil.Eventually(t, time.Minute, func() error {
		res, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById('transfer-result').textContent`))
		if err != nil || !strings.HasPrefix(res, "leader now ") || strings.HasPrefix(res, "leader now "+before.ID) {
			return fmt.Errorf("after the transfer the page says %q (leader before: %s), %v", res, before.ID, err)
		}
		return nil
	})
	dialogs, problems := b.seen()
	if len(dialogs) > 0 {
		t.Errorf("the page opened dialogs: %q", dialogs)
	}
	// The node's restart shows as failed fetches; nothing else may.
	for _, p := range problems {
		if !strings.Contains(p, "Failed to load resource") && !strings.Contains(p, "net::ERR") {
			t.Errorf("page problem: %s", p)
		}
	}
}

// TestConsoleAsksForToken: with tokens and a key ACL on, the page without a
// token shows only the sign-in form and no data; a client's token shows
// the keys its rules let it read, without the admin actions; an admin's
// shows every key, and its forced release, confirmed in the page, ends the
// grant.
func TestConsoleAsksForToken(t *testing.T) {
	// The browser's context bounds every step of the test: a page that
	// never shows what a step waits for fails it instead of hanging.
	bounded, stop := context.WithTimeout(context.Background(), 8*time.Minute)
	defer stop()
	b := newBrowser(t, bounded)
	const adminTok, clientTok = "console-admin-token-0123", "console-client-token-0123"
	dir := t.TempDir()
	tokens, acl := filepath.Join(dir, "tokens"), filepath.Join(dir, "acl")
	if err := os.WriteFile(tokens, []byte(adminTok+" admin ops\n"+clientTok+" client app\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(acl, []byte("app lock,read,verify app/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := proccluster.StartTest(t, proccluster.Options{Nodes: 3, ExtraArgs: []string{"--auth-tokens", tokens, "--acl-file", acl},
		ClientOptions: []client.Option{client.WithBearerToken(adminTok)}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.Leader(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	if _, err := cl.Acquire(ctx, client.AcquireRequest{Key: "secret/db", Holder: "ops", TTL: "10m"}); err != nil {
		t.Fatal(err)
	}
	job, err := cl.Acquire(ctx, client.AcquireRequest{Key: "app/job", Holder: "app/worker-1", TTL: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	b.do(chromedp.Navigate(c.URL(c.Nodes[0]) + "/ui/"))
	testutil.Eventually(t, 30*time.Second, func() error {
		if v := b.view(); !v.Login || v.Main || len(v.Rows) > 0 || len(v.Feed) > 0 {
			return fmt.Errorf("without a token: %+v", v)
		}
		return nil
	})
	b.screenshot("console-login")

	// signIn signs in on the leader's console and waits for the keys
	// want; the leader is looked up again when leadership moved meanwhile
	// (its followers would not forward the signed-in requests).
	signIn := func(tok string, want ...string) consoleView {
		t.Helper()
		var v consoleView
		testutil.Eventually(t, 2*time.Minute, func() error {
			lead, err := c.Leader(ctx, 30*time.Second)
			if err != nil {
				return err
			}
			b.do(chromedp.Navigate(c.URL(lead)+"/ui/"), chromedp.WaitVisible("#token"),
				chromedp.SendKeys("#token", tok), chromedp.Click("#login-form button"))
			return testutil.Poll(20*time.Second, func() error {
				v = b.view()
				var keys []string
				for _, r := range v.Rows {
					keys = append(keys, r.Key)
				}
				if !v.Main || v.Login || v.Conn != "live" || strings.Join(keys, ",") != strings.Join(want, ",") {
					return fmt.Errorf("signed in on %s: %+v, want the keys %v", lead.ID, v, want)
				}
				return nil
			})
		})
		return v
	}
	// Without TLS between the nodes a follower does not forward a
	// signed-in request: the page says so and links to the leader.
	var follower *proccluster.Node
	testutil.Eventually(t, 2*time.Minute, func() error {
		lead, err := c.Leader(ctx, 30*time.Second)
		if err != nil {
			return err
		}
		for _, n := range c.Nodes {
			if n != lead {
				follower = n
				break
			}
		}
		b.do(chromedp.Navigate(c.URL(follower)+"/ui/"), chromedp.WaitVisible("#token"),
			chromedp.SendKeys("#token", clientTok), chromedp.Click("#login-form button"))
		return testutil.Poll(20*time.Second, func() error {
			link, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(() => { const a = document.querySelector('#notice:not([hidden]) a'); return a ? a.href : ''; })()`))
			if err != nil {
				return err
			}
			for _, n := range c.Nodes {
				if n != follower && link == c.URL(n)+"/ui/" {
					return nil
				}
			}
			return fmt.Errorf("the page on follower %s links to %q, want another node's console", follower.ID, link)
		})
	})
	if v := signIn(clientTok, "app/job"); v.Admin || v.Who != "client" {
		t.Errorf("a client identity sees the admin actions: %+v", v)
	}
	// The admin sees every key and the admin actions, and ends app/job's
	// grant from the page after confirming. When leadership moved away
	// from the page's node meanwhile (its followers do not forward a
	// signed-in request), the page says so: sign in on the new leader and
	// try again.
	testutil.Eventually(t, 3*time.Minute, func() error {
		if k, err := cl.Key(ctx, "app/job"); err == nil && k.State != "held" {
			// An earlier attempt ended it after all: its feed said so,
			// or the check below fails for good.
			if got := b.view().feedOf("app/job"); len(got) == 0 || got[len(got)-1] != "force_released" {
				t.Fatalf("app/job was released (%+v) but the page's feed shows %v", k, got)
			}
			return nil
		}
		if v := signIn(adminTok, "app/job", "secret/db"); !v.Admin || v.Who != "admin" {
			t.Fatalf("an admin identity does not see the admin actions: %+v", v)
		}
		b.do(chromedp.Click(`#keys tbody tr[data-key="app/job"] button.force`), chromedp.WaitVisible("#confirm"))
		text, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById('confirm-text').textContent`))
		if err != nil || !strings.Contains(text, "app/worker-1") || !strings.Contains(text, fmt.Sprintf("epoch %d seq %d", job.Epoch, job.Seq)) {
			t.Fatalf("the confirmation says %q (%v): it should name the holder and the token", text, err)
		}
		b.do(chromedp.Click("#confirm-yes"))
		return testutil.Poll(20*time.Second, func() error {
			k, err := cl.Key(ctx, "app/job")
			if err != nil || k.State != "released" {
				return fmt.Errorf("app/job after the forced release: %+v %v (the page says %q)", k, err, b.view().Error)
			}
			if got := b.view().feedOf("app/job"); len(got) == 0 || got[len(got)-1] != "force_released" {
				return fmt.Errorf("the feed of app/job: %v", got)
			}
			return nil
		})
	})
	dialogs, problems := b.seen()
	if len(dialogs) > 0 {
		t.Errorf("the page opened dialogs: %q", dialogs)
	}
	for _, p := range problems {
		// Signing in asks an admin route whether the identity is an
		// admin: a client's 403 is logged.
		// A follower's refusal to forward is logged too.
		if !strings.Contains(p, "status of 401") && !(strings.Contains(p, "status of 403 (Forbidden) ") && strings.HasSuffix(p, "/v1/acl/check")) &&
			!strings.Contains(p, "status of 503 (Service Unavailable)") {
			t.Errorf("page problem: %s", p)
		}
	}
}
