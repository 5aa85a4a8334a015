package nemesis

import (
	"context"
	"errors"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/jepsen-like/backend"
	"github.com/fenced/fenced/jepsen-like/history"
)

// fakeBackend is enough of a backend for the grudge builders.
type fakeBackend struct {
	backend.Backend
	ids []string
}

func (f fakeBackend) Nodes() []string { return f.ids }
func (f fakeBackend) Name() string    { return "fake" }

func cut(g backend.Grudge, a, b string) bool {
	for _, x := range g[a] {
		if x == b {
			return true
		}
	}
	return false
}

func TestGrudges(t *testing.T) {
	for _, n := range []int{3, 5} {
		var ids []string
		for i := 1; i <= n; i++ {
			ids = append(ids, string(rune('a'+i-1)))
		}
		e := &Env{B: fakeBackend{ids: ids}, Rng: rand.New(rand.NewSource(1))}
		for i := 0; i < 50; i++ {
			// A split is symmetric and leaves exactly one majority side.
			g := e.randomSplit()
			for a, peers := range g {
				for _, b := range peers {
					if !cut(g, b, a) {
						t.Fatalf("split %v is not symmetric", g)
					}
				}
			}
			minority := 0
			for _, id := range ids {
				if len(g[id]) > n/2 {
					minority++
				}
			}
			if minority == 0 || 2*minority >= n {
				t.Fatalf("split %v: %d nodes on the minority side of %d", g, minority, n)
			}
			// A bridge: exactly one node hears everyone, and every node
			// hears a majority including itself.
			g = e.bridge()
			bridges := 0
			for _, id := range ids {
				if len(g[id]) == 0 {
					bridges++
				}
				if 2*(n-len(g[id])) <= n {
					t.Fatalf("bridge %v: %s hears no majority", g, id)
				}
			}
			if bridges != 1 {
				t.Fatalf("bridge %v has %d bridge nodes", g, bridges)
			}
		}
	}
}

func TestPauseOutlastsElectionAndTTL(t *testing.T) {
	e := &Env{ElectionTimeout: 500 * time.Millisecond, TTL: 2 * time.Second}
	if d := e.PauseDuration(); d <= e.TTL || d <= e.ElectionTimeout {
		t.Fatalf("pause %v does not outlast TTL %v and election timeout %v", d, e.TTL, e.ElectionTimeout)
	}
}

// rollingBackend simulates a cluster for the rolling restart: a stopped node
// comes back behind the leader and catches up after a few status polls.
type rollingBackend struct {
	backend.Backend
	t       *testing.T
	ids     []string
	mu      sync.Mutex
	down    map[string]bool
	lag     map[string]int // status polls until a restarted node caught up
	lagFor  int            // polls each restart lags for; <0: never catches up
	leader  string
	term    uint64
	events  []string
	maxDown int
}

func (f *rollingBackend) Nodes() []string { return f.ids }
func (f *rollingBackend) Name() string    { return "fake" }

func (f *rollingBackend) Running(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.down[id]
}

func (f *rollingBackend) Kill(context.Context, string) error {
	f.t.Error("a rolling restart must never kill -9")
	return nil
}

func (f *rollingBackend) Stop(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[id] = true
	f.events = append(f.events, "stop "+id)
	n := 0
	for _, d := range f.down {
		if d {
			n++
		}
	}
	f.maxDown = max(f.maxDown, n)
	if id == f.leader {
		// The leader hands leadership over to another node.
		for _, o := range f.ids {
			if !f.down[o] {
				f.leader = o
				f.term++
				break
			}
		}
	}
	return nil
}

func (f *rollingBackend) Restart(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[id] = false
	f.lag[id] = f.lagFor
	f.events = append(f.events, "restart "+id)
	return nil
}

func (f *rollingBackend) status(_ context.Context, id string) (*client.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[id] {
		return nil, errors.New("connection refused")
	}
	st := &client.Status{ID: id, LeaderID: f.leader, Term: f.term, Ready: id == f.leader, CommitIndex: 100, AppliedIndex: 100}
	switch lag := f.lag[id]; {
	case lag < 0:
		st.AppliedIndex = 50
	case lag > 0:
		st.AppliedIndex = 50
		f.lag[id]--
		if f.lag[id] == 0 {
			f.events = append(f.events, "caught up "+id)
		}
	}
	return st, nil
}

func newRolling(t *testing.T, lagFor int) (*rollingBackend, *Env) {
	f := &rollingBackend{t: t, ids: []string{"n1", "n2", "n3"}, down: map[string]bool{}, lag: map[string]int{},
		lagFor: lagFor, leader: "n2", term: 3}
	e := &Env{B: f, Rec: history.NewRecorder(), Rng: rand.New(rand.NewSource(1)), Log: hclog.NewNullLogger(),
		Status: f.status, CatchUp: 2 * time.Second}
	return f, e
}

// TestRollingRestart: every node is stopped gracefully (never killed) and
// started again, one at a time, and the next is stopped only once the last
// one caught up with the leader.
func TestRollingRestart(t *testing.T) {
	f, e := newRolling(t, 3)
	if err := e.Supported(RollingRestart); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background(), RollingRestart); err != nil {
		t.Fatal(err)
	}
	if f.maxDown != 1 {
		t.Fatalf("%d nodes down at once, want 1", f.maxDown)
	}
	var stopped []string
	for i, ev := range f.events {
		if id, ok := strings.CutPrefix(ev, "stop "); ok {
			stopped = append(stopped, id)
			if len(stopped) > 1 {
				prev := stopped[len(stopped)-2]
				if i < 2 || f.events[i-1] != "caught up "+prev || f.events[i-2] != "restart "+prev {
					t.Fatalf("%s stopped before %s was restarted and caught up: %v", id, prev, f.events)
				}
			}
		}
	}
	sort.Strings(stopped)
	if strings.Join(stopped, ",") != "n1,n2,n3" {
		t.Fatalf("stopped %v, want every node once: %v", stopped, f.events)
	}
	faults := e.Rec.Faults()
	if len(faults) != 1 || faults[0].Nemesis != RollingRestart || faults[0].End < faults[0].Start || len(faults[0].Nodes) != 3 {
		t.Fatalf("fault timeline: %+v", faults)
	}
}

// TestRollingRestartStopsWhenBehind: a node that does not catch up ends the
// rollout, with an error, and no other node is stopped after it.
func TestRollingRestartStopsWhenBehind(t *testing.T) {
	f, e := newRolling(t, -1)
	err := e.Run(context.Background(), RollingRestart)
	if err == nil || !strings.Contains(err.Error(), "not caught up") {
		t.Fatalf("err = %v, want not caught up", err)
	}
	stops := 0
	for _, ev := range f.events {
		if strings.HasPrefix(ev, "stop ") {
			stops++
		}
	}
	if stops != 1 || f.maxDown != 1 {
		t.Fatalf("rollout went on after a node fell behind: %v", f.events)
	}
	for _, id := range f.ids {
		if !f.Running(id) {
			t.Fatalf("%s left down", id)
		}
	}
	if d := e.Rec.Faults()[0].Detail; !strings.Contains(d, "not caught up") {
		t.Fatalf("fault detail %q does not say the node fell behind", d)
	}
}
