package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/metrics"
)

// smallSendBuffers is a listener whose connections have a small kernel send
// buffer: a peer that stops reading blocks the server's writes after a few
// KiB instead of the megabytes loopback autotuning allows.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// startOne starts a single-node cluster whose API listener is ln's wrapper,
// and returns its server and URL once it leads.
func startOne(t *testing.T, wrap func(net.Listener) net.Listener) (*Server, *cluster.Node, string) {
	t.Helper()
	addrs := testutil.FreeAddrs(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "n1", Level: hclog.Error})
	n, err := cluster.New(cluster.Config{ID: "n1", DataDir: filepath.Join(t.TempDir(), "n1"), RaftBind: addrs[0], HTTPAdvertise: ln.Addr().String(),
		Peers: []cluster.Peer{{ID: "n1", Addr: addrs[0]}}, NoSync: true, Logger: log,
		HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond, LeaderLeaseTimeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(n, log)
	srv := httptest.NewUnstartedServer(s)
	srv.Listener.Close()
	srv.Listener = ln
	if wrap != nil {
		srv.Listener = wrap(ln)
	}
	srv.Start()
	t.Cleanup(func() { srv.Close(); n.Close() })
	testutil.Eventually(t, 15*time.Second, func() error {
		if !n.Ready() {
			return errors.New("not ready")
		}
		return nil
	})
	return s, n, srv.URL
}

// TestWatcherThatStopsReadingIsCutOff: a watcher that stops reading while
// changes keep coming does not pin its stream (a goroutine, a connection, a
// subscription) for ever: once a write waited the write timeout, the
// stream ends and the connection closes after what was already sent.
func TestWatcherThatStopsReadingIsCutOff(t *testing.T) {
	s, _, url := startOne(t, func(ln net.Listener) net.Listener { return smallSendBuffers{ln} })
	s.watchWriteTimeout = 300 * time.Millisecond
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /v1/watch?prefix=big/ HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %v %v", resp, err)
	}
	br := bufio.NewReader(resp.Body)
	// Up to the first sync, then the watcher stops reading.
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "event: sync") {
			break
		}
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := s.watching.Load(); n != 1 {
			return fmt.Errorf("%d streams", n)
		}
		return nil
	})
	slowBefore := promtest.ToFloat64(metrics.WatchEnded.WithLabelValues("slow"))
	c := client.New([]string{url})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	value := strings.Repeat("v", client.MaxValueLen)
	for i := 0; i < 200; i++ {
		if _, err := c.Acquire(ctx, client.AcquireRequest{Key: fmt.Sprintf("big/%03d", i), Holder: "h", Value: value}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := s.watching.Load(); n != 0 {
			return fmt.Errorf("%d streams still served to a watcher that does not read", n)
		}
		return nil
	})
	if n := promtest.ToFloat64(metrics.WatchEnded.WithLabelValues("slow")); n < slowBefore+1 {
		t.Fatalf("fenced_watch_streams_ended_total{reason=\"slow\"} is %v, was %v", n, slowBefore)
	}
	// What was sent before the cut still arrives, then the end.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	rest, err := io.ReadAll(br)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("after the cut: %v", err)
	}
	if !strings.Contains(string(rest), "event: granted") {
		t.Fatalf("nothing of what was sent before the cut arrived: %d bytes", len(rest))
	}
}
