package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Servers is the size of the ensemble.
const Servers = 3

// basePort and port place server i's listeners: clients on port(i, 0)
// (21810, 21820, 21830), followers on port(i, 1) and leader election on
// port(i, 2).
const basePort = 21800

func port(i, which int) int { return basePort + 10*i + which }

// ClientAddr is server i's client address.
func ClientAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d", port(i, 0)) }

// Ports lists every port the ensemble listens on, for a caller that checks
// they are free before starting it.
func Ports() []int {
	var ps []int
	for i := 1; i <= Servers; i++ {
		ps = append(ps, port(i, 0), port(i, 1), port(i, 2))
	}
	return ps
}

// defaultClasspath is where Debian's zookeeper package puts the server
// (its manifest names the jars it needs) and a logging backend.
const defaultClasspath = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"

// errNoZooKeeper is returned when java or the ZooKeeper jar is missing.
var errNoZooKeeper = errors.New("ZooKeeper is not installed (apt-get install zookeeper)")

// javaCommand returns the java binary and the classpath to run the server
// with: $JAVA and $ZK_CLASSPATH when set, else java on PATH and Debian's
// jars. It fails when either is missing.
func javaCommand() (java, classpath string, err error) {
	java = os.Getenv("JAVA")
	if java == "" {
		if java, err = exec.LookPath("java"); err != nil {
			return "", "", fmt.Errorf("%w: no java on PATH", errNoZooKeeper)
		}
	}
	classpath = os.Getenv("ZK_CLASSPATH")
	if classpath == "" {
		classpath = defaultClasspath
	}
	jar := strings.Split(classpath, ":")[0]
	if _, err := os.Stat(jar); err != nil {
		return "", "", fmt.Errorf("%w: %v", errNoZooKeeper, err)
	}
	return java, classpath, nil
}

// Config is server i's zoo.cfg with its data in dir. forceSync, the
// snapshot count and the timeouts keep ZooKeeper's defaults.
func Config(i int, dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=2000\ninitLimit=10\nsyncLimit=5\n")
	fmt.Fprintf(&b, "dataDir=%s\n", dir)
	fmt.Fprintf(&b, "clientPortAddress=127.0.0.1\nclientPort=%d\n", port(i, 0))
	// The benchmark's clients all come from 127.0.0.1: lift the cap of 60
	// connections per address.
	b.WriteString("maxClientCnxns=0\n")
	b.WriteString("admin.enableServer=false\n")
	b.WriteString("4lw.commands.whitelist=srvr,ruok,mntr\n")
	for j := 1; j <= Servers; j++ {
		fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", j, port(j, 1), port(j, 2))
	}
	return b.String()
}

// Prepare writes server i's zoo.cfg and myid into dir and returns the java
// command line that runs it.
func Prepare(i int, dir string) ([]string, error) {
	java, cp, err := javaCommand()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfg, []byte(Config(i, dir)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "myid"), []byte(fmt.Sprintf("%d\n", i)), 0o644); err != nil {
		return nil, err
	}
	return []string{java,
		"-Xmx1000m", // zkEnv.sh's default server heap
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dzookeeper.jmx.log4j.disable=true",
		"-cp", cp,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg}, nil
}

// Serve prepares server i in dir and replaces this process with it, so
// that the caller's PID is the server's and killing it stops the server.
func Serve(i int, dir string) error {
	argv, err := Prepare(i, dir)
	if err != nil {
		return err
	}
	return syscall.Exec(argv[0], argv, os.Environ())
}

// Leader asks each server "srvr" and returns the client address of the one
// that reports "Mode: leader".
func Leader(timeout time.Duration) (string, error) {
	var modes []string
	for i := 1; i <= Servers; i++ {
		mode, err := serverMode(ClientAddr(i), timeout)
		if err != nil {
			modes = append(modes, fmt.Sprintf("%s: %v", ClientAddr(i), err))
			continue
		}
		if mode == "leader" {
			return ClientAddr(i), nil
		}
		modes = append(modes, fmt.Sprintf("%s: %s", ClientAddr(i), mode))
	}
	return "", fmt.Errorf("no leader (%s)", strings.Join(modes, "; "))
}

// serverMode returns the Mode line of addr's answer to "srvr".
func serverMode(addr string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
		if strings.Contains(sc.Text(), "not currently serving") {
			return "not serving", nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no Mode in the srvr answer")
}
