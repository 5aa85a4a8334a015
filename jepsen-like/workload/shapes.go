package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
	"github.com/fenced/fenced/jepsen-like/resource"
)

// The lock shapes beyond the mutex, each a workload of its own.
const (
	// ShapeSemaphore: clients take permits of one key acquired with a limit.
	ShapeSemaphore = "semaphore"
	// ShapeRW: readers take shared grants of one key, writers exclusive ones.
	ShapeRW = "rw"
	// ShapeMulti: clients take random sets of two or three keys of a small
	// pool with all-or-nothing multi-key acquires.
	ShapeMulti = "multi"
)

// Shapes lists the shape workloads.
var Shapes = []string{ShapeSemaphore, ShapeRW, ShapeMulti}

// ShapesPrefix names the shape workloads' keys: outside jepsen/, so the
// mutex workload's watchers and checkers never see them.
const ShapesPrefix = "shapes/"

// SemaphoreLimit is the limit of the semaphore workload's key.
const SemaphoreLimit = 3

// The shape workloads' keys.
var (
	SemaphoreKey = ShapesPrefix + "sem"
	RWKey        = ShapesPrefix + "rw"
)

// MultiKeys is the multi-key workload's pool: small, so sets overlap.
var MultiKeys = []string{ShapesPrefix + "m1", ShapesPrefix + "m2", ShapesPrefix + "m3", ShapesPrefix + "m4"}

// The shape workloads' positive controls, forged in the harness: fenced is
// asked for something else than the history records, as a client that
// misuses the shape would.
const (
	// BrokenSemaphoreOvercommit: the clients ask for the key with a limit
	// of SemaphoreLimit+1 while the history records SemaphoreLimit, as a
	// recipe that miscounts its permits: one permit too many is live at
	// times, and permit-count must fail.
	BrokenSemaphoreOvercommit = "semaphore-overcommit"
	// BrokenRWWriterShared: the writers take shared grants (a writer that
	// takes the read lock) while the history records exclusive ones:
	// rw-exclusion must fail.
	BrokenRWWriterShared = "rw-writer-shared"
	// BrokenMultiSequential: a multi-key acquire is made of one acquire per
	// key in turn, as a multi-lock built on a mutex is (keys taken so far
	// are released when one is held), recorded as one multi-key acquire:
	// its grants come from several log entries and a refused set holds
	// keys for a while, and multi-atomicity must fail.
	BrokenMultiSequential = "multi-sequential"
)

// ShapeOfBroken returns the shape whose workload a positive control
// needs, or "".
func ShapeOfBroken(broken string) string {
	switch broken {
	case BrokenSemaphoreOvercommit:
		return ShapeSemaphore
	case BrokenRWWriterShared:
		return ShapeRW
	case BrokenMultiSequential:
		return ShapeMulti
	}
	return ""
}

// ShapesConfig configures a shape workload.
type ShapesConfig struct {
	Endpoints      []string
	Shape          string
	Clients        int
	TTL            time.Duration
	OpTimeout      time.Duration
	AttemptTimeout time.Duration
	Broken         string
	Seed           int64
}

// ShapesWorkload runs one shape's clients and records into the run's
// history; its keys start with ShapesPrefix.
type ShapesWorkload struct {
	cfg    ShapesConfig
	rec    *history.Recorder
	rw     *resource.RW
	occ    *resource.Occupancy
	wg     sync.WaitGroup
	cancel context.CancelFunc

	mu     sync.Mutex
	broken int
}

// NewShapes returns a shape workload recording into rec.
func NewShapes(cfg ShapesConfig, rec *history.Recorder) *ShapesWorkload {
	return &ShapesWorkload{cfg: cfg, rec: rec, rw: resource.NewRW(), occ: resource.NewOccupancy()}
}

// Start launches the clients; they run until Stop.
func (s *ShapesWorkload) Start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	for i := 0; i < s.cfg.Clients; i++ {
		rng := rand.New(rand.NewSource(s.cfg.Seed*7907 + int64(i)))
		eps := shuffled(rng, s.cfg.Endpoints)
		opts := []client.Option{client.WithHTTPClient(trackedClient(0))}
		if s.cfg.AttemptTimeout > 0 {
			opts = append(opts, client.WithAttemptTimeout(s.cfg.AttemptTimeout))
		}
		c := &shapeClient{s: s, id: 2000 + i, idx: i, rng: rng, api: client.New(eps, opts...)}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c.run(ctx)
		}()
	}
}

// Stop ends the clients and waits for them.
func (s *ShapesWorkload) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
}

// BrokenAnswers returns how many operations the positive control forged.
func (s *ShapesWorkload) BrokenAnswers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broken
}

func (s *ShapesWorkload) forged() {
	s.mu.Lock()
	s.broken++
	s.mu.Unlock()
}

type shapeClient struct {
	s   *ShapesWorkload
	id  int // client id in the history
	idx int // index among the shape's clients
	rng *rand.Rand
	api *client.Client
	n   int // acquires made, for unique holder names
	v   int // values written
}

func (c *shapeClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		switch c.s.cfg.Shape {
		case ShapeSemaphore:
			c.semaphoreRound(ctx)
		case ShapeRW:
			c.rwRound(ctx)
		case ShapeMulti:
			c.multiRound(ctx)
		}
		time.Sleep(time.Duration(10+c.rng.Intn(40)) * time.Millisecond) // pacing, not synchronisation
	}
}

func (c *shapeClient) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.s.cfg.OpTimeout)
}

// wait is how long an acquire waits: within one attempt, so a handed-over
// permit reaches its waiter in the same answer.
func (c *shapeClient) wait() time.Duration {
	w := time.Duration(200+c.rng.Intn(400)) * time.Millisecond
	if c.s.cfg.AttemptTimeout > 0 {
		w = min(w, c.s.cfg.AttemptTimeout/2)
	}
	return w
}

// holdFor is how long a grant is used: well within the TTL.
func (c *shapeClient) holdFor() time.Duration {
	return time.Duration(50+c.rng.Intn(200)) * time.Millisecond
}

// acquire records one acquire of key with the given limit and mode as
// asked of fenced; recLimit and recMode are what the history says was
// asked (they differ only in a positive control).
func (c *shapeClient) acquire(ctx context.Context, key, holder string, limit int, mode string, recLimit int, recMode string) (*client.Grant, bool) {
	wait := c.wait()
	// Permits and readers of odd-numbered clients carry a lock-delay, so
	// an expired one keeps its slot, or keeps writers out, a while more.
	var delay time.Duration
	if c.idx%2 == 1 && (limit > 0 || mode == client.ModeShared) {
		delay = c.s.cfg.TTL / 2
	}
	op := c.s.rec.Invoke(history.Op{Client: c.id, Kind: history.Acquire, Key: key, Holder: holder, Wait: wait, Limit: recLimit, Mode: recMode, LockDelay: delay})
	octx, cancel := c.opCtx(ctx)
	octx, att := withAttempts(octx)
	req := client.AcquireRequest{Key: key, Holder: holder, TTL: c.s.cfg.TTL.String(), Wait: wait.String(), Limit: limit, Mode: mode}
	if delay > 0 {
		req.LockDelay = delay.String()
	}
	g, err := c.api.Acquire(octx, req)
	cancel()
	forged := limit != recLimit || mode != recMode && !(mode == "" && recMode == client.ModeExclusive)
	c.s.rec.Complete(op, func(o *history.Op) {
		if forged {
			o.Broken = c.s.cfg.Broken
		}
		if err != nil {
			o.Outcome, o.Code = classify(err, true, att)
			o.Error = err.Error()
			var apiErr *client.Error
			if errors.As(err, &apiErr) {
				o.HeldBy = apiErr.HeldBy
			}
			return
		}
		o.Outcome, o.Granted, o.Renewed = history.OK, g.Token, g.Renewed
	})
	if err != nil {
		return nil, false
	}
	if forged {
		c.s.forged()
	}
	return g, true
}

func (c *shapeClient) release(ctx context.Context, key, holder string, tok fence.Token) {
	op := c.s.rec.Invoke(history.Op{Client: c.id, Kind: history.Release, Key: key, Holder: holder, Token: tok})
	octx, cancel := c.opCtx(ctx)
	octx, att := withAttempts(octx)
	out, err := c.api.Release(octx, client.ReleaseRequest{Key: key, Holder: holder, Token: tok})
	cancel()
	c.s.rec.Complete(op, func(o *history.Op) {
		if err != nil {
			o.Outcome, o.Code = classify(err, true, att)
			o.Error = err.Error()
			return
		}
		o.Outcome, o.Ended = history.OK, out.Token
	})
}

// verify records a verify of tok naming holder ("" for none).
func (c *shapeClient) verify(ctx context.Context, key, holder string, tok fence.Token, own bool) bool {
	op := c.s.rec.Invoke(history.Op{Client: c.id, Kind: history.Verify, Key: key, Holder: holder, Token: tok, Own: own})
	octx, cancel := c.opCtx(ctx)
	v, err := c.api.Verify(octx, key, tok.String(), holder)
	cancel()
	c.s.rec.Complete(op, func(o *history.Op) {
		if err != nil || v.Reason == "unavailable" {
			o.Outcome, o.Code = history.Info, "unavailable"
			if err != nil {
				o.Error = err.Error()
			}
			return
		}
		o.Outcome, o.Allow, o.Code, o.Current, o.CurrentHolder = history.OK, v.Allow, v.Reason, v.CurrentToken, v.Holder
	})
	return err == nil && v.Allow
}

// readKey records a linearizable read of key: the grant it shows, and the
// log index of that grant.
func (c *shapeClient) readKey(ctx context.Context, key, holder string) {
	op := c.s.rec.Invoke(history.Op{Client: c.id, Kind: history.ReadKey, Key: key, Holder: holder})
	octx, cancel := c.opCtx(ctx)
	k, err := c.api.Key(octx, key)
	cancel()
	c.s.rec.Complete(op, func(o *history.Op) {
		var apiErr *client.Error
		switch {
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound:
			o.Outcome, o.Code = history.OK, "unknown_key"
		case err != nil:
			o.Outcome, o.Code, o.Error = history.Fail, "error", err.Error()
		default:
			o.Outcome, o.Current, o.CurrentHolder, o.KeyIndex, o.Code = history.OK, k.Token, k.Holder, k.Index, k.State
		}
	})
}

// holder names the client's next grant (or set): unique per acquire, so
// a key read that shows it names the one request that made it. s for a
// permit, w for a writer, r for a reader, m for a set.
func (c *shapeClient) holder() string {
	c.n++
	role := c.s.cfg.Shape[:1]
	switch {
	case c.s.cfg.Shape == ShapeRW && c.idx < 2:
		role = "w"
	case c.s.cfg.Shape == ShapeRW:
		role = "r"
	}
	return fmt.Sprintf("%s%d-%d", role, c.idx, c.n)
}

// semaphoreRound takes a permit, verifies it, works inside the shared
// resource for a while, and releases it (or, one time in ten, lets it
// expire).
func (c *shapeClient) semaphoreRound(ctx context.Context) {
	holder := c.holder()
	limit := SemaphoreLimit
	if c.s.cfg.Broken == BrokenSemaphoreOvercommit {
		limit++
	}
	g, ok := c.acquire(ctx, SemaphoreKey, holder, limit, "", SemaphoreLimit, "")
	if !ok {
		return
	}
	c.verify(ctx, SemaphoreKey, holder, g.Token, true)
	c.v++
	op := c.s.rec.Invoke(history.Op{Client: c.id, Kind: history.Write, Key: SemaphoreKey, Holder: holder, Token: g.Token, Value: c.v})
	inside := c.s.occ.Enter(SemaphoreKey)
	time.Sleep(c.holdFor()) // the work done under the permit
	c.s.occ.Leave(SemaphoreKey)
	c.s.rec.Complete(op, func(o *history.Op) { o.Outcome, o.Count = history.OK, inside })
	if c.rng.Intn(10) == 0 {
		return // walk away: the permit's lease expires
	}
	c.release(ctx, SemaphoreKey, holder, g.Token)
}

// rwRound is a writer's round for the first two clients, a reader's for
// the others.
func (c *shapeClient) rwRound(ctx context.Context) {
	holder := c.holder()
	if c.idx < 2 {
		mode := ""
		if c.s.cfg.Broken == BrokenRWWriterShared {
			mode = client.ModeShared
		}
		g, ok := c.acquire(ctx, RWKey, holder, 0, mode, 0, client.ModeExclusive)
		if !ok {
			return
		}
		c.v++
		v := c.id*1_000_000 + c.v
		op := c.s.rec.Invoke(history.Op{Client: c.id, Kind: history.Write, Key: RWKey, Holder: holder, Token: g.Token, Value: v, Mode: client.ModeExclusive})
		r := c.s.rw.Write(RWKey, g.Token, v)
		c.s.rec.Complete(op, func(o *history.Op) { c.resourceOutcome(o, r) })
		time.Sleep(c.holdFor() / 2)
		c.release(ctx, RWKey, holder, g.Token)
		return
	}
	g, ok := c.acquire(ctx, RWKey, holder, 0, client.ModeShared, 0, client.ModeShared)
	if !ok {
		return
	}
	c.verify(ctx, RWKey, holder, g.Token, true)
	c.read(g.Token, holder)
	time.Sleep(c.holdFor())
	c.release(ctx, RWKey, holder, g.Token)
	if c.rng.Intn(3) == 0 {
		// A reader that lingers: its token must be refused, by fenced
		// and by the resource, once a later exclusive grant exists.
		time.Sleep(time.Duration(100+c.rng.Intn(300)) * time.Millisecond)
		c.verify(ctx, RWKey, "", g.Token, false)
		c.read(g.Token, holder)
	}
}

func (c *shapeClient) read(tok fence.Token, holder string) {
	op := c.s.rec.Invoke(history.Op{Client: c.id, Kind: history.Read, Key: RWKey, Holder: holder, Token: tok, Mode: client.ModeShared})
	r := c.s.rw.Read(RWKey, tok)
	c.s.rec.Complete(op, func(o *history.Op) {
		c.resourceOutcome(o, r)
		if r.Accepted {
			o.Count, o.Digest, o.Values = len(r.Values), history.Digest(r.Values), history.Tail(r.Values)
		}
	})
}

func (c *shapeClient) resourceOutcome(o *history.Op, r resource.Result) {
	o.Seq, o.Current = r.Seq, r.High
	if r.Accepted {
		o.Outcome = history.OK
	} else {
		o.Outcome, o.Code = history.Fail, "stale_token"
	}
}

// multiRound takes a random set of two or three keys of the pool all or
// none, reads each key of it (the grant and its log index), holds it for
// a while and releases each key; now and then it reads a random key of
// the pool, whoever holds it.
func (c *shapeClient) multiRound(ctx context.Context) {
	holder := c.holder()
	keys := append([]string(nil), MultiKeys...)
	c.rng.Shuffle(len(keys), func(a, b int) { keys[a], keys[b] = keys[b], keys[a] })
	keys = keys[:2+c.rng.Intn(2)]
	var wait time.Duration
	if c.rng.Intn(3) != 0 {
		wait = c.wait() // most sets wait; the others are refused at once when a key is held
	}
	op := c.s.rec.Invoke(history.Op{Client: c.id, Kind: history.AcquireMulti, Key: keys[0], Keys: keys, Holder: holder, Wait: wait})
	var toks []fence.Token
	var err error
	var att *attempts
	if c.s.cfg.Broken == BrokenMultiSequential {
		toks, err, att = c.sequential(ctx, keys, holder, wait)
	} else {
		octx, cancel := c.opCtx(ctx)
		octx, att = withAttempts(octx)
		req := client.AcquireMultiRequest{Keys: keys, Holder: holder, TTL: c.s.cfg.TTL.String()}
		if wait > 0 {
			req.Wait = wait.String()
		}
		var g *client.MultiGrant
		g, err = c.api.AcquireMulti(octx, req)
		cancel()
		if err == nil {
			for _, gr := range g.Grants {
				toks = append(toks, gr.Token)
			}
		}
	}
	c.s.rec.Complete(op, func(o *history.Op) {
		if c.s.cfg.Broken == BrokenMultiSequential {
			o.Broken = BrokenMultiSequential
		}
		if err != nil {
			o.Outcome, o.Code = classify(err, true, att)
			o.Error = err.Error()
			var apiErr *client.Error
			if errors.As(err, &apiErr) {
				o.HeldBy = apiErr.HeldBy
			}
			return
		}
		o.Outcome, o.Grants = history.OK, toks
	})
	if c.rng.Intn(3) == 0 {
		c.readKey(ctx, MultiKeys[c.rng.Intn(len(MultiKeys))], holder)
	}
	if err != nil {
		return
	}
	for _, k := range keys {
		c.readKey(ctx, k, holder)
	}
	time.Sleep(c.holdFor())
	if c.rng.Intn(10) == 0 {
		return // walk away: every lease of the set expires
	}
	for i, k := range keys {
		c.release(ctx, k, holder, toks[i])
	}
}

// sequential is the multi-sequential control: one waiting acquire per key
// in the set's order, the keys taken so far released when one is refused.
func (c *shapeClient) sequential(ctx context.Context, keys []string, holder string, wait time.Duration) ([]fence.Token, error, *attempts) {
	c.s.forged()
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	octx, att := withAttempts(octx)
	var toks []fence.Token
	for _, k := range keys {
		req := client.AcquireRequest{Key: k, Holder: holder, TTL: c.s.cfg.TTL.String()}
		if wait > 0 {
			req.Wait = wait.String()
		}
		g, err := c.api.Acquire(octx, req)
		if err != nil {
			for i, t := range toks {
				_, _ = c.api.Release(context.WithoutCancel(ctx), client.ReleaseRequest{Key: keys[i], Holder: holder, Token: t})
			}
			return nil, err, att
		}
		toks = append(toks, g.Token)
		time.Sleep(time.Duration(c.rng.Intn(30)) * time.Millisecond) // the gap between two acquires of a hand-made multi-lock
	}
	return toks, nil, att
}

// IsShape reports whether s names a shape workload.
func IsShape(s string) bool { return slices.Contains(Shapes, s) }
