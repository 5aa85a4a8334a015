package report

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// TestSummaryInChromium loads a synthetic run's summary in headless
// Chromium: it renders without an error, and its plots have one band per
// fault. A screenshot is saved in $FENCED_ARTIFACTS (a temporary directory
// when unset).
func TestSummaryInChromium(t *testing.T) {
	var bin string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("no Chromium found (on Debian: apt-get install -y chromium)")
	}
	ops, faults := synthetic()
	dir := t.TempDir()
	if err := WriteSummary(dir, Summary{Title: "synthetic run", Ops: ops, Faults: faults, Duration: "20s"}); err != nil {
		t.Fatal(err)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1200, 900))...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+e.ExceptionDetails.Text)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				problems = append(problems, "console.error")
			}
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError {
				problems = append(problems, e.Entry.Text+" "+e.Entry.URL)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+filepath.Join(dir, "summary.html")), chromedp.WaitVisible("#throughput")); err != nil {
		t.Fatal(err)
	}
	type bands struct {
		Latency    int `json:"latency"`
		Throughput int `json:"throughput"`
		Gaps       int `json:"gaps"`
		Width      int `json:"width"`
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[bands](`({
		latency: document.querySelectorAll('svg#latency rect.fault').length,
		throughput: document.querySelectorAll('svg#throughput rect.fault').length,
		gaps: document.querySelectorAll('svg#throughput rect.gap').length,
		width: Math.round(document.querySelector('svg#latency').getBoundingClientRect().width),
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Latency != len(faults) || got.Throughput != len(faults) || got.Gaps != 4 || got.Width == 0 {
		t.Errorf("the plots as rendered: %+v, want %d fault bands each and 4 clients' gaps", got, len(faults))
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("FENCED_ARTIFACTS")
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "chaos-report.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("the summary in Chromium: %s", p)
	}
}
