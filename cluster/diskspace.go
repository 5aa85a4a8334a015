package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/metrics"
)

// ErrNoSpace refuses a new key (an acquire that is not the holder's renewal)
// while the leader's data dir is below its free-space floor, or its log store
// ran out of space. Nothing was proposed. Renewals, releases, verifies and
// keepalives go on: they add no key, and a release frees what the key held.
var ErrNoSpace = errors.New("the leader's data dir is low on free space: no new keys until space is freed")

// Free-space floor defaults (cmd/fenced's flags): below the larger of the two
// the leader refuses new keys, long before the disk is full.
const (
	DefaultDataDirMinFree        = 64 << 20
	DefaultDataDirMinFreePercent = 5
	defaultDiskCheckInterval     = time.Second
	// noSpaceTransferBackoff spaces out the leadership transfers of a
	// leader without space: a cluster whose voters are all full must not
	// hand leadership around on every check.
	noSpaceTransferBackoff = 30 * time.Second
)

// freeSpaceFunc returns the free (available to this process) and total bytes
// of the file system holding dir. A variable of the node (Config.freeSpace) so
// tests can fill a disk without filling one.
type freeSpaceFunc func(dir string) (free, total uint64, err error)

// diskWatch is the node's view of its data dir's space: the latest check,
// and whether the leader refuses new keys for lack of space.
type diskWatch struct {
	latest       atomic.Pointer[DataDirStatus]
	enospc       atomic.Bool  // a log write failed with ENOSPC since the last check
	lastTransfer atomic.Int64 // unix nanos of the latest hand-off try
}

// load returns the latest measure; the zero value before the first.
func (d *diskWatch) load() DataDirStatus {
	if p := d.latest.Load(); p != nil {
		return *p
	}
	return DataDirStatus{}
}

// floorOf is the free-space floor of a file system of total bytes: the larger
// of the configured bytes and percent.
func (c *Config) floorOf(total uint64) uint64 {
	floor := c.DataDirMinFree
	if pct := uint64(c.DataDirMinFreePercent * float64(total) / 100); pct > floor {
		floor = pct
	}
	return floor
}

// NoSpace reports whether this node refuses new keys for lack of space.
func (n *Node) NoSpace() bool { return n.disk.load().NoSpace }

// DataDir returns the data dir's use as the latest check saw it.
func (n *Node) DataDir() DataDirStatus { return n.disk.load() }

// sawENOSPC hears of a log write that failed for lack of space: new keys are
// refused at once, without waiting for the next check.
func (n *Node) sawENOSPC(err error) {
	if !errors.Is(err, syscall.ENOSPC) {
		return
	}
	n.disk.enospc.Store(true)
	if st := n.disk.load(); !st.NoSpace {
		st.NoSpace = true
		st.Reason = "a raft log write failed: no space left on device"
		n.setDisk(st)
	}
}

// checkSpaceFor refuses an acquire that would add a key while this node has
// no space: all but the holder's renewal of a key it holds.
func (n *Node) checkSpaceFor(a AcquireArgs) error {
	if !n.NoSpace() || n.holds(a.Key, a.Holder) {
		return nil
	}
	return ErrNoSpace
}

// watchDisk checks the data dir's free space every DiskCheckInterval until
// the node stops.
func (n *Node) watchDisk() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.DiskCheckInterval)
	defer t.Stop()
	for {
		n.checkDisk()
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
	}
}

// checkDisk takes one measure of the data dir and acts on it: the state,
// metrics and a log line when it changes, and a leadership transfer when this
// leader has no space and a voter that has can take over.
func (n *Node) checkDisk() {
	prev := n.disk.load()
	st := DataDirStatus{Path: n.cfg.DataDir, UsedBytes: dirBytes(n.cfg.DataDir)}
	free, total, err := n.cfg.freeSpace(n.cfg.DataDir)
	switch {
	case err != nil:
		// Unknown free space: judge by the log store alone.
		st.Reason = "free space unknown: " + err.Error()
		st.NoSpace = n.disk.enospc.Load()
	default:
		st.FreeBytes, st.TotalBytes, st.FloorBytes = free, total, n.cfg.floorOf(total)
		st.NoSpace = free < st.FloorBytes
		if st.NoSpace {
			st.Reason = fmt.Sprintf("data dir free space %d bytes is under its floor of %d bytes", free, st.FloorBytes)
		}
	}
	if !st.NoSpace {
		n.disk.enospc.Store(false)
	} else if st.Reason == "" {
		st.Reason = "a raft log write failed: no space left on device"
	}
	n.setDisk(st)
	if prev.NoSpace != st.NoSpace || prev.Path == "" && st.NoSpace {
		if st.NoSpace {
			n.log.Warn("data dir low on free space: refusing new keys; renewals, releases and verifies go on", "reason", st.Reason,
				"free_bytes", st.FreeBytes, "floor_bytes", st.FloorBytes, "data_dir_bytes", st.UsedBytes)
		} else {
			n.log.Info("data dir has free space again: new keys accepted", "free_bytes", st.FreeBytes, "floor_bytes", st.FloorBytes)
		}
	}
	if st.NoSpace && n.IsLeader() {
		n.handOffForSpace()
	}
}

// setDisk records a measure and its metrics.
func (n *Node) setDisk(st DataDirStatus) {
	n.disk.latest.Store(&st)
	metrics.DiskFreeBytes.Set(float64(st.FreeBytes))
	metrics.DataDirBytes.Set(float64(st.UsedBytes))
	if st.NoSpace {
		metrics.NoSpace.Set(1)
	} else {
		metrics.NoSpace.Set(0)
	}
}

// handOffForSpace hands leadership to a voter whose data dir has space, when
// one says so (Config.PeerHasSpace); at most once per noSpaceTransferBackoff
// (Config.noSpaceBackoff in tests).
// Without such a voter this node keeps leading: it still serves renewals,
// releases and verifies, which a cluster with no leader would not.
func (n *Node) handOffForSpace() {
	if n.cfg.PeerHasSpace == nil || time.Since(time.Unix(0, n.disk.lastTransfer.Load())) < n.cfg.noSpaceBackoff {
		return
	}
	f := n.r().GetConfiguration()
	if n.wait(f) != nil {
		return
	}
	https := n.fsm.Members()
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if id == n.cfg.ID || s.Suffrage != raft.Voter {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok := n.cfg.PeerHasSpace(ctx, id, https[id])
		cancel()
		if !ok {
			continue
		}
		n.disk.lastTransfer.Store(time.Now().UnixNano())
		n.log.Warn("handing leadership to a voter with free space", "to", id)
		if err := n.TransferLeadership(id); err != nil {
			n.log.Warn("leadership transfer for lack of space failed", "to", id, "error", err)
		}
		return
	}
	n.disk.lastTransfer.Store(time.Now().UnixNano())
	n.log.Warn("no voter with free space to hand leadership to: this leader keeps serving renewals, releases and verifies")
}

// dirBytes is the bytes of the regular files under dir (errors skip a file).
func dirBytes(dir string) uint64 {
	var total uint64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			total += uint64(info.Size())
		}
		return nil
	})
	return total
}
