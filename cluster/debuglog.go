package cluster

import (
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// GrantRecord is one grant found in a node's data: the audit trail of who
// held what.
type GrantRecord struct {
	Key    string      `json:"key"`
	Holder string      `json:"holder"`
	Token  fence.Token `json:"token"`
	Epoch  uint64      `json:"epoch"`
	Seq    uint64      `json:"seq"`
	TTL    string      `json:"ttl"`
	Term   uint64      `json:"term"`
	Index  uint64      `json:"index"`
	// Source is "snapshot" for the last grant of a key kept in the snapshot
	// (earlier grants of it were compacted away) and "log" for a grant
	// replayed from the log.
	Source string `json:"source"`
	// State is the key's state in a snapshot record.
	State string `json:"state,omitempty"`
}

// ReadGrants replays a stopped node's data dir — its newest snapshot, then
// every log entry after it, through a fresh FSM — and calls emit for every
// grant in log order. The tokens are the ones the cluster computed, because
// the FSM is deterministic. The end of one node's log may hold entries that
// were never committed; compare the records of a majority of nodes.
func ReadGrants(dataDir string, emit func(GrantRecord) error) error {
	store, err := openStoreReadOnly(dataDir)
	if err != nil {
		return fmt.Errorf("open raft log (is the node stopped?): %w", err)
	}
	defer store.Close()
	f := fsm.New(fsm.Config{})
	after, err := replaySnapshot(dataDir, f, emit)
	if err != nil {
		return err
	}
	first, err := store.FirstIndex()
	if err != nil {
		return err
	}
	last, err := store.LastIndex()
	if err != nil {
		return err
	}
	for idx := max(first, after+1); idx <= last && idx > 0; idx++ {
		var l raft.Log
		if err := store.GetLog(idx, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return err
		}
		if err := replayEntry(f, &l, emit); err != nil {
			return err
		}
	}
	return nil
}

func replaySnapshot(dataDir string, f *fsm.FSM, emit func(GrantRecord) error) (uint64, error) {
	snaps, err := raft.NewFileSnapshotStore(dataDir, 2, io.Discard)
	if err != nil {
		return 0, err
	}
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		return 0, err
	}
	meta, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		return 0, err
	}
	if err := f.Restore(rc); err != nil {
		return 0, err
	}
	for _, k := range f.Keys("", 0) {
		rec := record(k, 0, "snapshot")
		rec.State = k.State.String()
		if err := emit(rec); err != nil {
			return 0, err
		}
	}
	return meta.Index, nil
}

func replayEntry(f *fsm.FSM, l *raft.Log, emit func(GrantRecord) error) error {
	if l.Type != raft.LogCommand {
		return nil
	}
	res, ok := f.Apply(l).(*fsm.Result)
	if !ok {
		return nil
	}
	if _, isAcquire := mustDecode(l.Data).(fsm.Acquire); isAcquire && res.Err == nil && !res.Renewed {
		if err := emit(record(res.Key, l.Term, "log")); err != nil {
			return err
		}
	}
	// A release or an expiry that frees a contended key grants it to the
	// first waiter in the same entry.
	if next := res.Next; next != nil && next.Err == nil && !next.Renewed {
		return emit(record(next.Key, l.Term, "log"))
	}
	return nil
}

func mustDecode(b []byte) fsm.Command {
	c, _ := fsm.Decode(b) // Apply already decoded it successfully
	return c
}

func record(k fsm.KeyState, term uint64, source string) GrantRecord {
	return GrantRecord{Key: k.Key, Holder: k.Holder, Token: k.Token, Epoch: k.Token.Epoch(), Seq: k.Token.Seq(),
		TTL: k.TTL.String(), Term: term, Index: k.Index, Source: source}
}
