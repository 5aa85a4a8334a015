package proccluster

import "syscall"

// procAttr puts each node in its own process group and has the kernel kill it
// if the test binary dies first, so no node outlives a crashed test.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
