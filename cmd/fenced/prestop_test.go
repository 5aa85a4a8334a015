package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fenced/fenced/client"
)

// fakeKube serves one StatefulSet (or the status code code) at the API path
// the hook reads, and records the bearer token it was sent.
func fakeKube(t *testing.T, name string, code int, body string) (*kubeAPI, *atomic.Value) {
	t.Helper()
	auth := &atomic.Value{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		if r.Method != http.MethodGet || r.URL.Path != "/apis/apps/v1/namespaces/coord/statefulsets/"+name {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return &kubeAPI{base: srv.URL, namespace: "coord", token: "sa-token", http: srv.Client()}, auth
}

func stsJSON(replicas string, deleting bool) string {
	meta := `{"name":"fenced"}`
	if deleting {
		meta = `{"name":"fenced","deletionTimestamp":"2026-01-01T00:00:00Z"}`
	}
	spec := `{}`
	if replicas != "" {
		spec = `{"replicas":` + replicas + `}`
	}
	return `{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":` + meta + `,"spec":` + spec + `}`
}

// TestPodGoes: the hook removes a pod only when its StatefulSet asks for
// fewer replicas than its ordinal; every other answer, and every doubt,
// keeps the member.
func TestPodGoes(t *testing.T) {
	tests := []struct {
		name string
		pod  string
		code int
		body string
		goes bool
		says string
	}{
		{"scaled below it", "fenced-4", 200, stsJSON("3", false), true, "scaled to 3 replicas"},
		{"scaled to its ordinal", "fenced-3", 200, stsJSON("3", false), true, "ordinal 3"},
		{"within the replicas", "fenced-2", 200, stsJSON("3", false), false, "comes back"},
		{"rolling update of five", "fenced-4", 200, stsJSON("5", false), false, "comes back"},
		{"replicas unset means one", "fenced-1", 200, stsJSON("", false), true, "scaled to 1 replicas"},
		{"replicas unset, ordinal 0", "fenced-0", 200, stsJSON("", false), false, "comes back"},
		{"scaled to zero", "fenced-2", 200, stsJSON("0", false), false, "zero"},
		{"being deleted", "fenced-4", 200, stsJSON("3", true), false, "being deleted"},
		{"gone", "fenced-4", 404, `{"kind":"Status","code":404}`, false, "404"},
		{"no right to read", "fenced-4", 403, `{"kind":"Status","code":403}`, false, "403"},
		{"not JSON", "fenced-4", 200, `<html>`, false, "StatefulSet"},
		{"unknown field type", "fenced-4", 200, `{"spec":{"replicas":"three"}}`, false, "StatefulSet"},
		{"negative replicas", "fenced-4", 200, stsJSON("-1", false), false, "negative"},
		{"not an ordinal", "fenced-x", 200, stsJSON("3", false), false, "NAME-ORDINAL"},
		{"leading zero", "fenced-04", 200, stsJSON("3", false), false, "NAME-ORDINAL"},
		{"no name", "-4", 200, stsJSON("3", false), false, "NAME-ORDINAL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, auth := fakeKube(t, "fenced", tt.code, tt.body)
			goes, why := podGoes(context.Background(), tt.pod, k, nil)
			if goes != tt.goes || !strings.Contains(why, tt.says) {
				t.Fatalf("podGoes(%s) = %v, %q; want %v, saying %q", tt.pod, goes, why, tt.goes, tt.says)
			}
			// A name that is not NAME-ORDINAL never reaches the API.
			if got, asked := auth.Load().(string); asked && got != "Bearer sa-token" {
				t.Fatalf("the API was asked with Authorization %q", got)
			} else if _, _, named := podOrdinal(tt.pod); asked != named {
				t.Fatalf("the API was asked: %v; the name is NAME-ORDINAL: %v", asked, named)
			}
		})
	}
}

// TestPodGoesWithoutAPI: outside Kubernetes, or without a service-account
// token, the member stays and the hook says why.
func TestPodGoesWithoutAPI(t *testing.T) {
	goes, why := podGoes(context.Background(), "fenced-4", nil, errors.New("no service-account token"))
	if goes || !strings.Contains(why, "no service-account token") {
		t.Fatalf("podGoes = %v, %q", goes, why)
	}
}

// TestInClusterAPI reads the service account the way Kubernetes mounts it.
func TestInClusterAPI(t *testing.T) {
	dir := t.TempDir()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	inPod := env(map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"})
	if _, err := inClusterAPI(dir, env(nil)); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Fatalf("outside a pod: %v", err)
	}
	if _, err := inClusterAPI(dir, inPod); err == nil || !strings.Contains(err.Error(), "service-account token") {
		t.Fatalf("without a token: %v", err)
	}
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	caPEM := pemCert(srv.Certificate().Raw)
	for name, data := range map[string]string{"token": "tok\n", "ca.crt": caPEM, "namespace": "coord"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k, err := inClusterAPI(dir, inPod)
	if err != nil {
		t.Fatal(err)
	}
	if k.base != "https://10.96.0.1:443" || k.namespace != "coord" || k.token != "tok" {
		t.Fatalf("api %+v", k)
	}
	v6 := env(map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"})
	if k, err = inClusterAPI(dir, v6); err != nil || k.base != "https://[fd00::1]:443" {
		t.Fatalf("IPv6: %v %v", k, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := inClusterAPI(dir, inPod); err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Fatalf("a bad CA: %v", err)
	}
}

// fakeMember serves /v1/cluster with st and records removals and transfers.
func fakeMember(t *testing.T, st client.Status, removeCode int) (addr string, removed *atomic.Value, transfers *atomic.Int32) {
	t.Helper()
	removed, transfers = &atomic.Value{}, &atomic.Int32{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("POST /v1/cluster/remove", func(w http.ResponseWriter, r *http.Request) {
		var req client.RemoveRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		removed.Store(req.ID)
		w.WriteHeader(removeCode)
		_ = json.NewEncoder(w).Encode(map[string]string{"code": "forbidden", "message": "no"})
	})
	mux.HandleFunc("POST /v1/cluster/transfer", func(w http.ResponseWriter, r *http.Request) {
		transfers.Add(1)
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]string{"code": "forbidden", "message": "fenced-0 (peer, peer) may not call POST /v1/cluster/transfer: it needs the admin role"})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), removed, transfers
}

func voters(ids ...string) []client.Member {
	var ms []client.Member
	for _, id := range ids {
		ms = append(ms, client.Member{ID: id, Voter: true})
	}
	return ms
}

// TestPreStop runs the whole hook against a fake StatefulSet and a fake
// node: a pod scaled away leaves, any other pod only steps down.
func TestPreStop(t *testing.T) {
	five := voters("fenced-0", "fenced-1", "fenced-2", "fenced-3", "fenced-4")
	tests := []struct {
		name      string
		id        string
		replicas  string
		st        client.Status
		removeRC  int
		code      int
		removed   string
		transfers int32
		says      string
	}{
		{"scaled away", "fenced-4", "3", client.Status{ID: "fenced-4", LeaderID: "fenced-0", Members: five}, 200, 0, "fenced-4", 0, "fenced-4 left the cluster"},
		{"scaled away, leading", "fenced-4", "3", client.Status{ID: "fenced-4", LeaderID: "fenced-4", Members: five}, 200, 0, "fenced-4", 0, "left the cluster"},
		{"rolling update", "fenced-4", "5", client.Status{ID: "fenced-4", LeaderID: "fenced-0", Members: five}, 200, 0, "", 0, "does not lead"},
		{"rolling update of the leader, transfer refused", "fenced-0", "5", client.Status{ID: "fenced-0", LeaderID: "fenced-0", Members: five}, 200, 0, "", 1, "SIGTERM hands it over"},
		{"already removed", "fenced-4", "3", client.Status{ID: "fenced-4", Members: voters("fenced-0", "fenced-1", "fenced-2")}, 200, 0, "", 0, "not a member"},
		{"the last voter", "fenced-1", "1", client.Status{ID: "fenced-1", LeaderID: "fenced-1", Members: voters("fenced-1")}, 200, 0, "", 0, "only voter"},
		{"another node answers", "fenced-4", "3", client.Status{ID: "fenced-2", LeaderID: "fenced-0", Members: five}, 200, 1, "", 0, "is fenced-2, not fenced-4"},
		{"removal refused", "fenced-4", "3", client.Status{ID: "fenced-4", LeaderID: "fenced-0", Members: five}, 403, 1, "fenced-4", 0, "forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, removed, transfers := fakeMember(t, tt.st, tt.removeRC)
			k, _ := fakeKube(t, "fenced", 200, stsJSON(tt.replicas, false))
			var out strings.Builder
			code := preStop([]string{"--http-advertise", addr, "--peers-from-dns", "fenced-{0..2}.fenced-headless:7701", "--id", tt.id},
				&out, &out, func() (*kubeAPI, error) { return k, nil })
			got, _ := removed.Load().(string)
			if code != tt.code || got != tt.removed || transfers.Load() != tt.transfers || !strings.Contains(out.String(), tt.says) {
				t.Fatalf("exit %d, removed %q, %d transfers, said:\n%s\nwant exit %d, removed %q, %d transfers, saying %q",
					code, got, transfers.Load(), out.String(), tt.code, tt.removed, tt.transfers, tt.says)
			}
		})
	}
}

// TestPreStopNeedsDNSNames: the hook reads the StatefulSet only for a node
// named by --peers-from-dns; a node of a peer list only steps down.
func TestPreStopNeedsDNSNames(t *testing.T) {
	addr, removed, _ := fakeMember(t, client.Status{ID: "fenced-4", LeaderID: "fenced-0", Members: voters("fenced-0", "fenced-4")}, 200)
	k, _ := fakeKube(t, "fenced", 200, stsJSON("3", false))
	var out strings.Builder
	code := preStop([]string{"--http-advertise", addr, "--id", "fenced-4", "--peers", "fenced-0=a:1,fenced-4=b:1"}, &out, &out,
		func() (*kubeAPI, error) { return k, nil })
	if got, _ := removed.Load().(string); code != 0 || got != "" || !strings.Contains(out.String(), "--peers-from-dns") {
		t.Fatalf("exit %d, removed %q, said %q", code, got, out.String())
	}
}

func pemCert(der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
