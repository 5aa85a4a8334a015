package checker

import (
	"testing"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

func grantEv(index uint64, key, holder string, tok fence.Token) client.WatchEvent {
	return client.WatchEvent{Type: "granted", Index: index, Key: key, Holder: holder, Token: tok, State: "held"}
}

func releaseEv(index uint64, key, holder string, tok fence.Token) client.WatchEvent {
	return client.WatchEvent{Type: "released", Index: index, Key: key, Holder: holder, Token: tok, State: "released"}
}

// watchHistory: three acknowledged grants of k, the first before the
// watchers started (their state shows it).
func watchHistory() ([]history.Op, []client.WatchEvent) {
	ops := []history.Op{
		{Kind: history.Acquire, Key: "k", Holder: "a", Outcome: history.OK, Granted: 1<<32 | 1},
		{Kind: history.Acquire, Key: "k", Holder: "b", Outcome: history.OK, Granted: 1<<32 | 2},
		{Kind: history.Acquire, Key: "k", Holder: "c", Outcome: history.OK, Granted: 2<<32 | 1},
	}
	evs := []client.WatchEvent{
		{Type: client.WatchState, Index: 4, Key: "k", Holder: "a", Token: 1<<32 | 1, State: "held"},
		{Type: client.WatchSync, Index: 4},
		releaseEv(5, "k", "a", 1<<32|1),
		grantEv(6, "k", "b", 1<<32|2),
		releaseEv(7, "k", "b", 1<<32|2),
		{Type: client.WatchSync, Index: 9},
		grantEv(10, "k", "c", 2<<32|1),
	}
	return ops, evs
}

func failed(rs []Result) map[string]bool {
	out := map[string]bool{}
	for _, r := range rs {
		if !r.Pass {
			out[r.Name] = true
		}
	}
	return out
}

func TestWatchCheckers(t *testing.T) {
	ops, evs := watchHistory()
	obs := [][]client.Leader{{{Holder: "a", Token: 1<<32 | 1}, {Token: 1<<32 | 1}, {Holder: "b", Token: 1<<32 | 2}}}
	if f := failed(Watch(ops, [][]client.WatchEvent{evs, evs}, obs)); len(f) != 0 {
		t.Fatalf("a clean history fails %v", f)
	}
	cases := []struct {
		name    string
		streams [][]client.WatchEvent
		obs     [][]client.Leader
		want    string
	}{
		// A watcher that drops an event: the grant of b.
		{"dropped grant", [][]client.WatchEvent{append(append([]client.WatchEvent(nil), evs[:3]...), evs[4:]...)}, nil, "watch-complete"},
		// A server that replays an old event.
		{"replayed event", [][]client.WatchEvent{append(append([]client.WatchEvent(nil), evs...), evs[3])}, nil, "watch-order"},
		{"lower token", [][]client.WatchEvent{append(append([]client.WatchEvent(nil), evs...), grantEv(11, "k", "d", 1<<32|3))}, nil, "watch-tokens"},
		{"streams disagree", [][]client.WatchEvent{evs, append(append([]client.WatchEvent(nil), evs[:6]...), grantEv(10, "k", "x", 2<<32|1))}, nil, "watch-committed"},
		{"older leader", nil, [][]client.Leader{{{Holder: "b", Token: 1<<32 | 2}, {Holder: "a", Token: 1<<32 | 1}}}, "election-observer"},
		// The end of a lock-delay that no expiry of its grant came before,
		// or one carrying a new grant.
		{"delay end without expiry", [][]client.WatchEvent{append(append([]client.WatchEvent(nil), evs...),
			client.WatchEvent{Type: "lock_delay_ended", Index: 11, Key: "k", Holder: "c", Token: 2<<32 | 1, State: "expired"})}, nil, "watch-tokens"},
		{"delay end of a new grant", [][]client.WatchEvent{append(append([]client.WatchEvent(nil), evs...),
			client.WatchEvent{Type: "expired", Index: 11, Key: "k", Holder: "c", Token: 2<<32 | 1, State: "expired", LockDelay: "1s"},
			client.WatchEvent{Type: "lock_delay_ended", Index: 12, Key: "k", Holder: "d", Token: 2<<32 | 2, State: "expired"})}, nil, "watch-tokens"},
		{"ended leadership again", nil, [][]client.Leader{{{Holder: "b", Token: 1<<32 | 2}, {Token: 1<<32 | 2}, {Holder: "b", Token: 1<<32 | 2}}}, "election-observer"},
	}
	for _, c := range cases {
		if f := failed(Watch(ops, c.streams, c.obs)); !f[c.want] {
			t.Errorf("%s: checker %s passed (failed: %v)", c.name, c.want, f)
		}
	}
	// The end of a lock-delay after the expiry of its grant, seen as an
	// event or in a resync's state, is no violation.
	delayed := append(append([]client.WatchEvent(nil), evs...),
		client.WatchEvent{Type: "expired", Index: 11, Key: "k", Holder: "c", Token: 2<<32 | 1, State: "expired", LockDelay: "1s"},
		client.WatchEvent{Type: "lock_delay_ended", Index: 12, Key: "k", Holder: "c", Token: 2<<32 | 1, State: "expired"})
	resynced := append(append([]client.WatchEvent(nil), evs...), client.WatchEvent{Type: client.WatchReset, Reason: "lagged"},
		client.WatchEvent{Type: client.WatchState, Index: 11, Key: "k", Holder: "c", Token: 2<<32 | 1, State: "expired"},
		client.WatchEvent{Type: client.WatchSync, Index: 11},
		client.WatchEvent{Type: "lock_delay_ended", Index: 12, Key: "k", Holder: "c", Token: 2<<32 | 1, State: "expired"})
	if f := failed(Watch(ops, [][]client.WatchEvent{delayed, resynced}, obs)); len(f) != 0 {
		t.Fatalf("a lock-delay's end after its expiry fails %v", f)
	}
	// A reclamation's deleted events share one index; a resync shows a
	// reclaimed key as absent; neither is a violation. The same key twice
	// at one index is.
	reclaimed := append(append([]client.WatchEvent(nil), evs...),
		releaseEv(11, "k", "c", 2<<32|1),
		client.WatchEvent{Type: client.WatchDeleted, Index: 12, Key: "j", Holder: "x", Token: 1<<32 | 9, State: client.StateAbsent},
		client.WatchEvent{Type: client.WatchDeleted, Index: 12, Key: "k", Holder: "c", Token: 2<<32 | 1, State: client.StateAbsent},
		client.WatchEvent{Type: client.WatchReset, Reason: "lagged"},
		client.WatchEvent{Type: client.WatchState, Index: 13, Key: "k", State: client.StateAbsent},
		client.WatchEvent{Type: client.WatchSync, Index: 13})
	if f := failed(Watch(ops, [][]client.WatchEvent{reclaimed, reclaimed[:len(evs)+3]}, obs)); len(f) != 0 {
		t.Fatalf("a stream with a reclamation fails %v", f)
	}
	twice := append(append([]client.WatchEvent(nil), reclaimed[:len(evs)+3]...), reclaimed[len(evs)+2])
	if f := failed(Watch(ops, [][]client.WatchEvent{twice}, nil)); !f["watch-order"] {
		t.Fatalf("a deleted event told twice passes watch-order (failed: %v)", f)
	}
	// A reset is a resync, not a violation: the grants before it need not
	// all be there.
	reset := append(append([]client.WatchEvent(nil), evs[:3]...), client.WatchEvent{Type: client.WatchReset, Reason: "lagged"},
		client.WatchEvent{Type: client.WatchState, Index: 9, Key: "k", Holder: "b", Token: 1<<32 | 2, State: "released"}, evs[6])
	if f := failed(Watch(ops, [][]client.WatchEvent{reset}, nil)); len(f) != 0 {
		t.Fatalf("a stream with a resync fails %v", f)
	}
}
