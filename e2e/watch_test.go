package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// recorder keeps what one watcher received.
type recorder struct {
	mu  sync.Mutex
	evs []client.WatchEvent
}

func (r *recorder) run(ctx context.Context, ch <-chan client.WatchEvent) {
	for ev := range ch {
		r.mu.Lock()
		r.evs = append(r.evs, ev)
		r.mu.Unlock()
	}
}

func (r *recorder) events() []client.WatchEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]client.WatchEvent(nil), r.evs...)
}

// checkWatcher checks one watcher's events against the acknowledged grants:
// ids strictly increase (nothing twice), each key's grant tokens strictly
// increase, and every acknowledged grant is there.
func checkWatcher(evs []client.WatchEvent, acked map[string][]fence.Token) error {
	var last uint64
	seen := map[string]map[fence.Token]bool{}
	high := map[string]fence.Token{}
	for _, ev := range evs {
		switch ev.Type {
		case client.WatchReset:
			return fmt.Errorf("reset (%s): this test expects none", ev.Reason)
		case client.WatchState:
			high[ev.Key] = ev.Token
			continue
		case client.WatchSync:
			if ev.Index < last {
				return fmt.Errorf("sync %d after event %d", ev.Index, last)
			}
			last = ev.Index
			continue
		}
		if ev.Index <= last {
			return fmt.Errorf("event %+v after index %d: out of order or twice", ev, last)
		}
		last = ev.Index
		if ev.Type == "granted" || ev.Type == "handed_off" {
			if ev.Token <= high[ev.Key] {
				return fmt.Errorf("grant %+v is not above the key's token %s", ev, high[ev.Key])
			}
			high[ev.Key] = ev.Token
			if seen[ev.Key] == nil {
				seen[ev.Key] = map[fence.Token]bool{}
			}
			seen[ev.Key][ev.Token] = true
		}
	}
	for key, toks := range acked {
		for _, tok := range toks {
			if !seen[key][tok] {
				return fmt.Errorf("acknowledged grant %s of key %s was never delivered", tok, key)
			}
		}
	}
	return nil
}

// TestWatchAcrossLeaderKillAndFreeze: watchers on every node see every
// acknowledged grant once, in order, while the leader is killed and a node
// they watch through is frozen (SIGSTOP, as cut off as a partition) and
// resumed.
func TestWatchAcrossLeaderKillAndFreeze(t *testing.T) {
	c := startOpsCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eps := c.Endpoints()
	// Every key starts held, so each watcher starts from a known token.
	writer := client.New(eps)
	acked := map[string][]fence.Token{}
	keys := []string{"w/a", "w/b"}
	for _, k := range keys {
		if _, err := writer.Acquire(ctx, client.AcquireRequest{Key: k, Holder: "init", TTL: "1m"}); err != nil {
			t.Fatal(err)
		}
	}
	var recs []*recorder
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	for i := range eps {
		// Each watcher prefers another node.
		rot := append(append([]string(nil), eps[i:]...), eps[:i]...)
		r := &recorder{}
		recs = append(recs, r)
		go r.run(wctx, client.New(rot).Watch(wctx, client.WatchOptions{Prefix: "w/", Progress: 300 * time.Millisecond}))
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		for i, r := range recs {
			if len(r.events()) == 0 {
				return fmt.Errorf("watcher %d has not started", i)
			}
		}
		return nil
	})
	grantRound := func(round int) {
		t.Helper()
		for _, k := range keys {
			ki, err := writer.Key(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if ki.State == "held" {
				_, _ = writer.Release(ctx, client.ReleaseRequest{Key: k, Holder: ki.Holder, Token: ki.Token})
			}
			g, err := writer.Acquire(ctx, client.AcquireRequest{Key: k, Holder: fmt.Sprintf("h%d", round), TTL: "1m"})
			if err != nil {
				if errors.Is(err, client.ErrUnknownOutcome) {
					continue // maybe granted: not required to be seen
				}
				t.Fatal(err)
			}
			acked[k] = append(acked[k], g.Token)
		}
	}
	for round := 0; round < 5; round++ {
		grantRound(round)
	}
	lead, err := c.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(lead)
	for round := 5; round < 10; round++ {
		grantRound(round)
	}
	if err := c.StartNode(lead); err != nil {
		t.Fatal(err)
	}
	newLead, err := c.Leader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var frozen *proccluster.Node
	for _, n := range c.Nodes {
		if n != newLead && n != lead {
			frozen = n
		}
	}
	if err := c.Pause(frozen); err != nil {
		t.Fatal(err)
	}
	for round := 10; round < 15; round++ {
		grantRound(round)
	}
	if err := c.Resume(frozen); err != nil {
		t.Fatal(err)
	}
	for round := 15; round < 20; round++ {
		grantRound(round)
	}
	testutil.Eventually(t, 60*time.Second, func() error {
		for i, r := range recs {
			if err := checkWatcher(r.events(), acked); err != nil {
				return fmt.Errorf("watcher %d: %v", i, err)
			}
		}
		return nil
	})
	stopWatch()
	// The controls: a dropped grant, and an event delivered twice, fail.
	evs := recs[0].events()
	for i, ev := range evs {
		if ev.Type == "granted" {
			dropped := append(append([]client.WatchEvent(nil), evs[:i]...), evs[i+1:]...)
			if checkWatcher(dropped, acked) == nil && isAcked(acked, ev) {
				t.Fatalf("the check missed a dropped grant %+v", ev)
			}
			replayed := append(append([]client.WatchEvent(nil), evs...), ev)
			if checkWatcher(replayed, acked) == nil {
				t.Fatalf("the check missed a replayed event %+v", ev)
			}
			break
		}
	}
}

func isAcked(acked map[string][]fence.Token, ev client.WatchEvent) bool {
	for _, tok := range acked[ev.Key] {
		if tok == ev.Token {
			return true
		}
	}
	return false
}
