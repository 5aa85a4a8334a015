package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/fenced/fenced/internal/proccluster"
)

// Local runs the nodes as processes on 127.0.0.1. It can kill, restart and
// pause them, but not partition them: they share the loopback interface.
type Local struct {
	cfg   Config
	c     *proccluster.Cluster
	disks *smallDisks // with Config.DiskSize
}

// NewLocal returns a local backend; Start launches it.
func NewLocal(cfg Config) *Local { return &Local{cfg: cfg} }

// Name implements Backend.
func (l *Local) Name() string { return "local" }

// Start implements Backend.
func (l *Local) Start(ctx context.Context) error {
	if l.cfg.DiskSize != "" {
		d, err := mountSmallDisks(l.cfg.Dir, l.cfg.Nodes, l.cfg.DiskSize)
		if err != nil {
			return err
		}
		l.disks = d
	}
	c, err := proccluster.Start(proccluster.Options{Nodes: l.cfg.Nodes, Dir: l.cfg.Dir, Binary: l.cfg.Binary, ExtraArgs: l.cfg.Args})
	if err != nil {
		_ = l.disks.unmount()
		return fmt.Errorf("start local cluster: %w", err)
	}
	l.c = c
	if _, err := l.Leader(ctx, 30*time.Second); err != nil {
		return fmt.Errorf("local cluster: %w", err)
	}
	return nil
}

func (l *Local) node(id string) (*proccluster.Node, error) {
	if n := l.c.Node(id); n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("no node %q", id)
}

// Nodes implements Backend.
func (l *Local) Nodes() []string {
	var out []string
	for _, n := range l.c.Nodes {
		out = append(out, n.ID)
	}
	return out
}

// Endpoints implements Backend.
func (l *Local) Endpoints() []string { return l.c.Endpoints() }

// Endpoint implements Backend.
func (l *Local) Endpoint(id string) string {
	if n := l.c.Node(id); n != nil {
		return n.HTTPAddr
	}
	return ""
}

// Kill implements Backend.
func (l *Local) Kill(_ context.Context, id string) error {
	n, err := l.node(id)
	if err != nil {
		return err
	}
	l.c.Kill(n)
	return nil
}

// Stop implements Backend.
func (l *Local) Stop(_ context.Context, id string) error {
	n, err := l.node(id)
	if err != nil {
		return err
	}
	l.c.Terminate(n)
	return nil
}

// Restart implements Backend.
func (l *Local) Restart(_ context.Context, id string) error {
	n, err := l.node(id)
	if err != nil {
		return err
	}
	if n.Running() {
		return nil
	}
	return l.c.StartNode(n)
}

// Pause implements Backend.
func (l *Local) Pause(_ context.Context, id string) error {
	n, err := l.node(id)
	if err != nil {
		return err
	}
	return l.c.Pause(n)
}

// Resume implements Backend.
func (l *Local) Resume(_ context.Context, id string) error {
	n, err := l.node(id)
	if err != nil {
		return err
	}
	return l.c.Resume(n)
}

// CanPartition implements Backend: never on loopback.
func (l *Local) CanPartition() error {
	return fmt.Errorf("%w: local processes share the loopback interface; use the netns backend (root) or the docker backend", ErrUnsupported)
}

// Partition implements Backend: unsupported on loopback.
func (l *Local) Partition(context.Context, Grudge) error { return l.CanPartition() }

// Heal implements Backend: there is never a partition to remove.
func (l *Local) Heal(context.Context) error { return nil }

// Leader implements Backend.
func (l *Local) Leader(ctx context.Context, timeout time.Duration) (string, error) {
	return leaderOf(ctx, l.cfg, l.Nodes(), l.Endpoint, l.up, timeout)
}

func (l *Local) up(id string) bool {
	n := l.c.Node(id)
	return n != nil && n.Running() && !n.Paused()
}

// Running implements Backend.
func (l *Local) Running(id string) bool {
	n := l.c.Node(id)
	return n != nil && n.Running()
}

// LogPaths implements Backend.
func (l *Local) LogPaths() map[string]string {
	out := map[string]string{}
	for _, n := range l.c.Nodes {
		out[n.ID] = n.LogPath
	}
	return out
}

// Close implements Backend.
func (l *Local) Close() error {
	if l.c != nil {
		l.c.Stop()
	}
	return l.disks.unmount()
}

// CanFillDisk implements DiskFiller.
func (l *Local) CanFillDisk() error {
	if l.disks == nil {
		return fmt.Errorf("%w: the nodes' data dirs are not on small disks of their own (DiskSize)", ErrUnsupported)
	}
	return nil
}

// FillDisk implements DiskFiller.
func (l *Local) FillDisk(_ context.Context, id string) error {
	n, err := l.node(id)
	if err != nil {
		return err
	}
	return fillDir(n.DataDir)
}

// FreeDisk implements DiskFiller.
func (l *Local) FreeDisk(_ context.Context, id string) error {
	n, err := l.node(id)
	if err != nil {
		return err
	}
	return freeDir(n.DataDir)
}
