package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/cluster"
)

// unsigned hides a node's signing side: the server then answers grants
// without proofs, the same path otherwise.
type unsigned struct{ Node }

// BenchmarkAcquireProof measures an acquire through the HTTP API of a
// single-node cluster (fsync off, so the figure is the CPU path), with and
// without the proof the leader signs. Every iteration makes one acquire of
// each kind, alternately, so a machine whose load drifts weighs on both
// alike; the metrics are the mean time of each, and their difference is
// what signing adds to an acquire.
func BenchmarkAcquireProof(b *testing.B) {
	n := startClusterWith(b, 1, func(c *cluster.Config) { c.NoSync = true })[0]
	modes := []struct {
		name  string
		node  Node
		url   string
		total time.Duration
	}{{name: "no-proof", node: unsigned{n.node}}, {name: "proof", node: n.node}}
	for i := range modes {
		srv := httptest.NewServer(NewServer(modes[i].node, hclog.NewNullLogger()))
		b.Cleanup(srv.Close)
		modes[i].url = srv.URL
	}
	c := &http.Client{}
	i := 0
	for b.Loop() {
		i++
		for m := range modes {
			body := fmt.Sprintf(`{"key":"%s-%d","holder":"h","ttl":"1h"}`, modes[m].name, i)
			start := time.Now()
			resp, err := c.Post(modes[m].url+"/v1/acquire", "application/json", bytes.NewBufferString(body))
			if err != nil {
				b.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			modes[m].total += time.Since(start)
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("%d: %s", resp.StatusCode, raw)
			}
			if hasProof := bytes.Contains(raw, []byte(`"proof"`)); hasProof != (modes[m].name == "proof") {
				b.Fatalf("proof present %v in %s", hasProof, raw)
			}
		}
	}
	for _, m := range modes {
		b.ReportMetric(float64(m.total.Nanoseconds())/float64(i), m.name+"-ns/acquire")
	}
	b.ReportMetric(float64((modes[1].total-modes[0].total).Nanoseconds())/float64(i), "signing-ns/acquire")
}
