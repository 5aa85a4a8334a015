package main

import "syscall"

// setDeathSignal makes the kernel SIGKILL the child if fencectl dies without
// stopping it (kill -9, a crash): a child must not outlive the process that
// renews its lease. Linux ties this to the thread that started the child; Go
// does not end its threads while the program runs, so it holds for fencectl's
// lifetime.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
