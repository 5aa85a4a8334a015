package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/jepsen-like/history"
)

const ms = int64(time.Millisecond)

// servedEvery returns operations of one client completing every step from
// from to to, all served (alternating kinds, refusals with a verdict
// included).
func servedEvery(client int, from, to, step int64) []history.Op {
	var ops []history.Op
	for t, i := from, 0; t <= to; t, i = t+step, i+1 {
		o := history.Op{Client: client, Kind: history.Verify, Invoke: t - step/2, Complete: t, Outcome: history.OK}
		if i%3 == 1 {
			o = history.Op{Client: client, Kind: history.Acquire, Invoke: t - step/2, Complete: t, Outcome: history.Fail, Code: "held"}
		}
		ops = append(ops, o)
	}
	return ops
}

func availOpts() AvailabilityOptions {
	return AvailabilityOptions{Nemeses: []string{"freeze-follower", "slow-node"}, ElectionTimeout: 500 * time.Millisecond, Margin: time.Second}
}

func TestAvailabilityPassesWhenClientsAreServed(t *testing.T) {
	var ops []history.Op
	ops = append(ops, servedEvery(0, 0, 20_000*ms, 100*ms)...)
	ops = append(ops, servedEvery(1, 0, 20_000*ms, 150*ms)...)
	// A gap of 1.2 s inside the window: under the bound of 1.5 s.
	ops = append(ops, servedEvery(2, 0, 5_000*ms, 100*ms)...)
	ops = append(ops, servedEvery(2, 6_200*ms, 20_000*ms, 100*ms)...)
	faults := []history.Fault{{Index: 0, Nemesis: "freeze-follower", Start: 4_000 * ms, End: 9_000 * ms}}
	r := Availability(ops, faults, availOpts())
	expect(t, r, true)
	if len(r.Unavailability) != 1 {
		t.Fatalf("figures %+v", r.Unavailability)
	}
	u := r.Unavailability[0]
	if u.Samples != 3 || u.Max != 1200*time.Millisecond || u.P99 != u.Max || u.Bound != 1500*time.Millisecond {
		t.Fatalf("figures %+v", u)
	}
}

func TestAvailabilityFailsOnALongGap(t *testing.T) {
	var ops []history.Op
	ops = append(ops, servedEvery(0, 0, 20_000*ms, 100*ms)...)
	// Client 1 is served until 4.5 s, then only timeouts until 8 s.
	ops = append(ops, servedEvery(1, 0, 4_500*ms, 100*ms)...)
	ops = append(ops,
		history.Op{Client: 1, Kind: history.Acquire, Invoke: 4_500 * ms, Complete: 8_500 * ms, Outcome: history.Info, Code: "outcome_unknown"},
		history.Op{Client: 1, Kind: history.Verify, Invoke: 8_500 * ms, Complete: 9_000 * ms, Outcome: history.Info, Code: "unavailable"})
	ops = append(ops, servedEvery(1, 9_100*ms, 20_000*ms, 100*ms)...)
	faults := []history.Fault{{Index: 3, Nemesis: "slow-node", Start: 4_000 * ms, End: 9_000 * ms}}
	r := Availability(ops, faults, availOpts())
	expect(t, r, false)
	if r.Count != 1 || !strings.Contains(r.Violations[0], "c1 went 4.6s without service") {
		t.Fatalf("violations %q", r.Violations)
	}
	if u := r.Unavailability[0]; u.Max != 4600*time.Millisecond {
		t.Fatalf("figures %+v", u)
	}
}

func TestAvailabilityWindows(t *testing.T) {
	var ops []history.Op
	// Served until 3 s, then nothing until 30 s: the gap is cut where the
	// next fault (a partition, out of scope) begins, and a client that was
	// never served before the window (the recovery probe) is left out.
	ops = append(ops, servedEvery(0, 0, 3_000*ms, 100*ms)...)
	ops = append(ops, servedEvery(0, 30_000*ms, 31_000*ms, 100*ms)...)
	ops = append(ops, history.Op{Client: 0, Kind: history.Acquire, Invoke: 3_050 * ms, Complete: 29_900 * ms, Outcome: history.Info, Code: "outcome_unknown"})
	ops = append(ops, servedEvery(9, 25_000*ms, 31_000*ms, 100*ms)...)
	// The resource's operations are not fenced's service.
	ops = append(ops, history.Op{Client: 0, Kind: history.Write, Invoke: 4_000 * ms, Complete: 4_001 * ms, Outcome: history.OK})
	faults := []history.Fault{
		{Index: 0, Nemesis: "freeze-follower", Start: 4_000 * ms, End: 5_000 * ms},
		{Index: 1, Nemesis: "partition-leader", Start: 5_200 * ms, End: 29_000 * ms},
	}
	r := Availability(ops, faults, availOpts())
	expect(t, r, true) // 1.2 s from the fault's start to the next fault
	if u := r.Unavailability[0]; u.Samples != 1 || u.Max != 1200*time.Millisecond {
		t.Fatalf("figures %+v", u)
	}
	// No fault in scope: a pass that says so.
	r = Availability(ops, faults[1:], availOpts())
	expect(t, r, true)
	if len(r.Unavailability) != 0 || !strings.Contains(r.Summary, "no fault") {
		t.Fatalf("%+v", r)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i))
	}
	if p := percentile(ds, 99); p != 198 {
		t.Fatalf("p99 of 1..200 = %v", p)
	}
	if p := percentile(ds[:9], 99); p != 9 {
		t.Fatalf("p99 of 1..9 = %v", p)
	}
	if p := percentile(ds[:9], 50); p != 5 {
		t.Fatalf("p50 of 1..9 = %v", p)
	}
}

// A client that asks nothing in a window (the operator, who force-releases
// only while answers are lost) is not a client without service there.
func TestAvailabilityIgnoresIdleClients(t *testing.T) {
	var ops []history.Op
	ops = append(ops, servedEvery(0, 0, 20_000*ms, 100*ms)...)
	ops = append(ops, servedEvery(7, 0, 2_000*ms, 100*ms)...) // idle from 2 s on
	faults := []history.Fault{{Index: 0, Nemesis: "freeze-follower", Start: 4_000 * ms, End: 9_000 * ms}}
	r := Availability(ops, faults, availOpts())
	expect(t, r, true)
	if u := r.Unavailability[0]; u.Samples != 1 {
		t.Fatalf("an idle client was measured: %+v", u)
	}
}
