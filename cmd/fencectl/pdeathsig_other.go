//go:build unix && !linux

package main

import "syscall"

// setDeathSignal does nothing where the kernel has no parent-death signal: a
// child of a fencectl killed with SIGKILL keeps running there.
func setDeathSignal(*syscall.SysProcAttr) {}
