package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

func TestConfig(t *testing.T) {
	cfg := Config(2, "/data/z2")
	for _, want := range []string{
		"dataDir=/data/z2\n",
		"clientPort=21820\n",
		"maxClientCnxns=0\n",
		"4lw.commands.whitelist=srvr,ruok,mntr\n",
		"server.1=127.0.0.1:21811:21812\n",
		"server.3=127.0.0.1:21831:21832\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("zoo.cfg lacks %q:\n%s", want, cfg)
		}
	}
	// The benchmark measures ZooKeeper's durable default: nothing may turn
	// the transaction log's fsync off.
	if strings.Contains(cfg, "forceSync") {
		t.Errorf("zoo.cfg overrides forceSync:\n%s", cfg)
	}
}

func TestResultLine(t *testing.T) {
	r := &Result{Workload: Cycle, Clients: 16, OpsPerSec: 1624.6, P50: 2815 * time.Microsecond, P99: 12 * time.Millisecond}
	if got, want := r.String(), "cycle 16 1625 2.81 12.00"; got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
}

// startEnsemble starts the three servers in a temporary directory and
// returns the leader's client address; the servers are stopped when the
// test ends. It skips the test without java or ZooKeeper, or when another
// ensemble holds the ports.
func startEnsemble(t *testing.T) string {
	t.Helper()
	if _, _, err := javaCommand(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	for _, p := range Ports() {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second); err == nil {
			c.Close()
			t.Skipf("skipping: 127.0.0.1:%d is in use (another ensemble is running)", p)
		}
	}
	dir := t.TempDir()
	for i := 1; i <= Servers; i++ {
		argv, err := Prepare(i, filepath.Join(dir, fmt.Sprintf("z%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		log, err := os.Create(filepath.Join(dir, fmt.Sprintf("z%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			log.Close()
		})
	}
	var lead string
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if lead, err = Leader(time.Second); err == nil {
			return lead
		}
	}
	t.Fatalf("ensemble elected no leader in 60s: %v", err)
	return ""
}

func TestEnsemble(t *testing.T) {
	lead := startEnsemble(t)

	t.Run("workloads", func(t *testing.T) {
		for _, w := range Workloads {
			r, err := Bench(w, 2, 300*time.Millisecond, 100*time.Millisecond, lead)
			if err != nil {
				t.Fatalf("%s: %v", w, err)
			}
			if r.Ops == 0 || r.Errors > 0 {
				t.Errorf("%s: %d operations, %d failed (first: %v)", w, r.Ops, r.Errors, r.FirstErr)
			}
		}
	})

	// Positive controls: each check the workloads rely on must refuse a
	// lock that is not, or no longer, held.
	t.Run("controls", func(t *testing.T) {
		a, err := connect(lead)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := connect(lead)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		lock := fmt.Sprintf("/locks/control%d", time.Now().UnixNano())
		if err := ensure(a, lock); err != nil {
			t.Fatal(err)
		}
		held, err := acquire(a, lock)
		if err != nil {
			t.Fatalf("first acquire: %v", err)
		}
		if _, err := acquire(b, lock); !errors.Is(err, errNotLowest) {
			t.Errorf("acquire of a held lock = %v, want %v", err, errNotLowest)
		}
		_, st, err := a.Get(held)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkHeld(a, held, st.Version); err != nil {
			t.Fatalf("check of a held lock: %v", err)
		}
		if _, err := a.Set(held, []byte("x"), st.Version); err != nil {
			t.Fatal(err)
		}
		if err := checkHeld(a, held, st.Version); !errors.Is(err, zk.ErrBadVersion) {
			t.Errorf("check at a stale version = %v, want %v", err, zk.ErrBadVersion)
		}
		if err := a.Delete(held, -1); err != nil {
			t.Fatal(err)
		}
		if err := syncRead(a, held); !errors.Is(err, zk.ErrNoNode) {
			t.Errorf("sync+read of a released lock = %v, want %v", err, zk.ErrNoNode)
		}
		if err := checkHeld(a, held, st.Version+1); !errors.Is(err, zk.ErrNoNode) {
			t.Errorf("check of a released lock = %v, want %v", err, zk.ErrNoNode)
		}
	})
}
