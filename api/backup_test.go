package api

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenced/fenced/client"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/internal/testutil"
)

// startAuthNode starts a one-node cluster whose API server has auth as its
// backup authentication.
func startAuthNode(t *testing.T, auth BackupAuth) (*cluster.Node, *client.Client) {
	t.Helper()
	n, c, _ := startBackupNode(t, auth)
	return n, c
}

// startBackupNode is startAuthNode that also returns the node's server,
// started.
func startBackupNode(t *testing.T, auth BackupAuth) (*cluster.Node, *client.Client, *Server) {
	t.Helper()
	addr := testutil.FreeAddrs(t, 1)[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "n1", Level: hclog.Error})
	n, err := cluster.New(cluster.Config{
		ID: "n1", DataDir: filepath.Join(t.TempDir(), "n1"), RaftBind: addr, HTTPAdvertise: ln.Addr().String(),
		Peers: []cluster.Peer{{ID: "n1", Addr: addr}}, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(n, log)
	s.SetBackupAuth(auth)
	srv := httptest.NewUnstartedServer(s)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() { n.Close(); srv.Close() })
	testutil.Eventually(t, 15*time.Second, func() error {
		if !n.Ready() {
			return errors.New("not ready")
		}
		return nil
	})
	return n, client.New([]string{srv.URL}), s
}

func backupKey(t *testing.T, fill byte) *cluster.BackupKey {
	t.Helper()
	k, err := cluster.NewBackupKey(bytes.Repeat([]byte{fill}, cluster.MinBackupKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// With a backup key, backups are authenticated; with authentication
// required, a backup without a valid HMAC under that key (an unkeyed
// checksum is all a forger needs to recompute) is refused and changes
// nothing.
func TestRestoreRequiresAuthenticatedBackup(t *testing.T) {
	key := backupKey(t, 7)
	n, c := startAuthNode(t, BackupAuth{Key: key, Require: true})
	ctx := context.Background()
	if _, err := c.Acquire(ctx, client.AcquireRequest{Key: "k", Holder: "h"}); err != nil {
		t.Fatal(err)
	}
	data, _, err := c.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plain, auth, err := cluster.CheckBackupAuth(data, key, true)
	if err != nil || !auth.Verified {
		t.Fatalf("backup of a node with a backup key is not authenticated by it: %+v %v", auth, err)
	}
	floor := n.FSM().Floor()
	forged, err := cluster.SignBackup(plain, backupKey(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{"unauthenticated": plain, "another key": forged} {
		if res, err := c.Restore(ctx, bad, 0, 0); !errors.Is(err, client.ErrBadRequest) {
			t.Fatalf("%s backup restored where authenticated ones are required: %+v %v", name, res, err)
		}
		if n.FSM().Floor() != floor {
			t.Fatalf("a refused %s backup changed the floor", name)
		}
	}
	if _, err := c.Restore(ctx, data, 0, 0); err != nil {
		t.Fatalf("authenticated backup: %v", err)
	}
}

// Without a key, backups stay plain and restores accept them: the default
// is unchanged.
func TestBackupAuthDefaultIsCompatible(t *testing.T) {
	_, c := startAuthNode(t, BackupAuth{})
	ctx := context.Background()
	data, _, err := c.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, a, err := cluster.CheckBackupAuth(data, nil, false); err != nil || a.Authenticated {
		t.Fatalf("default backup: %+v %v", a, err)
	}
	if _, err := c.Restore(ctx, data, 0, 0); err != nil {
		t.Fatal(err)
	}
}

// above_epoch and margin are bounded epochs, given at most once, not both.
func TestRestoreOptionsAreChecked(t *testing.T) {
	for _, q := range []string{
		"above_epoch=2147483648", "margin=18446744073709551616", "above_epoch=-1", "margin=+5", "above_epoch=0x10",
		"above_epoch=1&above_epoch=99", "margin=1&margin=2", "above_epoch=5&margin=7",
	} {
		v, _ := url.ParseQuery(q)
		if o, err := restoreOptions(v); !errors.Is(err, cluster.ErrBadRequest) {
			t.Errorf("%s: accepted as %+v", q, o)
		}
	}
	v, _ := url.ParseQuery("above_epoch=2147483647")
	if o, err := restoreOptions(v); err != nil || o.AboveEpoch != 1<<31-1 {
		t.Fatalf("largest epoch: %+v %v", o, err)
	}
}
