package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
)

// fakeNode serves /v1/cluster with st and counts leadership transfers.
func fakeNode(t *testing.T, st client.Status) (addr string, transfers *atomic.Int32) {
	t.Helper()
	transfers = &atomic.Int32{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("POST /v1/cluster/transfer", func(w http.ResponseWriter, r *http.Request) {
		transfers.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]string{"leader": "fenced-1"})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), transfers
}

// TestStepDown: the preStop hook hands leadership over only when the node
// it runs beside leads and has someone to hand it to.
func TestStepDown(t *testing.T) {
	voters := func(ids ...string) []client.Member {
		var ms []client.Member
		for _, id := range ids {
			ms = append(ms, client.Member{ID: id, Voter: true})
		}
		return ms
	}
	tests := []struct {
		name      string
		st        client.Status
		transfers int32
		says      string
	}{
		{"leader of three", client.Status{ID: "fenced-0", LeaderID: "fenced-0", Members: voters("fenced-0", "fenced-1", "fenced-2")}, 1, "handed leadership to fenced-1"},
		{"follower", client.Status{ID: "fenced-2", LeaderID: "fenced-0", Members: voters("fenced-0", "fenced-1", "fenced-2")}, 0, "does not lead"},
		{"no leader", client.Status{ID: "fenced-2", Members: voters("fenced-0", "fenced-1", "fenced-2")}, 0, "does not lead"},
		{"only voter", client.Status{ID: "fenced-0", LeaderID: "fenced-0", Members: voters("fenced-0")}, 0, "only voter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, transfers := fakeNode(t, tt.st)
			o, err := parseFlags([]string{"--http-advertise", addr, "--peers-from-dns", "fenced-{0..2}.fenced:7701", "--id", tt.st.ID})
			if err != nil {
				t.Fatal(err)
			}
			if o.loaded, err = loadSecurity(&o.sec); err != nil {
				t.Fatal(err)
			}
			msg, err := stepDown(context.Background(), o, o.httpAdvertise)
			if err != nil {
				t.Fatal(err)
			}
			if got := transfers.Load(); got != tt.transfers || !strings.Contains(msg, tt.says) {
				t.Fatalf("%d transfers, said %q; want %d, saying %q", got, msg, tt.transfers, tt.says)
			}
		})
	}
}

// TestStepDownUnreachable: a node that does not answer is an error (the
// hook's failure shows in the pod's events), not a silent success.
func TestStepDownUnreachable(t *testing.T) {
	var sb strings.Builder
	nobody := testutil.FreeAddrs(t, 1)[0] // free: nothing listens there
	if code := stepDownMain([]string{"--peers-from-dns", "fenced-{0..2}.fenced:7701", "--id", "fenced-0", "--http-advertise", nobody}, &sb, &sb); code != 1 {
		t.Fatalf("exit code %d, output %q; want 1", code, sb.String())
	}
}
