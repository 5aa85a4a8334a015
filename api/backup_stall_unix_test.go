//go:build unix

package api

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A reader that stops reading a backup is cut off once one write has waited
// the write timeout: the node does not hold the backup's frozen state for
// as long as a stalled reader likes. The reader that resumes finds the body
// short of its Content-Length.
func TestBackupReaderThatStallsIsCutOff(t *testing.T) {
	_, c, s := startBackupNode(t, BackupAuth{})
	s.backupWriteTimeout = 300 * time.Millisecond
	fillValues(t, c, 8000) // about 9 MB of backup: more than loopback buffers hold
	addr := strings.TrimPrefix(c.Endpoints()[0], "http://")
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/snapshot HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	br := bufio.NewReaderSize(conn, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %v, %v", resp, err)
	}
	size, _ := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
	time.Sleep(10 * s.backupWriteTimeout) // the reader stalls: the behaviour under test, not a wait for a condition
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, _ := io.Copy(io.Discard, resp.Body)
	if got >= size {
		t.Fatalf("the stalled reader got all %d bytes: the server waited for it", size)
	}
	t.Logf("the stalled reader got %d of %d bytes", got, size)
}
