package checker

import (
	"testing"
	"time"

	"github.com/fenced/fenced/jepsen-like/history"
)

func TestLeaseBound(t *testing.T) {
	s := int64(time.Second)
	acq := func(key string, at int64) history.Op {
		return history.Op{Kind: history.Acquire, Key: key, Outcome: history.OK, Granted: 1<<32 | 1, Invoke: at, Complete: at + s/10}
	}
	end := func(key string, at int64) history.Op {
		return history.Op{Kind: "lease-end", Key: key, Invoke: at, Complete: at}
	}
	for _, tc := range []struct {
		name string
		ops  []history.Op
		pass bool
	}{
		{"ended in time", []history.Op{acq("a", 0), end("a", 5*s)}, true},
		{"ended late", []history.Op{acq("a", 0), end("a", 9*s)}, false},
		{"never ended", []history.Op{acq("a", 0)}, false},
		{"one late of two", []history.Op{acq("a", 0), acq("b", s), end("a", 2*s), end("b", 20*s)}, false},
	} {
		if r := LeaseBound(tc.ops, "lease-end", 7*time.Second); r.Pass != tc.pass {
			t.Errorf("%s: pass %v, want %v: %v", tc.name, r.Pass, tc.pass, r.Violations)
		}
	}
}
