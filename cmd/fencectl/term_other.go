//go:build !linux

package main

import "os"

// isTerminal reports whether f looks like a terminal. Without the terminal
// ioctl of Linux, a character device is taken for one; /dev/null is one too,
// and then a confirmation reads end of file, which counts as "no".
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
