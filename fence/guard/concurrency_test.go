package guard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fenced/fenced/fence"
)

// The concurrency checker. Goroutines admit tokens that trend upwards with a
// wide random overlap, on a few keys, and read Highest now and then. Every call
// is stamped with a logical clock before it starts and after it returns. Since
// an admission takes effect somewhere between its two stamps, a correct guard
// must satisfy, per key:
//
//   - no token is admitted once a higher one has been admitted: if admission A
//     returned before admission B started, B's token is not lower than A's;
//   - Highest never goes backwards: a read is not lower than any admission, or
//     any read, that finished before it started, and it names nothing that had
//     not started being admitted when it returned;
//   - a refusal is justified: the StaleError's Highest is above the refused
//     token and is a token whose admission had started;
//   - at the end, Highest is the highest token admitted.

type opKind int

const (
	opAdmitted opKind = iota
	opRefused
	opRead
)

type op struct {
	key        string
	tok        fence.Token // presented token (admissions)
	h          fence.Token // StaleError.Highest (refusals) or the value read
	kind       opKind
	start, end int64
}

type loadConfig struct {
	keys, workers, ops int
}

// nextToken draws a token that follows the load's overall progress, give or
// take a few steps, so that however the goroutines are scheduled, tokens
// presented at about the same time overlap and both admissions and refusals
// are common.
func nextToken(progress *atomic.Uint64, rng *rand.Rand) fence.Token {
	p := progress.Add(1)
	return fence.Token(1<<32 | (p/2 + uint64(rng.IntN(8)) + 1))
}

// runLoad drives g with cfg and returns the history, or the first unexpected
// error (anything but a stale refusal).
func runLoad(g Guard, cfg loadConfig) ([]op, error) {
	ctx := context.Background()
	var (
		clock    atomic.Int64
		progress atomic.Uint64
		mu       sync.Mutex
		ops      []op
		errs     = make(chan error, cfg.workers)
		wg       sync.WaitGroup
	)
	for w := range cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			local := make([]op, 0, cfg.ops)
			for i := range cfg.ops {
				o := op{key: fmt.Sprint("key-", rng.IntN(cfg.keys))}
				read := rng.IntN(4) == 0
				o.tok = nextToken(&progress, rng)
				o.start = clock.Add(1)
				var err error
				if read {
					o.kind = opRead
					o.h, err = g.Highest(ctx, o.key)
				} else {
					err = g.Admit(ctx, o.key, o.tok)
				}
				o.end = clock.Add(1)
				var se *StaleError
				switch {
				case read && err == nil:
				case err == nil:
					o.kind = opAdmitted
				case errors.As(err, &se):
					o.kind, o.h = opRefused, se.Highest
				default:
					errs <- fmt.Errorf("worker %d op %d: %w", w, i, err)
					return
				}
				local = append(local, o)
			}
			mu.Lock()
			ops = append(ops, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return ops, nil
}

// maxBefore answers "the highest token of the events that happened before
// time t" over events sorted by time, with a running maximum.
type maxBefore struct {
	at  []int64
	max []fence.Token
}

func newMaxBefore(evs []op, at func(op) int64, val func(op) fence.Token) maxBefore {
	evs = slices.Clone(evs)
	sort.Slice(evs, func(i, j int) bool { return at(evs[i]) < at(evs[j]) })
	m := maxBefore{at: make([]int64, len(evs)), max: make([]fence.Token, len(evs))}
	var run fence.Token
	for i, e := range evs {
		run = max(run, val(e))
		m.at[i], m.max[i] = at(e), run
	}
	return m
}

func (m maxBefore) before(t int64) fence.Token {
	i := sort.Search(len(m.at), func(i int) bool { return m.at[i] >= t })
	if i == 0 {
		return 0
	}
	return m.max[i-1]
}

// checkHistory returns the violations in ops (at most a few per key) given
// the final Highest of each key, and how many tokens were admitted and refused.
func checkHistory(ops []op, final map[string]fence.Token) (violations []string, admitted, refused int) {
	byKey := map[string][]op{}
	for _, o := range ops {
		byKey[o.key] = append(byKey[o.key], o)
	}
	start := func(o op) int64 { return o.start }
	end := func(o op) int64 { return o.end }
	tok := func(o op) fence.Token { return o.tok }
	for key, kops := range byKey {
		var adm, reads []op
		for _, o := range kops {
			switch o.kind {
			case opAdmitted:
				adm = append(adm, o)
			case opRead:
				reads = append(reads, o)
			}
		}
		doneAdm := newMaxBefore(adm, end, tok)      // admissions that returned
		startedAdm := newMaxBefore(adm, start, tok) // admissions that had begun
		doneRead := newMaxBefore(reads, end, func(o op) fence.Token { return o.h })
		var v []string
		for _, o := range kops {
			switch o.kind {
			case opAdmitted:
				admitted++
				if prev := doneAdm.before(o.start); o.tok < prev {
					v = append(v, fmt.Sprintf("%s: token %s admitted after %s had been", key, o.tok, prev))
				}
			case opRefused:
				refused++
				if o.h <= o.tok || o.h > startedAdm.before(o.end) {
					v = append(v, fmt.Sprintf("%s: token %s refused for highest %s, which was not admitted", key, o.tok, o.h))
				}
			case opRead:
				if prev := max(doneAdm.before(o.start), doneRead.before(o.start)); o.h < prev {
					v = append(v, fmt.Sprintf("%s: Highest went back to %s after %s", key, o.h, prev))
				}
				if o.h > startedAdm.before(o.end) {
					v = append(v, fmt.Sprintf("%s: Highest %s was never admitted", key, o.h))
				}
			}
		}
		if top := startedAdm.before(1 << 62); final[key] != top {
			v = append(v, fmt.Sprintf("%s: final Highest %s, but %s was admitted", key, final[key], top))
		}
		violations = append(violations, v[:min(len(v), 3)]...)
	}
	return violations, admitted, refused
}

// loadAndCheck runs the load against g and checks the history; it returns the
// violations, treating an unexpected error as one.
func loadAndCheck(g Guard, cfg loadConfig) ([]string, int, int) {
	ops, err := runLoad(g, cfg)
	if err != nil {
		return []string{err.Error()}, 0, 0
	}
	final := map[string]fence.Token{}
	for k := range cfg.keys {
		key := fmt.Sprint("key-", k)
		h, err := g.Highest(context.Background(), key)
		if err != nil {
			return []string{err.Error()}, 0, 0
		}
		final[key] = h
	}
	return checkHistory(ops, final)
}

func TestConcurrentAdmit(t *testing.T) {
	cfgs := map[string]loadConfig{
		"memory": {keys: 3, workers: 16, ops: 400},
		"file":   {keys: 3, workers: 8, ops: 60},
		"sqlite": {keys: 3, workers: 6, ops: 50},
	}
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			v, admitted, refused := loadAndCheck(im.open(t), cfgs[im.name])
			for _, s := range v {
				t.Error(s)
			}
			if admitted == 0 || refused == 0 {
				t.Fatalf("load did not exercise both paths: %d admitted, %d refused", admitted, refused)
			}
			t.Logf("%d admitted, %d refused", admitted, refused)
		})
	}
}

// TestConcurrentAdmitTwoFileGuards shares one directory between two File
// guards, which share no in-process lock: only the flock keeps them apart, as
// it keeps apart two processes.
func TestConcurrentAdmitTwoFileGuards(t *testing.T) {
	dir := t.TempDir()
	g := splitGuard{openFile(t, dir), openFile(t, dir)}
	v, admitted, refused := loadAndCheck(g, loadConfig{keys: 2, workers: 8, ops: 50})
	for _, s := range v {
		t.Error(s)
	}
	if admitted == 0 || refused == 0 {
		t.Fatalf("load did not exercise both paths: %d admitted, %d refused", admitted, refused)
	}
}

// splitGuard sends each call to a random one of several guards.
type splitGuard []Guard

func (s splitGuard) Admit(ctx context.Context, key string, tok fence.Token) error {
	return s[rand.IntN(len(s))].Admit(ctx, key, tok)
}

func (s splitGuard) Highest(ctx context.Context, key string) (fence.Token, error) {
	return s[rand.IntN(len(s))].Highest(ctx, key)
}

// Positive controls: broken guards the checker must catch.

// racyGuard checks and records in two separate steps, each under the lock, as
// a naive "read the highest, compare, write it back" would.
type racyGuard struct {
	mu sync.Mutex
	m  map[string]fence.Token
}

func (g *racyGuard) Admit(_ context.Context, key string, tok fence.Token) error {
	h, _ := g.Highest(context.Background(), key)
	runtime.Gosched() // widen the window a real round trip would open
	if tok < h {
		return &StaleError{Key: key, Token: tok, Highest: h}
	}
	g.mu.Lock()
	g.m[key] = tok
	g.mu.Unlock()
	return nil
}

func (g *racyGuard) Highest(_ context.Context, key string) (fence.Token, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[key], nil
}

// blindGuard never checks: it records whatever it is given.
type blindGuard struct{ racyGuard }

func (g *blindGuard) Admit(_ context.Context, key string, tok fence.Token) error {
	g.mu.Lock()
	g.m[key] = tok
	g.mu.Unlock()
	return nil
}

func TestCheckerCatchesBrokenGuards(t *testing.T) {
	broken := map[string]func() Guard{
		"check then record": func() Guard { return &racyGuard{m: map[string]fence.Token{}} },
		"never checks":      func() Guard { return &blindGuard{racyGuard{m: map[string]fence.Token{}}} },
	}
	for name, open := range broken {
		t.Run(name, func(t *testing.T) {
			// A race may hide in one run; it cannot hide in twenty.
			for attempt := range 20 {
				if v, _, _ := loadAndCheck(open(), loadConfig{keys: 2, workers: 16, ops: 300}); len(v) > 0 {
					t.Logf("caught on attempt %d: %s", attempt+1, v[0])
					return
				}
			}
			t.Fatal("the checker passed a broken guard")
		})
	}
}

// The atomic-write checker. Each successful admission appends its token to
// the key's log from inside the guard's atomic step, the way a resource would
// store a write. A correct AdmitFunc/AdmitTx keeps every key's log in
// non-decreasing token order: no write of a stale holder after a newer one.

// admitWriteFunc admits tok for key and runs write atomically with the check.
type admitWriteFunc func(ctx context.Context, key string, tok fence.Token, write func() error) error

// resourceLog is an in-memory resource: per key, the tokens of the writes in
// the order they were stored.
type resourceLog struct {
	mu   sync.Mutex
	logs map[string][]fence.Token
}

func (r *resourceLog) write(key string, tok fence.Token) func() error {
	return func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.logs[key] = append(r.logs[key], tok)
		return nil
	}
}

// runWrites drives admit with the same load as runLoad and returns the number
// of admissions that reported success.
func runWrites(admit admitWriteFunc, write func(key string, tok fence.Token) func() error, cfg loadConfig) (int, error) {
	var (
		wg       sync.WaitGroup
		progress atomic.Uint64
		admitted atomic.Int64
		errs     = make(chan error, cfg.workers)
	)
	for w := range cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range cfg.ops {
				key := fmt.Sprint("key-", rng.IntN(cfg.keys))
				tok := nextToken(&progress, rng)
				err := admit(context.Background(), key, tok, write(key, tok))
				switch {
				case err == nil:
					admitted.Add(1)
				case !errors.Is(err, ErrStale):
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return int(admitted.Load()), <-errs
}

// checkLogs returns the places where a key's log goes backwards.
func checkLogs(logs map[string][]fence.Token) []string {
	var v []string
	for key, l := range logs {
		for i := 1; i < len(l); i++ {
			if l[i] < l[i-1] {
				v = append(v, fmt.Sprintf("%s: write %d carries %s after a write with %s", key, i, l[i], l[i-1]))
				break
			}
		}
	}
	return v
}

// writeAndCheck runs the load through admit into an in-memory log and checks
// the log; it returns the violations.
func writeAndCheck(admit admitWriteFunc, cfg loadConfig) []string {
	r := &resourceLog{logs: map[string][]fence.Token{}}
	n, err := runWrites(admit, r.write, cfg)
	if err != nil {
		return []string{err.Error()}
	}
	v := checkLogs(r.logs)
	total := 0
	for _, l := range r.logs {
		total += len(l)
	}
	if total != n {
		v = append(v, fmt.Sprintf("%d admissions succeeded but %d writes were stored", n, total))
	}
	return v
}

func TestConcurrentAdmitFunc(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		for _, s := range writeAndCheck(NewMemory().AdmitFunc, loadConfig{keys: 3, workers: 16, ops: 400}) {
			t.Error(s)
		}
	})
	t.Run("file", func(t *testing.T) {
		for _, s := range writeAndCheck(openFile(t, t.TempDir()).AdmitFunc, loadConfig{keys: 3, workers: 8, ops: 60}) {
			t.Error(s)
		}
	})
	t.Run("two file guards", func(t *testing.T) {
		dir := t.TempDir()
		a, b := openFile(t, dir), openFile(t, dir)
		split := func(ctx context.Context, key string, tok fence.Token, write func() error) error {
			if rand.IntN(2) == 0 {
				return a.AdmitFunc(ctx, key, tok, write)
			}
			return b.AdmitFunc(ctx, key, tok, write)
		}
		for _, s := range writeAndCheck(split, loadConfig{keys: 2, workers: 8, ops: 50}) {
			t.Error(s)
		}
	})
}

// TestWriteCheckerCatchesNonAtomicWrite is the positive control of the
// atomic-write checker: admitting, then writing outside the guard's lock, lets
// a newer holder's write land before an older one's.
func TestWriteCheckerCatchesNonAtomicWrite(t *testing.T) {
	for attempt := range 20 {
		g := NewMemory()
		split := func(ctx context.Context, key string, tok fence.Token, write func() error) error {
			if err := g.Admit(ctx, key, tok); err != nil {
				return err
			}
			runtime.Gosched()
			return write()
		}
		if v := writeAndCheck(split, loadConfig{keys: 2, workers: 16, ops: 300}); len(v) > 0 {
			t.Logf("caught on attempt %d: %s", attempt+1, v[0])
			return
		}
	}
	t.Fatal("the write checker passed a check-then-write outside the lock")
}
