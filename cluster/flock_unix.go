//go:build unix

package cluster

import (
	"errors"
	"os"
	"syscall"
)

// inUse reports whether another process holds the file lock bolt takes on
// path. The WAL's meta store opens its bolt file without a timeout, so a data
// dir in use by a running node would block forever instead of failing.
func inUse(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false // absent: nothing holds it
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return false
	}
	return errors.Is(err, syscall.EWOULDBLOCK)
}
