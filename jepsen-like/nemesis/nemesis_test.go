package nemesis

import (
	"math/rand"
	"testing"
	"time"

	"github.com/fenced/fenced/jepsen-like/backend"
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
