package workload

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// BrokenReclaimNoEpoch: the cluster runs with the hidden
// --unsafe-reclaim-ignores-epoch, which forgets ended keys without the epoch
// rule (and without the floor raise), so a reclaimed key's next grant in the
// same term restarts at seq 1. The churn workload's token checker must fail.
const BrokenReclaimNoEpoch = "reclaim-no-epoch"

// ChurnPrefix names the churn workload's keys.
const ChurnPrefix = "jepsen/churn/"

// ChurnKeyName returns the name of the i-th churn key.
func ChurnKeyName(i int) string { return fmt.Sprintf("%sk%d", ChurnPrefix, i) }

// ChurnConfig configures the churn workload: many short-lived keys, each
// acquired once, released (or left to expire) at once, idle long enough to be
// reclaimed, and acquired again later.
type ChurnConfig struct {
	Endpoints []string
	// Clients is the number of concurrent churn clients; Keys the number of
	// distinct key names they draw from at random.
	Clients, Keys  int
	TTL            time.Duration
	OpTimeout      time.Duration
	AttemptTimeout time.Duration
	Seed           int64
}

// Churn runs the churn clients and records their acquires and releases in
// a history of its own, for the token checker.
type Churn struct {
	cfg    ChurnConfig
	rec    *history.Recorder
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

// NewChurn returns a churn workload recording into rec.
func NewChurn(cfg ChurnConfig, rec *history.Recorder) *Churn {
	return &Churn{cfg: cfg, rec: rec}
}

// Start launches the clients; they run until Stop.
func (ch *Churn) Start(ctx context.Context) {
	ctx, ch.cancel = context.WithCancel(ctx)
	for i := 0; i < ch.cfg.Clients; i++ {
		rng := rand.New(rand.NewSource(ch.cfg.Seed*7919 + int64(i)))
		eps := shuffled(rng, ch.cfg.Endpoints)
		hc := trackedClient(ch.cfg.AttemptTimeout)
		cl := &churnClient{ch: ch, id: 1000 + i, holder: fmt.Sprintf("churn%d", i), rng: rng, api: client.New(eps, client.WithHTTPClient(hc))}
		ch.wg.Add(1)
		go func() {
			defer ch.wg.Done()
			cl.run(ctx)
		}()
	}
}

// Stop ends the clients and waits for them.
func (ch *Churn) Stop() {
	if ch.cancel != nil {
		ch.cancel()
	}
	ch.wg.Wait()
}

type churnClient struct {
	ch     *Churn
	id     int
	holder string
	rng    *rand.Rand
	api    *client.Client
}

func (c *churnClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		key := ChurnKeyName(c.rng.Intn(c.ch.cfg.Keys))
		if tok, ok := c.acquire(ctx, key); ok && c.rng.Intn(8) != 0 {
			c.release(ctx, key, tok) // else walk away: the lease expires
		}
		time.Sleep(time.Duration(5+c.rng.Intn(20)) * time.Millisecond) // pacing, not synchronisation
	}
}

func (c *churnClient) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.ch.cfg.OpTimeout)
}

func (c *churnClient) acquire(ctx context.Context, key string) (fence.Token, bool) {
	op := c.ch.rec.Invoke(history.Op{Client: c.id, Kind: history.Acquire, Key: key, Holder: c.holder})
	octx, cancel := c.opCtx(ctx)
	octx, att := withAttempts(octx)
	g, err := c.api.Acquire(octx, client.AcquireRequest{Key: key, Holder: c.holder, TTL: c.ch.cfg.TTL.String()})
	cancel()
	c.ch.rec.Complete(op, func(o *history.Op) {
		if err != nil {
			o.Outcome, o.Code = classify(err, true, att)
			o.Error = err.Error()
			return
		}
		o.Outcome, o.Granted, o.Renewed = history.OK, g.Token, g.Renewed
	})
	if err != nil {
		return 0, false
	}
	return g.Token, true
}

func (c *churnClient) release(ctx context.Context, key string, tok fence.Token) {
	op := c.ch.rec.Invoke(history.Op{Client: c.id, Kind: history.Release, Key: key, Holder: c.holder, Token: tok})
	octx, cancel := c.opCtx(ctx)
	octx, att := withAttempts(octx)
	_, err := c.api.Release(octx, client.ReleaseRequest{Key: key, Holder: c.holder, Token: tok})
	cancel()
	c.ch.rec.Complete(op, func(o *history.Op) {
		if err != nil {
			o.Outcome, o.Code = classify(err, true, att)
			o.Error = err.Error()
			return
		}
		o.Outcome = history.OK
	})
}
