package checker

import (
	"strings"
	"testing"

	"github.com/fenced/fenced/jepsen-like/history"
)

func TestTenants(t *testing.T) {
	good := func() map[string]map[string]int {
		return map[string]map[string]int{
			history.FloodWatch:         {history.CodeOK: 300, "too_many_watches": 40, "not_leader": 12},
			history.FloodCycle:         {history.CodeOK: 9000, history.CodeTransport: 3},
			history.FloodWait:          {"held": 50, "too_many_waiters": 20},
			history.FloodVictimAcquire: {"forbidden": 200, "unavailable": 1},
			history.FloodVictimRead:    {"forbidden": 100},
		}
	}
	alice := []history.Op{
		{Kind: history.Acquire, Key: "jepsen/k1", Holder: "alice/c0", Outcome: history.OK, Granted: 5},
		{Kind: history.Acquire, Key: "jepsen/k1", Holder: "alice/c3", Outcome: history.Fail, Code: "held", HeldBy: "alice/c0"},
	}
	if r := Tenants(alice, good(), "mallory"); !r.Pass {
		t.Fatalf("a flood held to its shares failed: %s %v", r.Summary, r.Violations)
	}
	cases := []struct {
		name  string
		ops   []history.Op
		flood func(map[string]map[string]int)
		want  string
	}{
		{"alice refused for a share", append(alice, history.Op{Kind: history.Acquire, Key: "jepsen/k1", Holder: "alice/c6", Outcome: history.Fail, Code: "too_many_waiters"}),
			nil, "429 too_many_waiters"},
		{"mallory holds alice's key", append(alice, history.Op{Kind: history.Acquire, Key: "jepsen/k1", Holder: "alice/c6", Outcome: history.Fail, Code: "held", HeldBy: "mallory/taker0"}),
			nil, "held the other tenant's key"},
		{"mallory took alice's key", alice, func(f map[string]map[string]int) { f[history.FloodVictimAcquire][history.CodeOK] = 3 }, "victim-acquire was answered ok 3 times"},
		{"mallory read alice's key", alice, func(f map[string]map[string]int) { f[history.FloodVictimRead]["leak"] = 1 }, "victim-read was answered leak"},
		{"watch share never reached", alice, func(f map[string]map[string]int) { delete(f[history.FloodWatch], "too_many_watches") }, "never refused too_many_watches"},
		{"an internal error", alice, func(f map[string]map[string]int) { f[history.FloodCycle]["internal"] = 1 }, "cycle was answered internal"},
	}
	for _, c := range cases {
		f := good()
		if c.flood != nil {
			c.flood(f)
		}
		r := Tenants(c.ops, f, "mallory")
		if r.Pass || !strings.Contains(strings.Join(r.Violations, "\n"), c.want) {
			t.Errorf("%s: pass=%v %v; want a violation naming %q", c.name, r.Pass, r.Violations, c.want)
		}
	}
}
