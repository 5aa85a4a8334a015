package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
)

// unsigned hides a node's signing side: the server then answers grants
// without proofs, the same path otherwise.
type unsigned struct{ Node }

// BenchmarkAcquireProof measures an acquire through the HTTP API of a
// single-node cluster (fsync off, so the figure is the CPU path), with and
// without the proof the leader signs; the difference is what signing adds
// to every acquire. Each iteration acquires a new key.
func BenchmarkAcquireProof(b *testing.B) {
	n := startClusterWith(b, 1, func(c *cluster.Config) { c.NoSync = true })[0]
	for _, mode := range []struct {
		name string
		node Node
	}{{"no-proof", unsigned{n.node}}, {"proof", n.node}} {
		b.Run(mode.name, func(b *testing.B) {
			srv := httptest.NewServer(NewServer(mode.node, hclog.NewNullLogger()))
			defer srv.Close()
			c := srv.Client()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				body := fmt.Sprintf(`{"key":"%s-%d","holder":"h","ttl":"1h"}`, mode.name, i)
				resp, err := c.Post(srv.URL+"/v1/acquire", "application/json", bytes.NewBufferString(body))
				if err != nil {
					b.Fatal(err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%d: %s", resp.StatusCode, raw)
				}
				if hasProof := bytes.Contains(raw, []byte(`"proof"`)); hasProof != (mode.name == "proof") {
					b.Fatalf("proof present %v in %s", hasProof, raw)
				}
			}
		})
	}
}
