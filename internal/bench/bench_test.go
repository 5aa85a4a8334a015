package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
)

// shapeServer answers acquires and releases at once and records what the
// shape workloads ask for, so that the test can tell a semaphore cycle from
// a lock's without a cluster.
type shapeServer struct {
	mu       sync.Mutex
	acquires []client.AcquireRequest
	multis   []client.AcquireMultiRequest
	releases []client.ReleaseRequest
	tok      atomic.Uint64
}

func (s *shapeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(r.Body)
	var out any
	s.mu.Lock()
	switch r.URL.Path {
	case "/v1/acquire":
		var req client.AcquireRequest
		_ = dec.Decode(&req)
		s.acquires = append(s.acquires, req)
		out = client.Grant{Key: req.Key, Holder: req.Holder, Token: fence.Token(s.tok.Add(1)), Limit: req.Limit, Mode: req.Mode}
	case "/v1/acquire/multi":
		var req client.AcquireMultiRequest
		_ = dec.Decode(&req)
		s.multis = append(s.multis, req)
		var set client.MultiGrant
		for _, k := range req.Keys {
			set.Grants = append(set.Grants, client.Grant{Key: k, Holder: req.Holder, Token: fence.Token(s.tok.Add(1))})
		}
		out = set
	case "/v1/release":
		var req client.ReleaseRequest
		_ = dec.Decode(&req)
		s.releases = append(s.releases, req)
		out = client.ReleaseResponse{Key: req.Key, Token: req.Token, State: "free"}
	default:
		s.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// Each shape workload asks for its shape (a permit of a 4-permit key, a
// shared grant, a two-key set from the ring), waits for it, and releases
// every grant it got with that grant's token.
func TestShapeWorkloads(t *testing.T) {
	for _, tc := range []struct {
		workload string
		check    func(t *testing.T, s *shapeServer)
	}{
		{SemCycle, func(t *testing.T, s *shapeServer) {
			for _, a := range s.acquires {
				if a.Limit != SemLimit || a.Mode != "" || a.Wait == "" || !strings.HasSuffix(a.Key, "/sem") {
					t.Fatalf("a permit's acquire: %+v", a)
				}
			}
		}},
		{SharedCycle, func(t *testing.T, s *shapeServer) {
			for _, a := range s.acquires {
				if a.Mode != client.ModeShared || a.Limit != 0 || a.Wait == "" || !strings.HasSuffix(a.Key, "/shared") {
					t.Fatalf("a shared acquire: %+v", a)
				}
			}
		}},
		{MultiCycle, func(t *testing.T, s *shapeServer) {
			if len(s.acquires) != 0 || len(s.multis) == 0 {
				t.Fatalf("%d single acquires, %d multi", len(s.acquires), len(s.multis))
			}
			sets := map[string]bool{}
			for _, m := range s.multis {
				if len(m.Keys) != 2 || m.Wait == "" {
					t.Fatalf("a multi acquire: %+v", m)
				}
				sets[strings.Join(m.Keys, " ")] = true
			}
			// Three clients: sets {0,1}, {1,2}, {2,3}, each overlapping a
			// neighbour's.
			if len(sets) != 3 {
				t.Fatalf("sets %v, want one per client", sets)
			}
		}},
	} {
		t.Run(tc.workload, func(t *testing.T) {
			s := &shapeServer{}
			srv := httptest.NewServer(s)
			defer srv.Close()
			c := client.New([]string{srv.URL})
			r, err := Run(context.Background(), c, Config{Workload: tc.workload, Clients: 3, Duration: 100 * time.Millisecond, Prefix: "p"})
			if err != nil {
				t.Fatal(err)
			}
			if r.Ops == 0 || r.Errors != 0 {
				t.Fatalf("%d ops, %d errors (%s)", r.Ops, r.Errors, r.FirstErr)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.acquires)+len(s.multis) == 0 || len(s.releases) == 0 {
				t.Fatalf("%d acquires, %d multi, %d releases", len(s.acquires), len(s.multis), len(s.releases))
			}
			for _, rel := range s.releases {
				if rel.Token == 0 || rel.Force {
					t.Fatalf("a release not of its grant: %+v", rel)
				}
			}
			tc.check(t, s)
		})
	}
}

// MultiKeys draws client i's set from a ring: neighbours share a key, and
// clients MultiRing apart ask for the same set.
func TestMultiKeys(t *testing.T) {
	for i, want := range map[int][]string{
		0:             {"p/multi/0", "p/multi/1"},
		MultiRing - 1: {"p/multi/7", "p/multi/0"},
		MultiRing + 2: {"p/multi/2", "p/multi/3"},
	} {
		if got := MultiKeys("p", i); !slices.Equal(got, want) {
			t.Errorf("MultiKeys(p, %d) = %v, want %v", i, got, want)
		}
	}
}
