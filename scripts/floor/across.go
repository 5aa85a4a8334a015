package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// keepaliveAnswer is the size and shape of a keepalive's answer for one
// holder with one lease: the HTTP floor answers it without doing anything.
const keepaliveAnswer = `{"holder":"h","renewed":[{"key":"k","token":"4294967297","ttl_ms":30000}]}`

// serveForParent listens on loopback, prints the address and serves until
// its parent closes stdin: echo (a TCP echo) or http (net/http answering
// every request at once).
func serveForParent(kind string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	switch kind {
	case "echo":
		go echo(ln)
	case "http":
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, keepaliveAnswer)
		}))
	default:
		return fmt.Errorf("-serve %q: want echo or http", kind)
	}
	fmt.Println(ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// echo answers every connection of ln with what it reads.
func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// startChild runs this program with -serve kind and returns the address it
// listens on and a function that ends it.
func startChild(kind string) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self, "-serve", kind)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		in.Close()
		cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("the %s server did not start: %w", kind, err)
	}
	return strings.TrimSpace(line), stop, nil
}

// httpExchanges times n POSTs of a keepalive's body by net/http's client
// to a net/http server in another process, one at a time on a kept-alive
// connection, and returns the median.
func httpExchanges(n int) (int64, error) {
	addr, stop, err := startChild("http")
	if err != nil {
		return 0, err
	}
	defer stop()
	c := &http.Client{}
	url := "http://" + addr + "/v1/keepalive"
	body := []byte(`{"holder":"h"}`)
	durs := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		resp, err := c.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		durs = append(durs, time.Since(start))
	}
	return pct(durs, 50), nil
}
