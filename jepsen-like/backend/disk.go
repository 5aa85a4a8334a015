package backend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// DiskFiller is a backend whose nodes each keep their data dir on a small file
// system of their own (Config.DiskSize), which the disk nemesis fills.
type DiskFiller interface {
	// CanFillDisk reports why the backend cannot fill a node's disk, or nil.
	CanFillDisk() error
	// FillDisk writes a file into a node's data dir until its file system
	// is full; FreeDisk removes it.
	FillDisk(ctx context.Context, id string) error
	FreeDisk(ctx context.Context, id string) error
}

// smallDisks are the nodes' file systems: an ext4 image per node on a loop
// device, mounted at the node's data dir (root only).
type smallDisks struct {
	dirs []string // mounted data dirs
}

// mountSmallDisks makes and mounts an ext4 file system of size at dir/nI for
// each of nodes nodes.
func mountSmallDisks(dir string, nodes int, size string) (*smallDisks, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("small disks need root (a loop device per node)")
	}
	d := &smallDisks{}
	for i := 1; i <= nodes; i++ {
		data := filepath.Join(dir, fmt.Sprintf("n%d", i))
		img := data + ".img"
		if err := os.MkdirAll(data, 0o700); err != nil {
			d.unmount()
			return nil, err
		}
		for _, cmd := range [][]string{{"truncate", "-s", size, img}, {"mkfs.ext4", "-q", "-F", img}, {"mount", "-o", "loop", img, data}} {
			if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
				d.unmount()
				return nil, fmt.Errorf("small disk %s: %v: %w: %s", data, cmd, err, out)
			}
		}
		d.dirs = append(d.dirs, data)
	}
	return d, nil
}

// unmount unmounts every file system it mounted; the nodes must be stopped.
func (d *smallDisks) unmount() error {
	if d == nil {
		return nil
	}
	var errs []error
	for _, data := range d.dirs {
		if out, err := exec.Command("umount", data).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("umount %s: %w: %s", data, err, out))
		}
	}
	d.dirs = nil
	return errors.Join(errs...)
}

// fillerName is the file the disk nemesis fills a data dir with.
const fillerName = "chaos-filler"

// fillDir writes into dataDir until its file system is full.
func fillDir(dataDir string) error {
	f, err := os.OpenFile(filepath.Join(dataDir, fillerName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			return nil // full
		}
	}
}

// freeDir removes what fillDir wrote.
func freeDir(dataDir string) error {
	err := os.Remove(filepath.Join(dataDir, fillerName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// DiskSlower is a backend whose nodes run a chaos build of fenced started with
// --unsafe-fsync-delay-file SlowFsyncFile: while that file exists in a node's
// data dir, each of its raft log fsyncs first waits the duration written in
// it.
type DiskSlower interface {
	// SlowDisk makes every fsync of a node's raft log take d longer;
	// FastDisk undoes it.
	SlowDisk(ctx context.Context, id string, d time.Duration) error
	FastDisk(ctx context.Context, id string) error
}

// SlowFsyncFile is the control file of the slow-disk nemesis, relative to the
// data dir (fenced --unsafe-fsync-delay-file).
const SlowFsyncFile = "chaos-slow-fsync"

func slowDir(dataDir string, d time.Duration) error {
	return os.WriteFile(filepath.Join(dataDir, SlowFsyncFile), []byte(d.String()), 0o600)
}

func fastDir(dataDir string) error {
	err := os.Remove(filepath.Join(dataDir, SlowFsyncFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// SlowDisk implements DiskSlower.
func (l *Local) SlowDisk(_ context.Context, id string, d time.Duration) error {
	n, err := l.node(id)
	if err != nil {
		return err
	}
	return slowDir(n.DataDir, d)
}

// FastDisk implements DiskSlower.
func (l *Local) FastDisk(_ context.Context, id string) error {
	n, err := l.node(id)
	if err != nil {
		return err
	}
	return fastDir(n.DataDir)
}

// SlowDisk implements DiskSlower.
func (b *Netns) SlowDisk(_ context.Context, id string, d time.Duration) error {
	n, err := b.node(id)
	if err != nil {
		return err
	}
	return slowDir(n.DataDir, d)
}

// FastDisk implements DiskSlower.
func (b *Netns) FastDisk(_ context.Context, id string) error {
	n, err := b.node(id)
	if err != nil {
		return err
	}
	return fastDir(n.DataDir)
}
