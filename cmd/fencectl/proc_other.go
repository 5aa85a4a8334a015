//go:build !unix

package main

import (
	"errors"
	"io"
	"syscall"
	"time"
)

// child is not supported without Unix process groups.
type child struct {
	done chan struct{}
}

func startChild(_, _ []string, _ io.Reader, _, _ io.Writer) (*child, error) {
	return nil, errors.New("lock needs Unix process groups")
}

func (c *child) signal(syscall.Signal)   {}
func (c *child) exited() bool            { return true }
func (c *child) groupAlive() bool        { return false }
func (c *child) stop(time.Duration) bool { return false }
func (c *child) exitCode() int           { return exitErr }

// processCPU is unknown here; bench then reports no client CPU.
func processCPU() time.Duration { return 0 }
