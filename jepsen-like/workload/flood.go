package workload

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/jepsen-like/history"
)

// BrokenTenantsNoACL: the two-tenant run without its ACL file, as a
// cluster whose operator left key ACLs off: the flooding tenant may then
// take, wait for and read the other tenant's keys, and the tenant checker
// must fail.
const BrokenTenantsNoACL = "tenants-no-acl"

func init() { BrokenModes = append(BrokenModes, BrokenTenantsNoACL) }

// FloodConfig configures a flooding tenant.
type FloodConfig struct {
	// Endpoints are the nodes' own HTTP addresses (not the proxies: the
	// flood is not the workload under test, and its streams must stay
	// open).
	Endpoints []string
	// Token is the flooder's bearer token; Identity its client identity,
	// which names its holders and its keys (IDENTITY/...).
	Token    string
	Identity string
	// Victim are the other tenant's keys; VictimPrefix their prefix.
	Victim       []string
	VictimPrefix string
	// Watches is the number of never-reading watch streams the flooder
	// keeps open against each node: more than its share, so some are
	// refused.
	Watches int
	// Cyclers acquire and release new keys of the flooder's own, each with
	// a fresh request id and a 1 KiB value, as fast as they are answered.
	Cyclers int
	// Waiters wait for a key of the flooder's own that it holds.
	Waiters int
	// VictimWaiters wait for the other tenant's first key (a waiting
	// acquire every attempt); VictimTakers try to take its keys outright
	// and read them.
	VictimWaiters int
	VictimTakers  int
	Log           hclog.Logger
}

// Flood is a second tenant that floods the cluster while the workload
// runs, from several goroutines, and counts every answer it got.
type Flood struct {
	cfg    FloodConfig
	tally  *history.Tally
	api    *client.Client
	hc     *http.Client // the raw watch streams'
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartFlood starts the flooder; it runs until Stop.
func StartFlood(ctx context.Context, cfg FloodConfig) *Flood {
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(ctx)
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 64}
	f := &Flood{cfg: cfg, tally: history.NewTally(), cancel: cancel, hc: &http.Client{Transport: tr},
		api: client.New(cfg.Endpoints, append([]client.Option{client.WithHTTPClient(&http.Client{Timeout: 5 * time.Second,
			Transport: &http.Transport{DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 256}})},
			bearer(cfg.Token)...)...)}
	f.spawn(1, func(int) { f.victimWatch(ctx) })
	f.spawn(cfg.Cyclers, func(i int) { f.cycle(ctx, i) })
	f.spawn(1, func(int) { f.holdOwn(ctx) })
	f.spawn(cfg.Waiters, func(i int) { f.wait(ctx, i) })
	f.spawn(cfg.VictimWaiters, func(i int) { f.victimWait(ctx, i) })
	f.spawn(cfg.VictimTakers, func(i int) { f.victimTake(ctx, i) })
	for _, ep := range cfg.Endpoints {
		f.spawn(cfg.Watches, func(int) { f.watch(ctx, ep) })
	}
	return f
}

func bearer(token string) []client.Option {
	if token == "" {
		return nil
	}
	return []client.Option{client.WithBearerToken(token), client.WithInsecureCredentials()}
}

func (f *Flood) spawn(n int, run func(i int)) {
	for i := 0; i < n; i++ {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			run(i)
		}()
	}
}

// Stop ends the flood, waits for its goroutines and returns its counts.
func (f *Flood) Stop() map[string]map[string]int {
	f.cancel()
	f.wg.Wait()
	f.hc.CloseIdleConnections()
	f.api.CloseIdleConnections()
	counts := f.tally.Counts()
	f.cfg.Log.Info("flood done", "identity", f.cfg.Identity, "answers", history.Describe(counts))
	return counts
}

// code names the outcome of a Go client call.
func code(err error) string {
	var apiErr *client.Error
	switch {
	case err == nil:
		return history.CodeOK
	case errors.As(err, &apiErr):
		return apiErr.Code
	case errors.Is(err, client.ErrUnknownOutcome):
		return "outcome_unknown"
	case errors.Is(err, client.ErrUnavailable):
		return "unavailable"
	}
	return history.CodeTransport
}

// pace sleeps d unless ctx ends first.
func pace(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func (f *Flood) holder(kind string, i int) string {
	return fmt.Sprintf("%s/%s%d", f.cfg.Identity, kind, i)
}

// value is the 1 KiB value every cycled grant publishes: what an ended key
// keeps until it is reclaimed.
var value = strings.Repeat("m", client.MaxValueLen)

// cycle acquires a new key of the flooder's own and releases it, each
// with a fresh request id, over and over: request-id volume and ended
// keys, each with its value.
func (f *Flood) cycle(ctx context.Context, i int) {
	for n := 0; ctx.Err() == nil; n++ {
		key := fmt.Sprintf("%s/cycle/%d-%d", f.cfg.Identity, i, n)
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		g, err := f.api.Acquire(actx, client.AcquireRequest{Key: key, Holder: f.holder("cycler", i), TTL: "5s",
			RequestID: client.NewRequestID(), Value: value})
		cancel()
		if ctx.Err() != nil {
			return
		}
		f.tally.Add(history.FloodCycle, code(err))
		if err != nil {
			pace(ctx, 20*time.Millisecond)
			continue
		}
		actx, cancel = context.WithTimeout(ctx, 5*time.Second)
		_, err = f.api.Release(actx, client.ReleaseRequest{Key: key, Holder: g.Holder, Token: g.Token, RequestID: client.NewRequestID()})
		cancel()
		if ctx.Err() == nil {
			f.tally.Add(history.FloodCycle, code(err))
		}
	}
}

// ownKey is the key of the flooder's own that its waiters queue for.
func (f *Flood) ownKey() string { return f.cfg.Identity + "/queue" }

// holdOwn keeps the flooder's own queued key held, so its waiters wait.
func (f *Flood) holdOwn(ctx context.Context) {
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := f.api.Acquire(actx, client.AcquireRequest{Key: f.ownKey(), Holder: f.holder("owner", 0), TTL: "10s"})
		cancel()
		if ctx.Err() == nil {
			f.tally.Add(history.FloodWait, code(err))
		}
		pace(ctx, 2*time.Second) // an acquire by the holder renews
	}
}

// wait queues for the flooder's own key: past the per-key share of
// waiters, refused.
func (f *Flood) wait(ctx context.Context, i int) {
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		g, err := f.api.Acquire(actx, client.AcquireRequest{Key: f.ownKey(), Holder: f.holder("waiter", i), TTL: "1s", Wait: "2s"})
		cancel()
		if ctx.Err() != nil {
			return
		}
		f.tally.Add(history.FloodWait, code(err))
		if err == nil {
			f.release(ctx, g)
		} else {
			pace(ctx, 50*time.Millisecond)
		}
	}
}

func (f *Flood) release(ctx context.Context, g *client.Grant) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = f.api.Release(actx, client.ReleaseRequest{Key: g.Key, Holder: g.Holder, Token: g.Token})
}

// victimWait queues for the other tenant's first key: with an ACL,
// forbidden; without, the flooder fills the key's waiter queue and the
// other tenant's own waiters are refused.
func (f *Flood) victimWait(ctx context.Context, i int) {
	if len(f.cfg.Victim) == 0 {
		return
	}
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 8*time.Second)
		g, err := f.api.Acquire(actx, client.AcquireRequest{Key: f.cfg.Victim[0], Holder: f.holder("victim-waiter", i), TTL: "1s", Wait: "5s"})
		cancel()
		if ctx.Err() != nil {
			return
		}
		f.tally.Add(history.FloodVictimAcquire, code(err))
		if err == nil {
			f.release(ctx, g)
		}
		pace(ctx, 250*time.Millisecond) // a refusal comes at once: knock, not spin
	}
}

// victimTake tries to take each of the other tenant's keys for a minute,
// and reads them.
func (f *Flood) victimTake(ctx context.Context, i int) {
	for n := 0; ctx.Err() == nil && len(f.cfg.Victim) > 0; n++ {
		key := f.cfg.Victim[n%len(f.cfg.Victim)]
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		g, err := f.api.Acquire(actx, client.AcquireRequest{Key: key, Holder: f.holder("taker", i), TTL: "1m"})
		cancel()
		if ctx.Err() != nil {
			return
		}
		f.tally.Add(history.FloodVictimAcquire, code(err))
		if err == nil {
			f.release(ctx, g)
		}
		actx, cancel = context.WithTimeout(ctx, 5*time.Second)
		_, err = f.api.Key(actx, key)
		cancel()
		if ctx.Err() != nil {
			return
		}
		f.tally.Add(history.FloodVictimRead, code(err))
		pace(ctx, 50*time.Millisecond)
	}
}

// victimWatch follows every key: an event of one of the other tenant's
// keys is a leak, counted as such.
func (f *Flood) victimWatch(ctx context.Context) {
	if f.cfg.VictimPrefix == "" {
		return
	}
	for ev := range f.api.Watch(ctx, client.WatchOptions{Progress: time.Second}) {
		switch {
		case ev.Type == "error":
			f.tally.Add(history.FloodVictimRead, ev.Reason)
		case strings.HasPrefix(ev.Key, f.cfg.VictimPrefix):
			f.tally.Add(history.FloodVictimRead, "leak")
		}
	}
}

// watch opens a never-reading watch stream (with progress every 100 ms)
// against the node at ep and holds it to the end; while the node refuses
// it, it asks again every half second: the streams past the flooder's share
// keep knocking at it.
func (f *Flood) watch(ctx context.Context, ep string) {
	u := "http://" + ep + "/v1/watch?prefix=" + url.QueryEscape(f.cfg.Identity+"/") + "&progress=100ms"
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(sctx, http.MethodGet, u, nil)
		if f.cfg.Token != "" {
			req.Header.Set("Authorization", "Bearer "+f.cfg.Token)
		}
		resp, err := f.hc.Do(req)
		if err != nil {
			cancel()
			if ctx.Err() == nil {
				f.tally.Add(history.FloodWatch, history.CodeTransport)
			}
			pace(ctx, 200*time.Millisecond)
			continue
		}
		c := firstEvent(resp, cancel)
		f.tally.Add(history.FloodWatch, c)
		if c == history.CodeOK {
			<-ctx.Done() // never read again, never give the slot back
		} else {
			pace(ctx, 500*time.Millisecond)
		}
		resp.Body.Close()
		cancel()
	}
}

// firstEvent reads a watch answer up to its first event: a refusal is an
// error body, or (a limit, or a node that cannot serve the stream now) an
// "unavailable" event whose reason is the code; anything else is an open
// stream, "ok". It gives up (cancel) after 3 s without an event.
func firstEvent(resp *http.Response, cancel context.CancelFunc) string {
	if resp.StatusCode != http.StatusOK {
		var er client.ErrorResponse
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if json.Unmarshal(data, &er) != nil || er.Code == "" {
			return fmt.Sprintf("http_%d", resp.StatusCode)
		}
		return er.Code
	}
	t := time.AfterFunc(3*time.Second, cancel)
	defer t.Stop()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if data, ok := strings.CutPrefix(line, "data:"); ok {
			var ev client.WatchEvent
			if json.Unmarshal([]byte(strings.TrimSpace(data)), &ev) == nil && ev.Type == client.WatchUnavailable {
				return ev.Reason
			}
			return history.CodeOK
		}
		if err != nil {
			return history.CodeTransport
		}
	}
}
