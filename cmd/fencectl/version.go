package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/internal/buildinfo"
)

var versionCommand = command{
	name:    "version",
	summary: "print fencectl's module version and the revision it was built from",
	help: `
Prints the module version, the version-control revision and commit time Go
recorded when fencectl was built, and the Go version. A local build says
"(devel)"; a build outside a checkout says "revision unknown". It contacts no
node: 'fencectl status -o json' shows what the nodes run. 'fencectl
--version' is the same.`,
	examples: `
fencectl version
fencectl --version
fencectl version -o json`,
	new: func() runner { return &versionCmd{} },
}

type versionCmd struct{}

func (*versionCmd) flags(*pflag.FlagSet) {}

func (*versionCmd) run(_ context.Context, e *env, args []string) error {
	if len(args) != 0 {
		return usageErr("version", "version takes no arguments")
	}
	info := buildinfo.Read()
	if e.jsonOutput() {
		return printJSON(e.stdout, info)
	}
	_, err := fmt.Fprintf(e.stdout, "fencectl %s\n", info)
	return err
}
