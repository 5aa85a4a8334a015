package cluster

import (
	"context"

	"github.com/fenced/fenced/fsm"
)

// ReadIndex returns an index a linearizable read may be served at: the
// commit index taken before this leader confirmed, with a quorum, that it
// still leads. The FSM has applied it when ReadIndex returns. A watch
// served by any node starts at or after the index its leader gave, so it
// starts no earlier than a linearizable read would. Not a leader:
// ErrNotLeader (ask the leader).
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	if _, err := n.requireReady(); err != nil {
		return 0, err
	}
	idx := n.r().CommitIndex()
	if err := n.confirmReady(ctx); err != nil {
		return 0, err
	}
	if err := n.fsm.WaitApplied(ctx, idx); err != nil {
		return 0, err
	}
	return idx, nil
}

// WaitApplied blocks until this node's FSM applied index, or ctx ends.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	return n.fsm.WaitApplied(ctx, index)
}

// Feed returns the event feed of this node's FSM.
func (n *Node) Feed() *fsm.Feed { return n.fsm.Feed() }
