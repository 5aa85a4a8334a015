package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
)

// fillValues grants n keys, each with a value of a kilobyte: a state whose
// backup is larger than what the kernel buffers on a loopback connection.
func fillValues(t *testing.T, c *client.Client, n int) {
	t.Helper()
	value := strings.Repeat("v", client.MaxValueLen)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				_, err := c.Acquire(context.Background(), client.AcquireRequest{Key: fmt.Sprintf("big/%06d", i), Holder: "filler", TTL: "1h", Value: value})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A backup is sent as it is written, with its size, metadata and checksum
// in the headers: the body is as long as Content-Length says, its checksum
// is the header's, and it decodes to the state.
func TestBackupIsStreamedWithItsSizeAndChecksum(t *testing.T) {
	_, c, _ := startBackupNode(t, BackupAuth{})
	fillValues(t, c, 500)
	resp, err := http.Get(c.Endpoints()[0] + "/v1/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	if resp.ContentLength != int64(len(body)) {
		t.Fatalf("Content-Length %d, body %d bytes", resp.ContentLength, len(body))
	}
	var meta client.BackupMeta
	if err := json.Unmarshal([]byte(resp.Header.Get(client.BackupMetaHeader)), &meta); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body[:len(body)-sha256.Size])
	if meta.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("header checksum %s, body's %x", meta.SHA256, sum)
	}
	dmeta, img, err := cluster.DecodeBackup(body)
	if err != nil || len(img.Keys) != 500 || dmeta.Keys != meta.Keys {
		t.Fatalf("decode: %v, %d keys (header %d)", err, len(img.Keys), meta.Keys)
	}
}
