package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/internal/proccluster"
	"github.com/fenced/fenced/internal/testutil"
)

// refusedAddr is a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestOneShotCommandsFailWhenNoEndpointAccepts: with endpoints that refuse
// every connection (a typo'd port), a one-shot command fails after
// --dial-timeout, though --timeout is an hour, naming each endpoint and
// why; verify refuses (exit 3). No server runs at all. The default
// --dial-timeout applies to status; the other commands set a short one.
func TestOneShotCommandsFailWhenNoEndpointAccepts(t *testing.T) {
	a, b := refusedAddr(t), refusedAddr(t)
	file := filepath.Join(t.TempDir(), "backup.fenced")
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"status"}, exitErr},
		{[]string{"keys"}, exitErr},
		{[]string{"key", "k"}, exitErr},
		{[]string{"acquire", "k", "--holder", "h"}, exitErr},
		{[]string{"renew", "k", "4294967297", "--holder", "h"}, exitErr},
		{[]string{"release", "k", "4294967297", "--holder", "h"}, exitErr},
		{[]string{"keepalive", "--holder", "h"}, exitErr},
		{[]string{"verify", "k", "4294967297"}, exitRefused},
		{[]string{"acl", "check", "bob", "read", "k"}, exitErr},
		{[]string{"selftest"}, exitErr},
		{[]string{"members", "list"}, exitErr},
		{[]string{"members", "remove", "n9"}, exitErr},
		{[]string{"leader", "transfer"}, exitErr},
		{[]string{"snapshot", "save", file}, exitErr},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--endpoints", a + "," + b, "--timeout", "1h"}, tc.args...)
			dial := "2s"
			if tc.args[0] != "status" {
				args, dial = append(args, "--dial-timeout", "100ms"), "100ms"
			}
			code, stdout, stderr := runCtl(t, nil, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			// selftest reports its failed check in its table, on stdout.
			out := stderr + stdout
			for _, ep := range []string{a, b} {
				if !strings.Contains(out, "http://"+ep+": connection refused") {
					t.Errorf("fencectl does not say %s refused the connection: %s", ep, out)
				}
			}
			// A backup is asked of each node once: a refused connection
			// ends it before any deadline.
			blame := tc.args[0] != "snapshot"
			if blame != strings.Contains(out, "--dial-timeout "+dial) || strings.Contains(out, "1h") {
				t.Errorf("fencectl does not blame --dial-timeout %s (or claims --timeout 1h): %s", dial, out)
			}
		})
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("snapshot save left %s: %v", file, err)
	}
}

// TestWaitingCommandsOutlastTheDialTimeout: lock, elect, watch, keepalive
// --every and status --wait keep trying an endpoint nothing listens on yet,
// past --dial-timeout (a one-shot command started with them has failed by
// then), and go on once a node starts there.
func TestWaitingCommandsOutlastTheDialTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	httpAddr, raftAddr := refusedAddr(t), refusedAddr(t)
	global := []string{"--endpoints", httpAddr, "--dial-timeout", "1ms", "--timeout", "1h"}
	dir := t.TempDir()
	lockOut, electOut := filepath.Join(dir, "lock"), filepath.Join(dir, "elect")
	waiting := map[string]*ctl{
		"lock": startCtl(t, helperEnv("start", lockOut), append(global, append(append([]string{"lock", testKey(t) + "/lock", "--holder", "h"},
			lockTimingArgs...), "--", os.Args[0])...)...),
		"elect": startCtl(t, helperEnv("start", electOut), append(global, append(append([]string{"elect", testKey(t) + "/elect", "--holder", "h"},
			lockTimingArgs...), "--", os.Args[0])...)...),
		"watch":     startCtl(t, nil, append(global, "-o", "json", "watch", "--key", testKey(t))...),
		"keepalive": startCtl(t, nil, append(global, "keepalive", "--holder", "h", "--every", "200ms")...),
		"status":    startCtl(t, nil, append(global, "status", "--wait", "1h")...),
	}
	code, _, stderr := runCtl(t, nil, append(global, "key", "k")...)
	if code != exitErr || !strings.Contains(stderr, "--dial-timeout 1ms") {
		t.Fatalf("one-shot key: exit %d, want 1 blaming --dial-timeout: %s", code, stderr)
	}
	for name, c := range waiting {
		select {
		case <-c.done:
			t.Fatalf("%s ended (exit %d) before any node started\nstdout: %s\nstderr: %s", name, c.code, c.stdout, c.stderr)
		default:
		}
	}

	cl, err := proccluster.Start(proccluster.Options{Nodes: 1, Dir: t.TempDir(), HTTPAddrs: []string{httpAddr}, RaftAddrs: []string{raftAddr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	for _, name := range []string{"lock", "elect", "status"} {
		if code := waiting[name].wait(t, time.Minute); code != 0 {
			t.Fatalf("%s: exit %d once the node started\nstderr: %s\n%s", name, code, waiting[name].stderr, cl.Logs(20))
		}
	}
	waitEvent(t, lockOut, "start", 10*time.Second)
	waitEvent(t, electOut, "start", 10*time.Second)
	testutil.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(waiting["watch"].stdout.String(), `"type":"sync"`) {
			return fmt.Errorf("watch printed %q", waiting["watch"].stdout)
		}
		if !strings.Contains(waiting["keepalive"].stdout.String(), "no live grant of holder h") {
			return fmt.Errorf("keepalive printed %q", waiting["keepalive"].stdout)
		}
		return nil
	})
}
