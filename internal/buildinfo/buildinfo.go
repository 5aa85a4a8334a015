// Package buildinfo describes the binary that runs: the module version and
// the version-control revision Go recorded when it was built.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is what the Go toolchain recorded about a build.
type Info struct {
	Version  string `json:"version"`            // module version, "(devel)" for a local build
	Revision string `json:"revision,omitempty"` // VCS commit
	Time     string `json:"time,omitempty"`     // commit time, RFC 3339
	Modified bool   `json:"modified,omitempty"` // the work tree had local changes
	Go       string `json:"go"`
}

// Read returns the build information of the running binary. Fields Go did
// not record (a build outside a VCS checkout, -buildvcs=false) are empty.
func Read() Info {
	info := Info{Version: "unknown", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	if bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one line "--version" prints after the program's name.
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown"
	}
	if i.Modified {
		rev += " (modified)"
	}
	s := fmt.Sprintf("%s, revision %s", i.Version, rev)
	if i.Time != "" {
		s += ", committed " + i.Time
	}
	return s + ", " + i.Go
}
