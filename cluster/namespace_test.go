package cluster

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// The lease table's count of an identity's leases (its holder and every
// holder under "name/") stays what a look at every holder would say, as
// leases come and go.
func TestNamespaceCountFollowsLeases(t *testing.T) {
	l := newLeases(hclog.NewNullLogger(), func(uint64, fsm.Expire, time.Duration) {}, nil)
	holders := []string{"alice", "alice/w1", "alice/w1/t", "alice2", "alice2/x", "bob", "bob/a"}
	names := []string{"alice", "alice/w1", "alice2", "bob", "carol"}
	rng := rand.New(rand.NewSource(1))
	live := map[string]int32{}
	for i := 0; i < 2000; i++ {
		key := fmt.Sprintf("k%d", rng.Intn(40))
		l.mu.Lock()
		if ls, ok := live[key]; ok {
			l.removeLocked(ls)
			delete(live, key)
		} else {
			live[key] = l.insertLocked(fsm.KeyState{Key: key, Holder: holders[rng.Intn(len(holders))], Token: fence.Token(1<<32 | 1), TTL: time.Second}, 0)
		}
		l.mu.Unlock()
		for _, name := range names {
			want := 0
			for _, ls := range live {
				if h := l.holders[l.rec(ls).holder].holder; h == name || strings.HasPrefix(h, name+"/") {
					want++
				}
			}
			if got := l.namespaceCount(name); got != want {
				t.Fatalf("step %d: %s counts %d leases, want %d", i, name, got, want)
			}
		}
	}
}
