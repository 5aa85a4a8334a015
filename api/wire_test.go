package api

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// TestEveryWireCodeIsTheClients: the server answers only with codes the
// client module defines, so every refusal reaches a Go caller as its
// sentinel (errors.Is) and with the status the client expects.
func TestEveryWireCodeIsTheClients(t *testing.T) {
	for _, w := range wireErrors {
		if client.ErrorOfCode(w.code) == nil {
			t.Errorf("code %q (for %v) is unknown to the client module", w.code, w.err)
		}
		if code, status := codeOf(w.err); code != w.code && !errors.Is(w.err, fsm.ErrInvalid) {
			t.Errorf("%v maps to %q, want %q", w.err, code, w.code)
		} else if status != client.StatusOfCode(w.code) {
			t.Errorf("%v: status %d, the client expects %d", w.err, status, client.StatusOfCode(w.code))
		}
	}
}

// TestWatchEventsAreTheClients: the server's watch events are the client
// module's, field for field: each change of the state machine has a
// client constant, and the events the client's decoder is tested with are
// what the server encodes.
func TestWatchEventsAreTheClients(t *testing.T) {
	names := map[fsm.EventType]string{
		fsm.EventGranted: client.WatchGranted, fsm.EventRenewed: client.WatchRenewed, fsm.EventReleased: client.WatchReleased,
		fsm.EventForceReleased: client.WatchForceReleased, fsm.EventExpired: client.WatchExpired,
		fsm.EventLockDelayEnded: client.WatchLockDelayEnded, fsm.EventHandedOff: client.WatchHandedOff,
		fsm.EventDeleted: client.WatchDeleted,
	}
	for typ, name := range names {
		if string(typ) != name {
			t.Errorf("fsm event %q is %q to the client", typ, name)
		}
	}
	tok := fence.Token(2<<32 | 1)
	for _, tc := range []struct {
		got, want client.WatchEvent
	}{
		{watchEventOf(fsm.Event{Index: 44, Type: fsm.EventGranted, Key: "jobs/b", Holder: "h2", Token: tok, TTL: 30 * time.Second, State: fsm.Held, Value: "http://10.0.0.1:8080"}),
			client.WatchEvent{Type: client.WatchGranted, Index: 44, Key: "jobs/b", Holder: "h2", Token: tok, State: "held", TTL: "30s", Value: "http://10.0.0.1:8080"}},
		{watchEventOf(fsm.Event{Index: 47, Type: fsm.EventHandedOff, Key: "jobs/a", Holder: "h1", Token: tok + 1, TTL: time.Minute, LockDelay: time.Second,
			State: fsm.Held, PrevHolder: "h0", PrevToken: tok, Ended: fsm.EventExpired}),
			client.WatchEvent{Type: client.WatchHandedOff, Index: 47, Key: "jobs/a", Holder: "h1", Token: tok + 1, State: "held", TTL: "1m0s", LockDelay: "1s",
				PrevHolder: "h0", PrevToken: tok, Ended: client.WatchExpired}},
		{watchEventOf(fsm.Event{Index: 52, Type: fsm.EventDeleted, Key: "jobs/a", Holder: "h1", Token: tok + 1}),
			client.WatchEvent{Type: client.WatchDeleted, Index: 52, Key: "jobs/a", Holder: "h1", Token: tok + 1, State: client.StateAbsent}},
		{watchStateOf(fsm.KeyState{Key: "k", Holder: "h", Token: tok, State: fsm.Held, TTL: time.Second}, 41),
			client.WatchEvent{Type: client.WatchState, Index: 41, Key: "k", Holder: "h", Token: tok, State: "held", TTL: "1s"}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("server event %+v, the client's tests expect %+v", tc.got, tc.want)
		}
	}
}
