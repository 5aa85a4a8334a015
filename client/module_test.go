package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// helloClient is an application that uses every part of the client an
// application would: Acquire, Verify, Lease, Watch and Election.
const helloClient = `package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fenced/fenced/client"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c := client.New([]string{"127.0.0.1:1"})
	g, err := c.Acquire(ctx, client.AcquireRequest{Key: "hello", Holder: "world", TTL: "10s"})
	fmt.Println(g, err)
	v, err := c.Verify(ctx, "hello", "4294967297", "world")
	fmt.Println(v, err)
	l, err := c.Lease(ctx, "hello", "world", client.LeaseOptions{TTL: 10 * time.Second})
	fmt.Println(l, err)
	for ev := range c.Watch(ctx, client.WatchOptions{Key: "hello"}) {
		fmt.Println(ev)
	}
	e := c.NewElection("svc/leader", "world", client.ElectionOptions{})
	fmt.Println(e.Campaign(ctx))
}
`

// forbidden names what an application of the client must never pull in:
// the server's dependencies.
var forbidden = []string{"hashicorp", "bbolt", "boltdb", "prometheus", "porcupine", "sqlite", "libopenapi", "github.com/fenced/fenced/api", "github.com/fenced/fenced/cluster", "github.com/fenced/fenced/fsm"}

// TestClientModuleStandsAlone builds, outside the repository, a module that
// requires only the client (with a replace to this checkout, as a user's
// would name a release) and checks that neither its packages nor its go.sum
// name anything of the server.
func TestClientModuleStandsAlone(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH: cannot build a module of its own")
	}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	fenceDir := filepath.Join(here, "..", "fence")
	dir := t.TempDir()
	gomod := "module example.com/hello\n\ngo 1.26\n\nrequire github.com/fenced/fenced/client v0.0.0\n\n" +
		"replace github.com/fenced/fenced/client => " + here + "\n\n" +
		"replace github.com/fenced/fenced/fence => " + fenceDir + "\n"
	write(t, filepath.Join(dir, "go.mod"), gomod)
	write(t, filepath.Join(dir, "main.go"), helloClient)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gobin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	deps := run("list", "-deps", "./...")
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, bad := range serverParts(deps, string(sum)) {
		t.Error(bad)
	}
	var fenced []string
	for _, line := range strings.Split(deps, "\n") {
		if strings.Contains(line, ".") && !strings.HasPrefix(line, "example.com/") && !strings.HasPrefix(line, "vendor/") {
			fenced = append(fenced, line)
		}
	}
	bin := filepath.Join(dir, "hello")
	run("build", "-o", bin, ".")
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("an application of the client: %d bytes; non-standard packages: %v", st.Size(), fenced)
}

// serverParts lists what of the server a module's packages (go list -deps)
// and go.sum name.
func serverParts(deps, sum string) []string {
	var out []string
	for _, f := range forbidden {
		for _, line := range strings.Split(deps, "\n") {
			if strings.Contains(line, f) {
				out = append(out, "the application's packages include "+line)
			}
		}
		for _, line := range strings.Split(sum, "\n") {
			if strings.Contains(line, f) {
				out = append(out, "the application's go.sum names "+line)
			}
		}
	}
	return out
}

// TestServerPartsAreFound is the check's positive control: what an
// application of the old combined package listed is caught.
func TestServerPartsAreFound(t *testing.T) {
	deps := "context\ngithub.com/fenced/fenced/api\ngithub.com/hashicorp/raft\ngo.etcd.io/bbolt\n"
	sum := "github.com/prometheus/client_golang v1.25.0 h1:x\nmodernc.org/sqlite v1.62.0/go.mod h1:y\n"
	if got := serverParts(deps, sum); len(got) != 5 {
		t.Fatalf("found %d server parts, want 5: %q", len(got), got)
	}
	if got := serverParts("context\ngithub.com/fenced/fenced/client\ngithub.com/fenced/fenced/fence\n", ""); len(got) != 0 {
		t.Fatalf("the client alone: %q", got)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
