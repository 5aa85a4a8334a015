//go:build unix && !linux

package proccluster

import "syscall"

// procAttr puts each node in its own process group. Without Linux's
// parent-death signal, a node can outlive a test binary that crashed.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
