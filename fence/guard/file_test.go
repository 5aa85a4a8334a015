package guard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/fence"
)

const (
	helperDirEnv      = "FENCED_GUARD_HELPER_DIR"
	helperResourceEnv = "FENCED_GUARD_HELPER_RESOURCE"
	crashKey          = "crash/key"
)

// TestHelperProcess is the child of TestFileCrash, not a test of its own. It
// admits increasing tokens for crashKey, appending each to a resource file
// inside AdmitFunc, and prints "admitted N" after each AdmitFunc returns nil,
// until it is killed.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("child process of TestFileCrash")
	}
	fail := func(err error) {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	g, err := OpenFile(dir)
	if err != nil {
		fail(err)
	}
	res, err := os.OpenFile(os.Getenv(helperResourceEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	h, err := g.Highest(ctx, crashKey)
	if err != nil {
		fail(err)
	}
	// Bounded, in case the parent vanishes without killing us (a write to a
	// closed stdout pipe would end us too).
	for seq := h.Seq() + 1; seq < h.Seq()+100_000; seq++ {
		tok := fence.Token(1<<32 | seq)
		err := g.AdmitFunc(ctx, crashKey, tok, func() error {
			_, err := fmt.Fprintf(res, "%d\n", tok)
			return err
		})
		if err != nil {
			fail(err)
		}
		fmt.Printf("admitted %d\n", tok)
	}
	os.Exit(0)
}

// TestFileCrash kills a process that is admitting tokens at a random point
// (SIGKILL, so nothing is flushed or unwound) and checks what a new process
// finds: every token the child reported admitted is at most Highest, Highest
// is at most one beyond the last reported (the one admitted but not yet
// printed), the record is readable, the resource never holds a write with a
// token above Highest, and a token below the last reported one is refused.
//
// A SIGKILL keeps the page cache, so this shows the record is replaced
// atomically and checked before the write; the fsyncs that protect against
// power loss cannot be observed without cutting power.
func TestFileCrash(t *testing.T) {
	dir := t.TempDir()
	resource := filepath.Join(t.TempDir(), "resource")
	ctx := context.Background()
	var prev fence.Token
	for round := range 5 {
		reported := runCrashChild(t, dir, resource, 2+7*round)
		top := reported[len(reported)-1]
		if reported[0] <= prev {
			t.Fatalf("round %d: child admitted %s after %s was admitted", round, reported[0], prev)
		}

		g, err := OpenFile(dir)
		if err != nil {
			t.Fatal(err)
		}
		h, err := g.Highest(ctx, crashKey)
		if err != nil {
			t.Fatalf("round %d: record unreadable after crash: %v", round, err)
		}
		if h < top || h > top+1 {
			t.Fatalf("round %d: Highest %s after the child reported %s admitted", round, h, top)
		}
		for _, w := range readResource(t, resource) {
			if w > h {
				t.Fatalf("round %d: the resource holds a write with %s above Highest %s", round, w, h)
			}
		}
		lower := reported[len(reported)-2]
		if err := g.Admit(ctx, crashKey, lower); !errors.Is(err, ErrStale) {
			t.Fatalf("round %d: Admit(%s) below the reported %s = %v, want ErrStale", round, lower, top, err)
		}
		if err := g.Admit(ctx, crashKey, h); err != nil {
			t.Fatalf("round %d: Admit(%s) equal to Highest = %v", round, h, err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: child reported %d tokens up to %s, Highest %s", round, len(reported), top, h)
		prev = h
	}
}

// runCrashChild starts TestHelperProcess, kills it once it has reported
// killAfter admissions, and returns every token it reported.
func runCrashChild(t *testing.T, dir, resource string, killAfter int) []fence.Token {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, helperResourceEnv+"="+resource)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() // on an early Fatal; a no-op once it is reaped
	var reported []fence.Token
	var other []string
	sc := bufio.NewScanner(out)
	for sc.Scan() { // reads on after the kill: the pipe keeps what was printed
		line := sc.Text()
		s, ok := strings.CutPrefix(line, "admitted ")
		if !ok {
			other = append(other, line)
			continue
		}
		tok, err := fence.Parse(s)
		if err != nil {
			t.Fatalf("child printed %q: %v", line, err)
		}
		if n := len(reported); n > 0 && tok != reported[n-1]+1 {
			t.Fatalf("child reported %s after %s", tok, reported[n-1])
		}
		if reported = append(reported, tok); len(reported) == killAfter {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v\nstdout: %q\nstderr: %s", err, other, stderr.String())
	}
	if len(reported) < killAfter {
		t.Fatalf("child reported %d admissions, want at least %d", len(reported), killAfter)
	}
	return reported
}

// readResource returns the tokens of the writes in the crash test's resource;
// a line cut short by the kill is ignored.
func readResource(t *testing.T, path string) []fence.Token {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var toks []fence.Token
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if s, ok := strings.CutSuffix(line, "\n"); ok {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("resource line %q: %v", line, err)
			}
			toks = append(toks, fence.Token(v))
		}
	}
	return toks
}

func TestFileKeyNames(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	dir := filepath.Join(parent, "fences")
	g := openFile(t, dir)
	long := strings.Repeat("x", 10_000)
	keys := []string{
		"a", "A", ".", "..", "../escape", "/abs/path", "nul\x00byte", "ünï", "a b\tc\n",
		strings.Repeat("k", maxPlainKey), strings.Repeat("k", maxPlainKey+1),
		long, long[:len(long)-1] + "y",
	}
	for i, key := range keys {
		if err := g.Admit(ctx, key, tk(t, 1, uint64(i+1))); err != nil {
			t.Fatalf("Admit(%.20q) = %v", key, err)
		}
	}
	for i, key := range keys {
		if h, err := g.Highest(ctx, key); err != nil || h != tk(t, 1, uint64(i+1)) {
			t.Fatalf("Highest(%.20q) = %s, %v; keys collide", key, h, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || len(e.Name()) > 255 || !strings.ContainsAny(e.Name()[:1], "kh") {
			t.Errorf("unexpected entry %q (%v)", e.Name(), e.Type())
		}
	}
	if got, want := len(entries), 3*len(keys); got > want || got < 2*len(keys) {
		t.Errorf("%d entries for %d keys", got, len(keys))
	}
	if outside, _ := os.ReadDir(parent); len(outside) != 1 {
		t.Errorf("files escaped the directory: %v", outside)
	}
}

// TestFileCorruptRecord checks that a record the guard did not write is an
// error for Admit and Highest: it fails closed rather than guessing zero.
func TestFileCorruptRecord(t *testing.T) {
	ctx := context.Background()
	for _, content := range []string{"", "garbage\n", "12", "0\n", "007\n", "-5\n", "99999999999999999999\n"} {
		dir := t.TempDir()
		g := openFile(t, dir)
		if err := os.WriteFile(filepath.Join(dir, fileName("k")), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		err := g.Admit(ctx, "k", fence.MaxToken)
		if err == nil || errors.Is(err, ErrStale) {
			t.Errorf("record %q: Admit = %v, want an error that is not ErrStale", content, err)
		}
		if _, err := g.Highest(ctx, "k"); err == nil {
			t.Errorf("record %q: Highest succeeded", content)
		}
	}
}

func TestFileReopenAndClose(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g, err := OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "k", tk(t, 3, 3)); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "k", tk(t, 4, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Admit after Close = %v, want ErrClosed", err)
	}
	g = openFile(t, dir)
	if err := g.Admit(ctx, "k", tk(t, 3, 2)); !errors.Is(err, ErrStale) {
		t.Fatalf("lower token after reopen = %v, want ErrStale", err)
	}
	if h, err := g.Highest(ctx, "k"); err != nil || h != tk(t, 3, 3) {
		t.Fatalf("Highest after reopen = %s, %v", h, err)
	}
}

// TestAdmitFunc checks the documented ordering of Memory and File AdmitFunc:
// the write runs after the check, never for a stale token, and a failing
// write leaves its token recorded.
func TestAdmitFunc(t *testing.T) {
	guards := map[string]func(t *testing.T) admitWriteFunc{
		"memory": func(*testing.T) admitWriteFunc { return NewMemory().AdmitFunc },
		"file":   func(t *testing.T) admitWriteFunc { return openFile(t, t.TempDir()).AdmitFunc },
	}
	for name, open := range guards {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			admit := open(t)
			calls := 0
			write := func() error { calls++; return nil }
			if err := admit(ctx, "k", tk(t, 1, 5), write); err != nil || calls != 1 {
				t.Fatalf("AdmitFunc = %v after %d writes", err, calls)
			}
			if err := admit(ctx, "k", tk(t, 1, 4), write); !errors.Is(err, ErrStale) || calls != 1 {
				t.Fatalf("stale AdmitFunc = %v after %d writes; want ErrStale and no write", err, calls)
			}
			boom := errors.New("boom")
			if err := admit(ctx, "k", tk(t, 1, 9), func() error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("AdmitFunc with a failing write = %v, want boom", err)
			}
			// 1/9 stays recorded: the failed write may have partly landed.
			if err := admit(ctx, "k", tk(t, 1, 8), write); !errors.Is(err, ErrStale) {
				t.Fatalf("token below a failed write's = %v, want ErrStale", err)
			}
			if err := admit(ctx, "k", tk(t, 1, 9), nil); err != nil {
				t.Fatalf("AdmitFunc with a nil write = %v", err)
			}
		})
	}
}

// TestAdmitFuncWaitHonoursContext holds a key inside AdmitFunc and checks that
// another admission of it waits, and gives up when its context ends: in the
// same guard (the in-process lock) and in a second guard on the same
// directory (the flock).
func TestAdmitFuncWaitHonoursContext(t *testing.T) {
	dir := t.TempDir()
	a, b := openFile(t, dir), openFile(t, dir)
	m := NewMemory()
	cases := map[string]struct {
		holder admitWriteFunc
		waiter Guard
	}{
		"memory":            {m.AdmitFunc, m},
		"file, same guard":  {a.AdmitFunc, a},
		"file, other guard": {a.AdmitFunc, b},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			inside, release := make(chan struct{}), make(chan struct{})
			done := make(chan error)
			first := tk(t, 1, 1)
			go func() {
				done <- c.holder(ctx, name, first, func() error {
					close(inside)
					<-release
					return nil
				})
			}()
			<-inside
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if err := c.waiter.Admit(short, name, tk(t, 1, 2)); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Admit while the key is held = %v, want DeadlineExceeded", err)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := c.waiter.Admit(ctx, name, tk(t, 1, 2)); err != nil {
				t.Fatalf("Admit after release = %v", err)
			}
		})
	}
}

// TestTwoFileGuardsWithoutFlock is the positive control of the two-guard
// tests: with the flock turned off, two guards on one directory race, and the
// checker must notice (a violation, or a record torn by two writers).
func TestTwoFileGuardsWithoutFlock(t *testing.T) {
	noLock := func(context.Context, *os.File) error { return nil }
	for attempt := range 20 {
		dir := t.TempDir()
		a, b := openFile(t, dir), openFile(t, dir)
		a.flock, b.flock = noLock, noLock
		if v, _, _ := loadAndCheck(splitGuard{a, b}, loadConfig{keys: 1, workers: 8, ops: 40}); len(v) > 0 {
			t.Logf("caught on attempt %d: %s", attempt+1, v[0])
			return
		}
	}
	t.Fatal("two guards without flock passed the checker")
}
