package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// mountSmallFS mounts a new ext4 file system of size at dir, on a loop device
// backed by an image file next to dir, unmounted when the test ends (after
// the cluster stopped: cleanups run last-registered first). ext4, not tmpfs:
// like the disks fenced runs on, it reserves a WAL segment's blocks when the
// segment is created, so a full disk shows first when the log rotates to a
// new segment. It skips the test when it cannot (not root, no loop device).
func mountSmallFS(t *testing.T, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small file system per node")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	img := dir + ".img"
	for _, cmd := range [][]string{{"truncate", "-s", size, img}, {"mkfs.ext4", "-q", "-F", img}, {"mount", "-o", "loop", img, dir}} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Skipf("cannot make a small file system: %v: %v: %s", cmd, err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// fill writes a file into dir until its file system is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			return // no space left
		}
	}
}

// TestFullDiskRecoversWhenSpaceIsFreed runs real fenced nodes (one, and a
// cluster of three), each on its own 16 MiB ext4 file system, with small WAL segments and
// no free-space floor, and fills every node's file system: writes fail (the
// log cannot rotate to a new segment). Freeing the space is all it takes for
// the cluster to serve new keys again, without a restart or an edit of a data
// dir; no acknowledged grant is lost, then or after a restart of every node.
func TestFullDiskRecoversWhenSpaceIsFreed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real fenced processes; skipped with -short")
	}
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d nodes", nodes), func(t *testing.T) {
			if lost := testFullDiskRecovers(t, nodes, false); lost != 0 {
				t.Fatalf("%d acknowledged grants lost", lost)
			}
		})
	}
}

// TestFullDiskPositiveControl runs the same test on a node whose log store
// acknowledges appends it could not write (--unsafe-ack-unwritten-log, a
// chaos build's flag): the check of acknowledged grants must catch the grants
// the restart finds missing.
func TestFullDiskPositiveControl(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real fenced processes; skipped with -short")
	}
	lost := testFullDiskRecovers(t, 1, true)
	if lost == 0 {
		t.Fatal("a log store that acknowledges unwritten appends lost no acknowledged grant: the check proves nothing")
	}
	t.Logf("positive control: %d acknowledged grants lost, as it must", lost)
}

// testFullDiskRecovers fills the disks of a cluster of nodes and frees them,
// and returns how many acknowledged grants a restart of every node lost. With
// lie, the nodes' log stores acknowledge appends they could not write.
func testFullDiskRecovers(t *testing.T, nodes int, lie bool) int {
	base := t.TempDir()
	for i := 1; i <= nodes; i++ {
		mountSmallFS(t, filepath.Join(base, fmt.Sprintf("n%d", i)), "16M")
	}
	bin, err := proccluster.FencedChaos()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--unsafe-wal-segment-size", "1048576", "--data-dir-min-free", "0", "--data-dir-min-free-percent", "0"}
	if lie {
		args = append(args, "--unsafe-ack-unwritten-log")
	}
	c := proccluster.StartTest(t, proccluster.Options{Nodes: nodes, Dir: base, Binary: bin, ExtraArgs: args})
	cl := c.Client()
	value := strings.Repeat("v", 1000)
	acked := map[string]client.Grant{}
	acquire := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g, err := cl.Acquire(ctx, client.AcquireRequest{Key: key, Holder: "h-" + key, TTL: "1h", Value: value})
		if err == nil {
			acked[key] = *g
		}
		return err
	}
	for i := 0; i < 50; i++ {
		if err := acquire(fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	// Every node's disk fills up.
	for _, n := range c.Nodes {
		fill(t, n.DataDir)
	}
	failures, lastErr := 0, error(nil)
	for i := 0; i < 2000 && failures < 5; i++ {
		if err := acquire(fmt.Sprintf("full-%d", i)); err != nil {
			failures++
			lastErr = err
		}
	}
	if failures == 0 && !lie {
		t.Fatal("writes never failed: the disks did not fill")
	}
	t.Logf("with full disks: %d grants acknowledged, then writes failed (last: %v)", len(acked), lastErr)

	// Space is freed; nothing else is done.
	for _, n := range c.Nodes {
		if err := os.Remove(filepath.Join(n.DataDir, "filler")); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	testutil.Eventually(t, 60*time.Second, func() error { return acquire(fmt.Sprintf("after-%d", time.Now().UnixNano())) })
	t.Logf("serving new keys %v after space was freed", time.Since(start).Round(time.Millisecond))

	// lostAcked counts the acknowledged grants a verify no longer allows.
	lostAcked := func(when string) int {
		t.Helper()
		lost := 0
		for key, g := range acked {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			v, err := cl.Verify(ctx, key, g.Token.String(), g.Holder)
			cancel()
			if err != nil || !v.Allow {
				if lost == 0 {
					t.Logf("%s: acknowledged grant %s %d lost: %+v %v", when, key, g.Token, v, err)
				}
				lost++
			}
		}
		return lost
	}
	if lost := lostAcked("after space was freed"); lost != 0 {
		return lost
	}

	// A restart of every node recovers from the disk as it is.
	for _, n := range c.Nodes {
		c.Kill(n)
	}
	for _, n := range c.Nodes {
		if err := c.StartNode(n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Leader(context.Background(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if lost := lostAcked("after a restart"); lost != 0 {
		return lost
	}
	testutil.Eventually(t, 30*time.Second, func() error { return acquire(fmt.Sprintf("restarted-%d", time.Now().UnixNano())) })
	return 0
}
