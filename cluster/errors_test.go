package cluster

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// A write error says whether the entry may have been committed: only errors
// raft raises before proposing anything are safe to retry blindly.
func TestTranslateKeepsUnknownOutcomesApart(t *testing.T) {
	diskFull := errors.New("write raft.wal: no space left on device")
	cases := []struct {
		in   error
		want error
	}{
		{nil, nil},
		{raft.ErrNotLeader, ErrNotLeader},
		{raft.ErrLeadershipTransferInProgress, ErrNotLeader},
		{raft.ErrEnqueueTimeout, ErrBusy},
		{raft.ErrLeadershipLost, ErrLeadershipLost},
		{raft.ErrAbortedByRestore, ErrLeadershipLost},
		{raft.ErrRaftShutdown, ErrLeadershipLost},
		// The leader's own log write failed; its followers may hold the
		// entry and commit it under the next leader.
		{diskFull, ErrLeadershipLost},
	}
	for _, c := range cases {
		got := translate(c.in)
		if c.want == nil {
			if got != nil {
				t.Errorf("translate(nil) = %v", got)
			}
			continue
		}
		if !errors.Is(got, c.want) {
			t.Errorf("translate(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := translate(diskFull); got.Error() == ErrLeadershipLost.Error() {
		t.Errorf("translate dropped the cause: %v", got)
	}
}
