package client

import (
	"testing"

	"github.com/fenced/fenced/fence"
)

func TestObserverNeverReportsAnOlderLeader(t *testing.T) {
	var o observer
	steps := []struct {
		ev   WatchEvent
		want bool
	}{
		{WatchEvent{Type: WatchState, Holder: "a", Token: 1<<32 | 1, State: "held"}, true},
		{WatchEvent{Type: "renewed", Holder: "a", Token: 1<<32 | 1, State: "held"}, false},
		{WatchEvent{Type: "released", Holder: "a", Token: 1<<32 | 1, State: "released"}, true},
		{WatchEvent{Type: WatchState, Holder: "a", Token: 1<<32 | 1, State: "held"}, false},
		{WatchEvent{Type: "granted", Holder: "b", Token: 2<<32 | 1, State: "held"}, true},
		{WatchEvent{Type: WatchReset}, false},
		{WatchEvent{Type: WatchState, Holder: "a", Token: 1<<32 | 1, State: "held"}, false},
		{WatchEvent{Type: "renewed", Holder: "b", Token: 2<<32 | 1, State: "held", Value: "v"}, true},
		// The end of a lock-delay reports no leader: not even "none" again
		// after the expiry said so, nor a grant that already ended.
		{WatchEvent{Type: "lock_delay_ended", Holder: "b", Token: 2<<32 | 1, State: "expired"}, false},
		{WatchEvent{Type: "expired", Holder: "b", Token: 2<<32 | 1, State: "expired", LockDelay: "1s"}, true},
		{WatchEvent{Type: "lock_delay_ended", Holder: "b", Token: 2<<32 | 1, State: "expired"}, false},
		{WatchEvent{Type: "granted", Holder: "c", Token: 2<<32 | 2, State: "held"}, true},
	}
	for i, s := range steps {
		if _, ok := o.next("e", s.ev); ok != s.want {
			t.Fatalf("step %d (%+v): reported %v, want %v", i, s.ev, ok, s.want)
		}
	}
}

// TestObserverReportsNoLeaderAfterAResyncWithoutIt: a resync that shows no
// leader (the key is absent, or a server that sends no state for a missing
// key: nothing before the sync) reports that nobody leads, keeping the
// last token; so does a deleted event of the election's key.
func TestObserverReportsNoLeaderAfterAResyncWithoutIt(t *testing.T) {
	var o observer
	t1, t2 := fence.Token(1<<32|1), fence.Token(2<<32|1)
	steps := []struct {
		ev   WatchEvent
		want Leader
		ok   bool
	}{
		// Absent before any leader: nothing to report yet.
		{WatchEvent{Type: WatchState, Index: 3, State: StateAbsent}, Leader{}, false},
		{WatchEvent{Type: WatchSync, Index: 3}, Leader{}, false},
		{WatchEvent{Type: WatchState, Holder: "a", Token: t1, State: "held"}, Leader{Name: "e", Holder: "a", Token: t1}, true},
		{WatchEvent{Type: WatchReset, Reason: "compacted"}, Leader{}, false},
		{WatchEvent{Type: WatchSync, Index: 9}, Leader{Name: "e", Token: t1, Index: 9}, true},
		{WatchEvent{Type: WatchReset, Reason: "lagged"}, Leader{}, false},
		{WatchEvent{Type: WatchState, Index: 10, State: StateAbsent}, Leader{}, false}, // nobody leads already
		{WatchEvent{Type: WatchSync, Index: 10}, Leader{}, false},
		{WatchEvent{Type: "granted", Index: 11, Holder: "b", Token: t2, State: "held"}, Leader{Name: "e", Holder: "b", Token: t2, Index: 11}, true},
		{WatchEvent{Type: WatchSync, Index: 11}, Leader{}, false}, // no reset before it: nothing to say
		{WatchEvent{Type: WatchReset, Reason: "restored"}, Leader{}, false},
		{WatchEvent{Type: WatchState, Index: 14, State: StateAbsent}, Leader{Name: "e", Token: t2, Index: 14}, true},
		{WatchEvent{Type: WatchSync, Index: 14}, Leader{}, false},
		{WatchEvent{Type: "granted", Index: 15, Holder: "c", Token: t2 + 1, State: "held"}, Leader{Name: "e", Holder: "c", Token: t2 + 1, Index: 15}, true},
		{WatchEvent{Type: WatchDeleted, Index: 17, Holder: "c", Token: t2 + 1, State: StateAbsent}, Leader{Name: "e", Token: t2 + 1, Index: 17}, true},
	}
	for i, s := range steps {
		l, ok := o.next("e", s.ev)
		if ok != s.ok || ok && l != s.want {
			t.Fatalf("step %d (%+v): reported %+v %v, want %+v %v", i, s.ev, l, ok, s.want, s.ok)
		}
	}
}
