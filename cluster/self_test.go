package cluster

import (
	"time"

	"testing"

	"github.com/fenced/fenced/internal/testutil"
)

// A node whose raft is restarting (to start a new term) or stopping is not
// thereby removed: only a configuration without itself says so. Reading the
// configuration through a wait that raft's restart ends made a single-node
// cluster call itself removed, and answer not_member, each time it exhausted
// the seq space of a term.
func TestUnreadableConfigurationIsNotARemoval(t *testing.T) {
	tc := newTestCluster(t, 1)
	_, lead := tc.leader()
	testutil.Eventually(t, 10*time.Second, func() error {
		if s := lead.Self(); s != SelfMember {
			return testutil.Errorf("self is %v, want member", s)
		}
		return nil
	})
	// What restartRaft does before it starts raft again.
	if err := lead.shutdownRaft(); err != nil {
		t.Fatal(err)
	}
	lead.raftMu.Lock()
	close(lead.raftDone)
	lead.raftMu.Unlock()
	if s := lead.Self(); s != SelfMember {
		t.Fatalf("with raft stopped, the node says it is %v; want member (nothing said it was removed)", s)
	}
	if err := lead.MemberErr(); err != nil {
		t.Fatalf("with raft stopped: %v", err)
	}
}
