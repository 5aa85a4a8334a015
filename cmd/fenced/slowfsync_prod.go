//go:build !chaos

package main

import "github.com/hashicorp/raft-wal/types"

// slowFsync is nil outside chaos builds (slowfsync_chaos.go).
func slowFsync(string, string) func(types.VFS) types.VFS { return nil }
