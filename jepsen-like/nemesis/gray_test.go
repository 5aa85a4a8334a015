package nemesis

import (
	"context"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/jepsen-like/backend"
	"github.com/fenced/fenced/jepsen-like/history"
)

// grayBackend records the signals the gray nemeses send.
type grayBackend struct {
	backend.Backend
	leader string

	mu     sync.Mutex
	events []string
}

func (g *grayBackend) Nodes() []string { return []string{"n1", "n2", "n3"} }
func (g *grayBackend) Endpoint(id string) string {
	return id + ":7700"
}
func (g *grayBackend) Leader(context.Context, time.Duration) (string, error) { return g.leader, nil }
func (g *grayBackend) record(e string) {
	g.mu.Lock()
	g.events = append(g.events, e)
	g.mu.Unlock()
}
func (g *grayBackend) Pause(_ context.Context, id string) error  { g.record("stop " + id); return nil }
func (g *grayBackend) Resume(_ context.Context, id string) error { g.record("cont " + id); return nil }

// grayWorkload is the Orderer, recording into the same event list.
type grayWorkload struct {
	Pauser
	b *grayBackend
}

func (w grayWorkload) ListFirst(ep string) { w.b.record("first " + ep) }

func grayEnv(leader string) (*Env, *grayBackend) {
	b := &grayBackend{leader: leader}
	return &Env{B: b, W: grayWorkload{b: b}, Rec: history.NewRecorder(), Rng: rand.New(rand.NewSource(1)),
		Log: hclog.NewNullLogger(), Hold: 10 * time.Millisecond}, b
}

func TestFreezeListsTheFrozenNodeFirst(t *testing.T) {
	for i := 0; i < 20; i++ {
		e, b := grayEnv("n2")
		if err := e.Run(context.Background(), FreezeFollower); err != nil {
			t.Fatal(err)
		}
		// Stopped first, then listed first (else the clients' first answer
		// would teach them the leader), then resumed and unlisted.
		ev := b.events
		if len(ev) != 4 || ev[0] == "stop n2" || ev[1] != "first "+ev[0][5:]+":7700" || ev[2] != "cont "+ev[0][5:] || ev[3] != "first " {
			t.Fatalf("freeze-follower events %q", ev)
		}
	}
	e, b := grayEnv("n3")
	if err := e.Run(context.Background(), FreezeLeader); err != nil {
		t.Fatal(err)
	}
	if want := []string{"stop n3", "first n3:7700", "cont n3", "first "}; !slices.Equal(b.events, want) {
		t.Fatalf("freeze-leader events %q, want %q", b.events, want)
	}
	if len(e.paused) != 0 {
		t.Fatalf("still marked paused: %v", e.paused)
	}
	faults := e.Rec.Faults()
	if len(faults) != 1 || faults[0].Nemesis != FreezeLeader || faults[0].End == 0 {
		t.Fatalf("faults %+v", faults)
	}
}

func TestSlowNodeBurstsEndRunning(t *testing.T) {
	e, b := grayEnv("n1")
	e.Hold = 100 * time.Millisecond
	if err := e.Run(context.Background(), SlowNode); err != nil {
		t.Fatal(err)
	}
	ev := b.events
	if len(ev) < 4 || ev[0][:5] != "stop " || ev[1][:6] != "first " || ev[len(ev)-1] != "first " || ev[len(ev)-2][:5] != "cont " {
		t.Fatalf("slow-node events %q", ev)
	}
	stops, conts := 0, 0
	for _, x := range ev {
		switch x[:5] {
		case "stop ":
			stops++
		case "cont ":
			conts++
		}
	}
	if stops != conts {
		t.Fatalf("%d stops, %d conts: %q", stops, conts, ev)
	}
}
