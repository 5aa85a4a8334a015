package cluster

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// craft re-encodes a backup with an edited header and image, with a correct
// SHA-256, as anyone who can write a backup file can.
func craft(t *testing.T, backup []byte, edit func(*BackupMeta, *fsm.Image)) []byte {
	t.Helper()
	meta, img, err := DecodeBackup(backup)
	if err != nil {
		t.Fatal(err)
	}
	edit(&meta, img)
	meta.SHA256 = ""
	return imageBackup(t, meta, img)
}

// sampleBackup returns a backup of a small state without a running cluster.
func sampleBackup(t *testing.T) []byte {
	t.Helper()
	f := fsm.New(fsm.Config{})
	applyAt(f, 1, 3, fsm.SetClusterID{ID: "c-old"})
	applyAt(f, 2, 3, fsm.Acquire{Key: "k", Holder: "h", TTL: time.Second})
	data, _ := backupOfImage(t, f, "n1", 3, time.Now().UTC(), nil)
	return data
}

// Every header field is checked against the bounds of an epoch and against
// the image it describes; a backup that breaks one is refused, whatever its
// checksum says.
func TestDecodeBackupRejectsCraftedHeader(t *testing.T) {
	good := sampleBackup(t)
	if _, _, err := DecodeBackup(good); err != nil {
		t.Fatalf("sound backup refused: %v", err)
	}
	cases := map[string]func(*BackupMeta, *fsm.Image){
		"epoch near 2^64":        func(m *BackupMeta, _ *fsm.Image) { m.Epoch = math.MaxUint64 - DefaultRestoreMargin + 5 },
		"epoch above MaxEpoch":   func(m *BackupMeta, _ *fsm.Image) { m.Epoch = fence.MaxEpoch + 1 },
		"max epoch above":        func(m *BackupMeta, _ *fsm.Image) { m.MaxEpoch = math.MaxUint64 },
		"floor above":            func(m *BackupMeta, _ *fsm.Image) { m.Floor = fence.MaxEpoch + 1 },
		"term above":             func(m *BackupMeta, _ *fsm.Image) { m.Term = math.MaxUint64 },
		"negative keys":          func(m *BackupMeta, _ *fsm.Image) { m.Keys = -1 },
		"keys not the image's":   func(m *BackupMeta, _ *fsm.Image) { m.Keys = 1 << 40 },
		"index not the image's":  func(m *BackupMeta, _ *fsm.Image) { m.Index++ },
		"image index near 2^64":  func(m *BackupMeta, img *fsm.Image) { m.Index, img.Applied = math.MaxUint64, math.MaxUint64 },
		"image floor above":      func(m *BackupMeta, img *fsm.Image) { m.Floor, img.Floor = math.MaxUint64, math.MaxUint64 },
		"epoch not term + floor": func(m *BackupMeta, _ *fsm.Image) { m.Epoch = m.Term + m.Floor + 7 },
		"max epoch not image's":  func(m *BackupMeta, _ *fsm.Image) { m.MaxEpoch = 0 },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			if meta, _, err := DecodeBackup(craft(t, good, edit)); !errors.Is(err, ErrBadBackup) {
				t.Fatalf("crafted backup accepted: %+v (err %v)", meta, err)
			}
		})
	}
}

// A crafted backup whose header epoch is near 2^64 once made the new floor
// wrap around, after which new tokens were lower than tokens already issued.
// It is refused, and nothing changes.
func TestRestoreOfCraftedEpochChangesNothing(t *testing.T) {
	tc := newTestCluster(t, 1)
	ctx := context.Background()
	_, lead := tc.leader()
	g, err := lead.Acquire(ctx, AcquireArgs{Key: "k", Holder: "h", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	backup, _, err := lead.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	floor := lead.fsm.Floor()
	bad := craft(t, backup, func(m *BackupMeta, _ *fsm.Image) {
		m.ClusterID = "another"                             // so the margin is added
		m.Epoch = math.MaxUint64 - DefaultRestoreMargin + 2 // wraps to 1 with the margin
	})
	res, err := lead.Restore(ctx, bad, RestoreOptions{})
	if !errors.Is(err, ErrBadRequest) {
		ng, aerr := lead.Acquire(ctx, AcquireArgs{Key: "new", Holder: "h", TTL: time.Minute})
		t.Fatalf("crafted restore: %+v, err %v; a new key then gets %v (epoch %d) after %v (epoch %d), err %v",
			res, err, ng.Token, ng.Token.Epoch(), g.Token, g.Token.Epoch(), aerr)
	}
	if lead.fsm.Floor() != floor {
		t.Fatalf("refused restore moved the floor %d -> %d", floor, lead.fsm.Floor())
	}
	// Options given through the Go API are bounded too.
	for _, o := range []RestoreOptions{{AboveEpoch: math.MaxUint64}, {Margin: math.MaxUint64}, {AboveEpoch: fence.MaxEpoch}} {
		if _, err := lead.Restore(ctx, backup, o); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("restore with %+v: %v", o, err)
		}
	}
	if lead.fsm.Floor() != floor {
		t.Fatalf("refused restores moved the floor %d -> %d", floor, lead.fsm.Floor())
	}
}

// The applied index the FSM reports after a restore is an index of this
// cluster's own log, not the index the backup had in the cluster it came
// from: a backup of a cluster far ahead must not carry its index here.
func TestRestoreKeepsLocalAppliedIndex(t *testing.T) {
	ctx := context.Background()
	tc := newTestCluster(t, 1)
	_, lead := tc.leader()
	churn(t, lead, 2, 2)
	backup, _, err := lead.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const foreign = 1 << 40 // a long-lived cluster's index
	from := craft(t, backup, func(m *BackupMeta, img *fsm.Image) {
		m.ClusterID, img.ClusterID = "another", "another"
		m.Index, img.Applied = foreign, foreign
	})
	before := lead.r().LastIndex()
	if _, err := lead.Restore(ctx, from, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	_, lead = tc.leader()
	if got, last := lead.fsm.Applied(), lead.r().LastIndex(); got >= foreign || last >= foreign || got < before {
		t.Fatalf("after restoring a backup of index %d into a log at %d: the FSM reports applied %d, raft's last index is %d",
			uint64(foreign), before, got, last)
	}
}

// applyAt applies c to f as the entry at index of term.
func applyAt(f *fsm.FSM, index, term uint64, c fsm.Command) {
	f.Apply(&raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: fsm.Encode(c)})
}
