//go:build unix

package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is the command lock runs, alone in its own process group, so that
// one signal reaches it and everything it started (unless they left the
// group on purpose with setsid or setpgid).
type child struct {
	cmd   *exec.Cmd
	pgid  int
	done  chan struct{}
	state *os.ProcessState // set before done is closed
}

// startChild starts argv in a new process group whose id is the child's pid.
// stdout and stderr should be *os.File: exec then hands the descriptors over
// and waiting for the child never waits for a copy that a leftover process
// keeps open.
func startChild(argv, environ []string, stdin io.Reader, stdout, stderr io.Writer) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = environ
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, pgid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		c.state = cmd.ProcessState
		close(c.done)
	}()
	return c, nil
}

// signal sends sig to the child's whole process group.
func (c *child) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.pgid, sig)
}

// exited reports whether the child itself has exited and was reaped.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// groupAlive reports whether any process of the child's group is left. While
// the child is not yet reaped its zombie keeps the group (and its id) alive,
// so a group id is never reused under fencectl's feet before the child is
// reaped; after that, a group with members keeps its id reserved.
func (c *child) groupAlive() bool {
	err := syscall.Kill(-c.pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// stop ends the whole group: SIGTERM, then SIGKILL once grace has passed
// with the child or any member of its group still alive. It returns when the
// child is reaped and the group is gone (or, for a member stuck where even
// SIGKILL waits, such as uninterruptible I/O, after a last second), and
// reports whether SIGKILL was needed.
func (c *child) stop(grace time.Duration) (killed bool) {
	c.signal(syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	done := c.done
	for {
		if c.exited() && !c.groupAlive() {
			return false
		}
		select {
		case <-deadline.C:
			c.kill()
			return true
		case <-done:
			done = nil // from now on, poll for the rest of the group
		case <-poll.C:
		}
	}
}

// kill sends SIGKILL to the group and waits for the child and the group.
func (c *child) kill() {
	c.signal(syscall.SIGKILL)
	<-c.done
	c.signal(syscall.SIGKILL) // members that were between fork and exit
	limit := time.Now().Add(time.Second)
	for c.groupAlive() && time.Now().Before(limit) {
		time.Sleep(10 * time.Millisecond)
	}
}

// exitCode is the child's exit code as a shell reports it: 128+N when
// signal N ended it.
func (c *child) exitCode() int {
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return c.state.ExitCode()
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
