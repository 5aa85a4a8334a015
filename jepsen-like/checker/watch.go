package checker

import (
	"fmt"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// Watch checks what the watch streams and the election observers received
// against the history (design invariant 10):
//
//   - watch-order: along a stream, change ids strictly increase (no change
//     twice, none out of order, also across resumes and resyncs), and a
//     stream's progress marks never go back;
//   - watch-tokens: per stream and key, the tokens of grants strictly
//     increase, and a lock_delay_ended names the grant the stream last saw
//     expire (it never carries a new grant);
//   - watch-committed: every event of a log index is the same on every
//     stream (events are derived from the log), and a grant's holder is the
//     holder the acquire that got its token was answered with;
//   - watch-complete: every acknowledged grant of a key is delivered by each
//     stream that was watching the key when it was made: after the stream's
//     (re)start state for the key, up to the end, unless a reset intervened;
//   - election-observer: an observer never reports a leader with a lower
//     token than one it reported, nor a leadership again after it ended.
func Watch(ops []history.Op, streams [][]client.WatchEvent, observers [][]client.Leader) []Result {
	return []Result{WatchOrder(streams), WatchTokens(streams), WatchCommitted(ops, streams), WatchComplete(ops, streams), ElectionObserver(observers)}
}

func isChange(ev client.WatchEvent) bool {
	switch ev.Type {
	case client.WatchState, client.WatchSync, client.WatchReset:
		return false
	}
	return true
}

func isGrant(ev client.WatchEvent) bool { return ev.Type == "granted" || ev.Type == "handed_off" }

// lockDelayEnded is the type of the event that says an expired grant's
// lock-delay ran out.
const lockDelayEnded = "lock_delay_ended"

// WatchOrder checks that each stream's ids strictly increase.
func WatchOrder(streams [][]client.WatchEvent) Result {
	r := Result{Name: "watch-order"}
	for s, evs := range streams {
		var last uint64
		var prev client.WatchEvent
		for _, ev := range evs {
			r.Checked++
			// A reclamation's deleted events share its index, each of
			// another key.
			sameEntry := ev.Type == client.WatchDeleted && prev.Type == client.WatchDeleted && ev.Index == prev.Index && ev.Key != prev.Key
			prev = ev
			switch {
			case sameEntry:
			case isChange(ev) && ev.Index <= last:
				r.violate("stream %d: %s of %s at index %d after index %d: twice or out of order", s, ev.Type, ev.Key, ev.Index, last)
			case !isChange(ev) && ev.Type != client.WatchReset && ev.Index < last:
				r.violate("stream %d: %s at index %d after index %d: progress went back", s, ev.Type, ev.Index, last)
			}
			last = max(last, ev.Index)
		}
	}
	return r.finish("watch events")
}

// WatchTokens checks that each stream's grants of a key strictly increase,
// and that the end of a lock-delay follows the expiry of the same grant
// (from an expired event, or a state that shows it), with nothing between.
func WatchTokens(streams [][]client.WatchEvent) Result {
	r := Result{Name: "watch-tokens"}
	for s, evs := range streams {
		high := map[string]fence.Token{}
		// last is each key's last state on the stream: token and state.
		last := map[string]client.WatchEvent{}
		for _, ev := range evs {
			if ev.Type == lockDelayEnded {
				r.Checked++
				if l, ok := last[ev.Key]; !ok || l.Token != ev.Token || l.State != "expired" || l.Type == lockDelayEnded || ev.State != "expired" {
					r.violate("stream %d: lock_delay_ended of %s token %s at index %d does not follow the expiry of that grant (last: %s token %s %s)",
						s, ev.Key, ev.Token, ev.Index, l.Type, l.Token, l.State)
				}
			}
			if ev.Key != "" && (ev.Type == client.WatchState || isChange(ev)) {
				last[ev.Key] = ev
			}
			switch {
			case ev.Type == client.WatchState && ev.State == client.StateAbsent:
				// A key that does not exist (reclaimed): no token.
			case ev.Type == client.WatchState:
				if ev.Token < high[ev.Key] {
					r.violate("stream %d: state of %s has token %s below %s already seen", s, ev.Key, ev.Token, high[ev.Key])
				}
				high[ev.Key] = max(high[ev.Key], ev.Token)
			case isGrant(ev):
				r.Checked++
				if ev.Token <= high[ev.Key] {
					r.violate("stream %d: grant of %s at index %d has token %s, not above %s", s, ev.Key, ev.Index, ev.Token, high[ev.Key])
				}
				high[ev.Key] = max(high[ev.Key], ev.Token)
			}
		}
	}
	return r.finish("grant and lock-delay end events")
}

// ackedGrants returns, per key, the holder of each token an acquire was
// answered with (a new grant, not a renewal).
func ackedGrants(ops []history.Op) map[string]map[fence.Token]string {
	out := map[string]map[fence.Token]string{}
	for _, op := range ops {
		if op.Kind != history.Acquire || op.Outcome != history.OK || op.Granted == 0 || op.Broken != "" {
			continue
		}
		if out[op.Key] == nil {
			out[op.Key] = map[fence.Token]string{}
		}
		out[op.Key][op.Granted] = op.Holder
	}
	return out
}

// WatchCommitted checks that streams agree on every index and that grants
// name the holders their acquires were answered with.
func WatchCommitted(ops []history.Op, streams [][]client.WatchEvent) Result {
	r := Result{Name: "watch-committed"}
	acked := ackedGrants(ops)
	// By index and key: a reclamation's entry is an event per key.
	type change struct {
		index uint64
		key   string
	}
	byIndex := map[change]client.WatchEvent{}
	for s, evs := range streams {
		for _, ev := range evs {
			if !isChange(ev) {
				continue
			}
			r.Checked++
			if prev, ok := byIndex[change{ev.Index, ev.Key}]; ok && prev != ev {
				r.violate("stream %d: index %d is %s %s token %s holder %s; another stream got %s %s token %s holder %s",
					s, ev.Index, ev.Type, ev.Key, ev.Token, ev.Holder, prev.Type, prev.Key, prev.Token, prev.Holder)
			}
			byIndex[change{ev.Index, ev.Key}] = ev
			if h, ok := acked[ev.Key][ev.Token]; ok && isGrant(ev) && h != ev.Holder {
				r.violate("stream %d: grant %s of %s to %s, but the acquire of %s was answered with it", s, ev.Token, ev.Key, ev.Holder, h)
			}
		}
	}
	return r.finish("change events")
}

// WatchComplete checks that no acknowledged grant was skipped. A stream
// covers a key from the first token it learned of it (a state or a grant)
// after its last reset: every acknowledged grant above that token must be
// among its grants. Streams are read to the end of the run (they caught up
// with a final linearizable read).
func WatchComplete(ops []history.Op, streams [][]client.WatchEvent) Result {
	r := Result{Name: "watch-complete"}
	acked := ackedGrants(ops)
	for s, evs := range streams {
		// Only the segment after the last reset runs to the end.
		start := 0
		for i, ev := range evs {
			if ev.Type == client.WatchReset {
				start = i + 1
			}
		}
		from := map[string]fence.Token{}
		seen := map[string]map[fence.Token]bool{}
		for _, ev := range evs[start:] {
			// An absent key's state names no token to count from: the
			// stream covers it from its next grant.
			if ev.Type != client.WatchState && !isGrant(ev) || ev.State == client.StateAbsent {
				continue
			}
			if _, ok := from[ev.Key]; !ok {
				from[ev.Key] = ev.Token
				if isGrant(ev) {
					from[ev.Key]-- // the grant itself is covered
				}
			}
			if seen[ev.Key] == nil {
				seen[ev.Key] = map[fence.Token]bool{}
			}
			seen[ev.Key][ev.Token] = true
		}
		for key, toks := range acked {
			low, ok := from[key]
			for tok := range toks {
				if !ok || tok <= low {
					continue // granted before this stream knew the key
				}
				r.Checked++
				if !seen[key][tok] {
					r.violate("stream %d: acknowledged grant %s of %s was never delivered", s, tok, key)
				}
			}
		}
	}
	return r.finish("acknowledged grants per stream")
}

// ElectionObserver checks that observers never go back to an older leader.
func ElectionObserver(observers [][]client.Leader) Result {
	r := Result{Name: "election-observer"}
	for o, ls := range observers {
		var last client.Leader
		for i, l := range ls {
			r.Checked++
			if i == 0 {
				last = l
				continue
			}
			switch {
			case l.Token < last.Token:
				r.violate("observer %d: leader %s with token %s after token %s", o, l.Holder, l.Token, last.Token)
			case l.Token == last.Token && last.Holder == "" && l.Holder != "":
				r.violate("observer %d: leadership %s reported again after it ended", o, l.Token)
			}
			last = l
		}
	}
	return r.finish(fmt.Sprintf("leader reports by %d observers", len(observers)))
}
