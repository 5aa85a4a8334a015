//go:build !chaos

package main

import "github.com/spf13/pflag"

// registerUnsafe adds nothing: the flags that change how one node applies
// log entries exist only in a binary built with -tags chaos (unsafe_chaos.go).
func registerUnsafe(*pflag.FlagSet, *options) {}
