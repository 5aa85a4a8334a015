package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
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
		Shape   string `json:"shape"`
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
      key: tr.dataset.key, shown: tr.cells[0].textContent, shape: text(tr, '.shape'), holder: text(tr, '.holder'), epoch: text(tr, '.epoch'), seq: text(tr, '.seq'),
      state: text(tr, '.state'), lease: text(tr, '.lease'), delay: text(tr, '.delay'), waiters: text(tr, '.waiters'), value: text(tr, '.value') })),
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

// keyPage is what a key's page shows, read from its DOM.
type keyPage struct {
	Title string `json:"title"`
	// Detail is the summary, by label.
	Detail map[string]string `json:"detail"`
	Grants []struct {
		Token  string `json:"token"`
		Holder string `json:"holder"`
		Mode   string `json:"mode"`
		Epoch  string `json:"epoch"`
		Seq    string `json:"seq"`
		TTL    string `json:"ttl"`
		Lease  string `json:"lease"`
		// Kept is the mark the test put on the row: the page kept that
		// row's element instead of drawing it again.
		Kept bool `json:"kept"`
	} `json:"grants"`
	Waiters []string `json:"waiters"`
	// Steps is the grant history: each grant's token and its steps.
	Steps map[string][]string `json:"steps"`
	// Synced says the page's watch of the key is current: what changes
	// now reaches the page as events.
	Synced bool `json:"synced"`
}

const readKeyPage = `(() => {
  const text = (tr, sel) => { const c = tr.querySelector(sel); return c ? c.textContent : ''; };
  const detail = {};
  const dl = document.getElementById('key-detail');
  [...dl.querySelectorAll('dt')].forEach((dt) => { detail[dt.textContent] = dt.nextElementSibling ? dt.nextElementSibling.textContent : ''; });
  const steps = {};
  document.querySelectorAll('#timeline li').forEach((li) => { steps[li.dataset.token] = [...li.querySelectorAll('.step')].map((s) => s.textContent.replace(/ @[0-9]+$/, '')); });
  return {
    title: document.getElementById('key-view').hidden ? '' : document.getElementById('key-title').textContent,
    detail: detail,
    grants: [...document.querySelectorAll('#grants tbody tr')].map((tr) => ({
      token: tr.dataset.token, holder: text(tr, '.holder'), mode: text(tr, '.mode'), epoch: text(tr, '.epoch'), seq: text(tr, '.seq'),
      ttl: text(tr, '.ttl'), lease: text(tr, '.lease'), kept: tr.dataset.testMark === 'kept' })),
    waiters: [...document.querySelectorAll('#key-waiters li')].map((li) => li.textContent),
    steps: steps,
    synced: document.getElementById('key-view').dataset.synced === 'true',
  };
})()`

func (b *browser) keyPage() keyPage {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[keyPage](readKeyPage))
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

	// The shapes: a semaphore of 3 with 2 permits taken, and a key held
	// shared by four readers, a writer waiting behind them. The table
	// gives each its shape, not one holder's grant as if it were a lock.
	var permits []*client.Grant
	for _, h := range []string{"w1", "w2"} {
		g, err := cl.Acquire(ctx, client.AcquireRequest{Key: "pool/workers", Holder: h, TTL: "10m", Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, g)
	}
	var readers []*client.Grant
	for i := 1; i <= 4; i++ {
		g, err := cl.Acquire(ctx, client.AcquireRequest{Key: "config/doc", Holder: fmt.Sprintf("reader-%d", i), TTL: "10m", Mode: client.ModeShared})
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, g)
	}
	wctx, stopWriter := context.WithCancel(ctx)
	writerDone := make(chan error, 1)
	go func() {
		_, err := cl.Acquire(wctx, client.AcquireRequest{Key: "config/doc", Holder: "writer", TTL: "1m", Wait: "4m"})
		writerDone <- err
	}()
	stopWaiting := func() {
		stopWriter()
		if err := <-writerDone; !errors.Is(err, context.Canceled) {
			t.Errorf("the writer waiting behind the readers: %v, want it still waiting until cancelled", err)
		}
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		select {
		case err := <-writerDone:
			t.Fatalf("the writer stopped waiting behind the readers: %v", err)
		default:
		}
		v := b.view()
		for key, want := range map[string][4]string{
			"pool/workers": {"2/3 permits", "2 holders", "held", "0"},
			"config/doc":   {"shared ×4", "4 holders", "held", "1"},
			"orders/db":    {"lock", "alice", "held", "0"},
		} {
			i, ok := v.row(key)
			if !ok {
				return fmt.Errorf("%s not in the table: %+v", key, v.Rows)
			}
			r := v.Rows[i]
			if got := [4]string{r.Shape, r.Holder, r.State, r.Waiters}; got != want {
				return fmt.Errorf("%s shown as shape, holder, state, waiters %q, want %q", key, got, want)
			}
		}
		return nil
	})
	b.screenshot("console")

	// The shared key's page: each reader's grant with its own token, and
	// the writer waiting.
	b.do(chromedp.Navigate(c.URL(served) + "/ui/#/key/config%2Fdoc"))
	testutil.Eventually(t, 30*time.Second, func() error {
		p := b.keyPage()
		var got, want []string
		for _, g := range p.Grants {
			got = append(got, g.Holder+" "+g.Mode+" "+g.Token+" "+g.TTL)
		}
		for _, g := range readers {
			want = append(want, g.Holder+" shared "+g.Token.String()+" 10m0s")
		}
		if p.Title != "config/doc" || p.Detail["live grants"] != "4" || !strings.HasPrefix(p.Detail["shape"], "shared") ||
			!slices.Equal(got, want) || !slices.Equal(p.Waiters, []string{"writer"}) {
			return fmt.Errorf("config/doc's page: %+v\ngrants %q, want %q", p, got, want)
		}
		return nil
	})
	b.screenshot("console-shapes")
	stopWaiting()

	// The semaphore's page: its two permits, each its own row. Releasing
	// one removes that permit's row and keeps the other's (the page marks
	// it: the mark stays only if the row is updated, not drawn again).
	b.do(chromedp.Navigate(c.URL(served) + "/ui/#/key/pool%2Fworkers"))
	permitRows := func(p keyPage) []string {
		var out []string
		for _, g := range p.Grants {
			s := g.Holder + " " + g.Mode + " " + g.Token + " epoch " + g.Epoch + " seq " + g.Seq
			if g.Kept {
				s += " (kept)"
			}
			out = append(out, s)
		}
		return out
	}
	rowOf := func(g *client.Grant) string {
		return fmt.Sprintf("%s permit %s epoch %d seq %d", g.Holder, g.Token, g.Epoch, g.Seq)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		p := b.keyPage()
		if !p.Synced {
			return fmt.Errorf("pool/workers' page does not watch the key yet")
		}
		if got, want := permitRows(p), []string{rowOf(permits[0]), rowOf(permits[1])}; p.Title != "pool/workers" ||
			p.Detail["shape"] != "semaphore of 3 permits" || p.Detail["live grants"] != "2 of 3" || !slices.Equal(got, want) || len(p.Waiters) != 0 {
			return fmt.Errorf("pool/workers' page: %+v\ngrants %q, want %q", p, got, want)
		}
		for _, g := range p.Grants {
			if g.Lease == "" || g.Lease == "–" {
				return fmt.Errorf("permit %s shows no lease left: %q", g.Token, g.Lease)
			}
		}
		return nil
	})
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](fmt.Sprintf(
		`(() => { const tr = document.querySelector('#grants tbody tr[data-token="%s"]'); if (tr) tr.dataset.testMark = 'kept'; return !!tr; })()`, permits[1].Token))); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Release(ctx, client.ReleaseRequest{Key: "pool/workers", Holder: "w1", Token: permits[0].Token}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		p := b.keyPage()
		if got, want := permitRows(p), []string{rowOf(permits[1]) + " (kept)"}; !slices.Equal(got, want) || p.Detail["live grants"] != "1 of 3" {
			return fmt.Errorf("after w1's release, pool/workers' page: %+v\ngrants %q, want %q", p, got, want)
		}
		if steps := p.Steps[permits[0].Token.String()]; !slices.Equal(steps, []string{"granted", "released"}) {
			return fmt.Errorf("w1's permit's history: %q, want granted, released", steps)
		}
		if steps := p.Steps[permits[1].Token.String()]; !slices.Equal(steps, []string{"granted"}) {
			return fmt.Errorf("w2's permit's history: %q, want granted", steps)
		}
		return nil
	})
	// A new permit adds its row beside w2's, which stays as it was (a
	// lock's grant would have replaced it).
	w3, err := cl.Acquire(ctx, client.AcquireRequest{Key: "pool/workers", Holder: "w3", TTL: "10m", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		p := b.keyPage()
		if got, want := permitRows(p), []string{rowOf(permits[1]) + " (kept)", rowOf(w3)}; !slices.Equal(got, want) || p.Detail["live grants"] != "2 of 3" {
			return fmt.Errorf("after w3's acquire, pool/workers' page: %+v\ngrants %q, want %q", p, got, want)
		}
		return nil
	})

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
		// A released lock: no live grant, nothing left of the page
		// shown before.
		if p := b.keyPage(); p.Detail["shape"] != "lock" || p.Detail["holder"] != "b" || p.Detail["state"] != "released" || len(p.Grants) != 0 || len(p.Waiters) != 0 {
			return fmt.Errorf("jobs/nightly's page: %+v", p)
		}
		return nil
	})
	b.screenshot("console-key")

	// Back to the table; then the node serving the page dies and comes
	// back, while grants are made through the others.
	b.do(chromedp.Navigate(c.URL(served) + "/ui/#/"))
	testutil.Eventually(t, time.Minute, func() error {
		v := b.view()
		if v.Conn != "live" {
			return fmt.Errorf("the console is not live: %q", v.Conn)
		}
		if i, ok := v.row("pool/workers"); !ok || v.Rows[i].Shape != "2/3 permits" || v.Rows[i].Holder != "2 holders" {
			return fmt.Errorf("pool/workers after a release: %+v", v.Rows)
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
		// A follower's refusal to forward is logged too, and so is
		// another member's refusal to let this page read its status: these
		// nodes run without --cors-origins, and the page knows a member's
		// origin once that member led (it records its HTTP address when it
		// does), which an election while the cluster starts can make so.
		if !strings.Contains(p, "status of 401") && !(strings.Contains(p, "status of 403 (Forbidden) ") && strings.HasSuffix(p, "/v1/acl/check")) &&
			!strings.Contains(p, "status of 503 (Service Unavailable)") && !memberStatusRefused(p) {
			t.Errorf("page problem: %s", p)
		}
	}
}

// memberStatusRefused reports whether a page problem is the browser's
// refusal of another member's status (GET /v1/cluster of another origin),
// which the node refuses without --cors-origins: the page then shows the
// member without its own figures.
func memberStatusRefused(p string) bool {
	return strings.Contains(p, "/v1/cluster' from origin ") && strings.Contains(p, "blocked by CORS policy") ||
		strings.Contains(p, "net::ERR_FAILED") && strings.HasSuffix(p, "/v1/cluster")
}
