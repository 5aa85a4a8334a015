// Command filewriter appends a line to a file that only the current holder of
// a fenced key may write. The durable file guard records the highest token
// (fsynced) before the write, so after a crash a lower token can never be
// admitted again.
//
//	go run ./examples/filewriter --dir data --holder alice --line "hello"
//
// With --token, the token is given instead of acquired (to show what a
// stale holder's write meets).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/guard"
)

func main() {
	var (
		endpoints = pflag.String("endpoints", envOr("FENCE_ENDPOINTS", "127.0.0.1:7700"), "fenced endpoints")
		dir       = pflag.String("dir", "filewriter-data", "directory of the guarded file and its fences")
		holder    = pflag.String("holder", "", "who writes")
		line      = pflag.String("line", "", "the line to append")
		token     = pflag.String("token", "", "write with this token instead of acquiring one")
		key       = pflag.String("key", "journal", "the fenced key that guards the file")
	)
	pflag.Parse()
	ctx := context.Background()
	tok, release, err := tokenFor(ctx, strings.Split(*endpoints, ","), *key, *holder, *token)
	if err != nil {
		fail(1, err)
	}
	defer release()
	g, err := guard.OpenFile(filepath.Join(*dir, "fences"))
	if err != nil {
		fail(1, err)
	}
	defer g.Close()
	err = g.AdmitFunc(ctx, *key, tok, func() error { return appendLine(filepath.Join(*dir, "journal.txt"), *line) })
	if errors.Is(err, guard.ErrStale) {
		fmt.Printf("refused: %v\n", err)
		os.Exit(3)
	}
	if err != nil {
		fail(1, err)
	}
	fmt.Printf("wrote with token %s\n", tok)
}

func tokenFor(ctx context.Context, endpoints []string, key, holder, text string) (fence.Token, func(), error) {
	if text != "" {
		tok, err := fence.Parse(text)
		return tok, func() {}, err
	}
	if holder == "" {
		return 0, nil, errors.New("--holder is required")
	}
	l, err := client.New(endpoints).Lease(ctx, key, holder, client.LeaseOptions{TTL: 10 * time.Second, Wait: 30 * time.Second})
	if err != nil {
		return 0, nil, err
	}
	return l.Token(), func() { _ = l.Release(context.Background()) }, nil
}

func appendLine(path, line string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "filewriter:", err)
	os.Exit(code)
}
