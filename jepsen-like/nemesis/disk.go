package nemesis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fenced/fenced/jepsen-like/backend"
)

// FillDisk is the nemesis that fills the leader's data dir: each node keeps
// its data dir on a small file system of its own (the backend's DiskSize),
// and the nemesis writes a file into the leader's until the file system is
// full, holds, and removes it. The leader, under its free-space floor, refuses
// new grants (no_space) while renewals, releases and verifies go on, and hands
// leadership to a voter with space; once the space is freed it takes new
// grants again, with nothing else done.
const FillDisk = "fill-disk"

// SlowDisk is the nemesis that makes the leader's disk slow: every fsync of
// its raft log takes 3 s longer (a chaos build's --unsafe-fsync-delay-file)
// for the hold time. Past its --log-stall-bound (2 s) the leader stops
// leading and the others elect a leader; it follows, slowly, and catches up
// once its disk is fast again.
const SlowDisk = "slow-disk"

// slowFsyncDelay is how much longer each fsync takes under SlowDisk.
const slowFsyncDelay = 3 * time.Second

func init() { Extra = append(Extra, FillDisk, SlowDisk) }

// supportsSlowDisk reports why the backend cannot slow a node's disk.
func (e *Env) supportsSlowDisk() error {
	if _, ok := e.B.(backend.DiskSlower); !ok {
		return fmt.Errorf("%w: the %s backend cannot slow a node's disk", backend.ErrUnsupported, e.B.Name())
	}
	return nil
}

// slowDisk slows the leader's fsyncs, holds, and makes them fast again.
func (e *Env) slowDisk(ctx context.Context) error {
	d, ok := e.B.(backend.DiskSlower)
	if !ok {
		return e.supportsSlowDisk()
	}
	id := e.leaderOrRandom(ctx)
	f := e.Rec.BeginFault(SlowDisk, []string{id}, fmt.Sprintf("every raft log fsync takes %v longer", slowFsyncDelay))
	err := d.SlowDisk(ctx, id, slowFsyncDelay)
	hold(ctx, e.Hold)
	hctx, cancel := healCtx()
	defer cancel()
	err = errors.Join(err, d.FastDisk(hctx, id))
	e.Rec.EndFault(f, "fsyncs fast again")
	return err
}

// supportsFillDisk reports why the backend cannot fill a node's disk.
func (e *Env) supportsFillDisk() error {
	d, ok := e.B.(backend.DiskFiller)
	if !ok {
		return fmt.Errorf("%w: the %s backend cannot fill a node's disk", backend.ErrUnsupported, e.B.Name())
	}
	return d.CanFillDisk()
}

// fillDisk fills the leader's file system, holds, and frees it.
func (e *Env) fillDisk(ctx context.Context) error {
	d, ok := e.B.(backend.DiskFiller)
	if !ok {
		return e.supportsFillDisk()
	}
	id := e.leaderOrRandom(ctx)
	f := e.Rec.BeginFault(FillDisk, []string{id}, "fill its data dir's file system")
	err := d.FillDisk(ctx, id)
	hold(ctx, e.Hold)
	hctx, cancel := healCtx()
	defer cancel()
	err = errors.Join(err, d.FreeDisk(hctx, id))
	e.Rec.EndFault(f, "space freed")
	return err
}
