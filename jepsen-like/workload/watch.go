package workload

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/jepsen-like/history"
)

// Positive controls of the watch checkers.
const (
	// BrokenWatchDrop: the watchers drop every fifth grant they receive,
	// as a watcher that silently skips a change would.
	BrokenWatchDrop = "watch-drop"
	// BrokenWatchReplay: the watchers receive an old event again after a
	// later one, as a server that replays its history would send it.
	BrokenWatchReplay = "watch-replay"
)

func init() { BrokenModes = append(BrokenModes, BrokenWatchDrop, BrokenWatchReplay) }

// WatchProgress is how often the watchers' quiet streams confirm they are
// current: short, so a node cut off is left quickly.
const WatchProgress = 500 * time.Millisecond

// Watchers follow the workload's keys through faults: per node, a client
// (each prefers another node, and moves on when it fails) with two watches
// of every key, which share one stream once both caught up with it (as the
// Go client's watches of one prefix do), and one election observer on the
// first key, which the workload's clients contend for as candidates would.
// Each watch is a stream to the checkers: the first n are the first watch
// of each client, the next n the second.
type Watchers struct {
	broken string
	opts   []client.Option
	log    hclog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup

	now func() int64

	mu         sync.Mutex
	streams    [][]client.WatchEvent
	leaders    [][]client.Leader
	deliveries []history.Delivery
}

// StartWatchers starts the watchers; they run until Stop. now is the run's
// clock (history.Recorder.Now), which dates each grant's arrival; opts are
// added to every client's (credentials).
func StartWatchers(ctx context.Context, endpoints []string, broken string, now func() int64, log hclog.Logger, opts ...client.Option) *Watchers {
	ctx, cancel := context.WithCancel(ctx)
	w := &Watchers{broken: broken, opts: opts, log: log, cancel: cancel, now: now,
		streams: make([][]client.WatchEvent, 2*len(endpoints)), leaders: make([][]client.Leader, len(endpoints))}
	for i := range endpoints {
		rot := append(append([]string(nil), endpoints[i:]...), endpoints[:i]...)
		c := client.New(rot, append([]client.Option{client.WithHTTPClient(&http.Client{Transport: &http.Transport{
			DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 4}})}, opts...)...)
		w.wg.Add(3)
		for _, s := range []int{i, len(endpoints) + i} {
			go func() {
				defer w.wg.Done()
				w.follow(s, c.Watch(ctx, client.WatchOptions{Prefix: "jepsen/", Progress: WatchProgress}))
			}()
		}
		go func() {
			defer w.wg.Done()
			for l := range c.NewElection(KeyName(0), "", client.ElectionOptions{}).Observe(ctx) {
				w.mu.Lock()
				w.leaders[i] = append(w.leaders[i], l)
				w.mu.Unlock()
			}
		}()
	}
	return w
}

func (w *Watchers) follow(i int, ch <-chan client.WatchEvent) {
	grants, changes := 0, 0
	var old *client.WatchEvent
	for ev := range ch {
		change := ev.Type != client.WatchState && ev.Type != client.WatchSync && ev.Type != client.WatchReset
		if change {
			changes++
		}
		if w.broken == BrokenWatchDrop && (ev.Type == "granted" || ev.Type == "handed_off") {
			if grants++; grants%5 == 0 {
				continue
			}
		}
		at := w.now()
		w.mu.Lock()
		w.streams[i] = append(w.streams[i], ev)
		if ev.Type == "granted" || ev.Type == "handed_off" {
			w.deliveries = append(w.deliveries, history.Delivery{Stream: i, Key: ev.Key, Token: ev.Token, At: at})
		}
		if w.broken == BrokenWatchReplay && change {
			if changes == 2 {
				e := ev
				old = &e
			}
			if changes == 5 && old != nil {
				w.streams[i] = append(w.streams[i], *old)
			}
		}
		w.mu.Unlock()
	}
}

// last returns the highest index stream i delivered (an event or a sync).
func (w *Watchers) last(i int) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var m uint64
	for _, ev := range w.streams[i] {
		m = max(m, ev.Index)
	}
	return m
}

// Stop waits (up to wait) until every stream delivered everything up to a
// linearizable read made now, then ends the watchers and returns what each
// stream and each observer received.
func (w *Watchers) Stop(endpoints []string, wait time.Duration) ([][]client.WatchEvent, [][]client.Leader) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c := client.New(endpoints, w.opts...)
	if k, err := c.KeyWait(ctx, KeyName(0), 0, 0); err == nil {
		for i := range w.streams {
			for w.last(i) < k.WatchIndex && ctx.Err() == nil {
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
			if w.last(i) < k.WatchIndex {
				w.log.Warn("watch stream did not catch up", "stream", i, "last", w.last(i), "want", k.WatchIndex)
			}
		}
	} else {
		w.log.Warn("final read for the watchers", "error", err)
	}
	w.cancel()
	w.wg.Wait()
	w.log.Info("watchers done", "haul", w.String())
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.streams, w.leaders
}

// Deliveries returns when each stream received each grant, in arrival
// order per stream.
func (w *Watchers) Deliveries() []history.Delivery {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]history.Delivery(nil), w.deliveries...)
}

// String describes the watchers' haul, for the log.
func (w *Watchers) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, resets := 0, 0
	for _, s := range w.streams {
		n += len(s)
		for _, ev := range s {
			if ev.Type == client.WatchReset {
				resets++
			}
		}
	}
	return fmt.Sprintf("%d streams, %d events, %d resets", len(w.streams), n, resets)
}
