package client

import "testing"

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
