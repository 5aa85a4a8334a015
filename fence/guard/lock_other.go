//go:build !unix

package guard

import (
	"context"
	"errors"
	"os"
)

// flock is only implemented on Unix-like systems: without it two processes
// sharing a directory could race, so the File guard refuses to admit anything.
func flock(context.Context, *os.File) error { return errors.ErrUnsupported }
