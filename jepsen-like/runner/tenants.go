package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/jepsen-like/backend"
	"github.com/fenced/fenced/jepsen-like/checker"
	"github.com/fenced/fenced/jepsen-like/history"
	"github.com/fenced/fenced/jepsen-like/workload"
)

// The identities of a two-tenant run: the harness's own calls (status,
// recovery probe, final reads) are the admin's; the checked workload is
// alice's, on the jepsen/ keys; mallory floods.
const (
	tenantAdmin   = "ops"
	tenantVictim  = "alice"
	tenantFlooder = "mallory"
	// tenantWaitersPerKey is fenced's --max-waiters-per-key in a two-tenant
	// run: low, so the flood could fill a key's queue within seconds
	// (which only the ACL keeps it from doing to alice's keys).
	tenantWaitersPerKey = 64
	// tenantRateLimit is fenced's --rate-limit in a two-tenant run: each
	// identity's requests per second to a node, so that the flood's CPU
	// is a share too. alice's workload sends a fraction of it.
	tenantRateLimit = 200
)

// The flood's sizes: past mallory's shares (100 watches per node by
// default, tenantWaitersPerKey waiters per key), small enough for two cores.
const (
	floodWatches       = 130
	floodCyclers       = 4
	floodWaiters       = tenantWaitersPerKey + 16
	floodVictimWaiters = tenantWaitersPerKey + 16
	floodVictimTakers  = 2
)

// tenantsRun is the setup of a two-tenant run; nil when the run has one
// tenant.
type tenantsRun struct {
	tokens map[string]string // identity -> bearer token
	flood  *workload.Flood
	counts map[string]map[string]int // the flood's answers, once stopped
}

func tenantsOn(cfg Config) bool {
	return cfg.Tenants || cfg.Broken == workload.BrokenTenantsNoACL
}

// setupTenants writes the tokens file and the ACL file of a two-tenant run
// into dir and returns the fenced flags that use them. The positive
// control (tenants-no-acl) leaves the ACL file out.
func setupTenants(cfg Config, dir string) (*tenantsRun, []string, error) {
	if !tenantsOn(cfg) {
		return nil, nil, nil
	}
	t := &tenantsRun{tokens: map[string]string{}}
	roles := map[string]string{tenantAdmin: "admin", tenantVictim: "client", tenantFlooder: "client"}
	var lines string
	for _, id := range []string{tenantAdmin, tenantVictim, tenantFlooder} {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, nil, err
		}
		t.tokens[id] = hex.EncodeToString(b)
		lines += fmt.Sprintf("%s %s %s\n", t.tokens[id], roles[id], id)
	}
	tokens, acl := filepath.Join(dir, "tokens"), filepath.Join(dir, "acl")
	if err := os.WriteFile(tokens, []byte(lines), 0o600); err != nil {
		return nil, nil, err
	}
	// alice's keys are the workload's (jepsen/...), mallory's her own.
	rules := fmt.Sprintf("%s lock,read,verify jepsen/\n%s lock,read,verify %s/\n", tenantVictim, tenantFlooder, tenantFlooder)
	if err := os.WriteFile(acl, []byte(rules), 0o600); err != nil {
		return nil, nil, err
	}
	args := []string{"--auth-tokens", tokens, "--max-waiters-per-key", fmt.Sprint(tenantWaitersPerKey), "--rate-limit", fmt.Sprint(tenantRateLimit)}
	if cfg.Broken != workload.BrokenTenantsNoACL {
		args = append(args, "--acl-file", acl)
	}
	return t, args, nil
}

// adminToken is the token of the harness's own calls; "" in a run without
// authentication.
func (t *tenantsRun) adminToken() string {
	if t == nil {
		return ""
	}
	return t.tokens[tenantAdmin]
}

// admin returns the client options of the harness's own calls.
func (t *tenantsRun) admin() []client.Option { return backend.AuthOptions(t.adminToken()) }

// victim returns the client options of alice's watchers.
func (t *tenantsRun) victim() []client.Option {
	if t == nil {
		return nil
	}
	return backend.AuthOptions(t.tokens[tenantVictim])
}

// holderPrefix is what alice's holders start with.
func (t *tenantsRun) holderPrefix() string {
	if t == nil {
		return ""
	}
	return tenantVictim + "/"
}

// status returns the nemeses' status read, with the admin's token; nil
// (the nemeses' own) in a run without authentication.
func (t *tenantsRun) status(b backend.Backend) func(ctx context.Context, id string) (*client.Status, error) {
	if t == nil {
		return nil
	}
	cl := client.New(nil, append([]client.Option{client.WithHTTPClient(&http.Client{Timeout: time.Second})}, t.admin()...)...)
	return func(ctx context.Context, id string) (*client.Status, error) {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return cl.NodeStatus(sctx, "http://"+b.Endpoint(id))
	}
}

// start starts mallory's flood against the nodes themselves.
func (t *tenantsRun) start(ctx context.Context, cfg Config, endpoints []string, log hclog.Logger) {
	if t == nil {
		return
	}
	var victim []string
	for i := 0; i < cfg.Keys; i++ {
		victim = append(victim, workload.KeyName(i))
	}
	t.flood = workload.StartFlood(ctx, workload.FloodConfig{
		Endpoints: endpoints, Token: t.tokens[tenantFlooder], Identity: tenantFlooder,
		Victim: victim, VictimPrefix: "jepsen/",
		Watches: floodWatches, Cyclers: floodCyclers, Waiters: floodWaiters,
		VictimWaiters: floodVictimWaiters, VictimTakers: floodVictimTakers, Log: log,
	})
}

// stop ends the flood.
func (t *tenantsRun) stop() {
	if t != nil && t.flood != nil && t.counts == nil {
		t.counts = t.flood.Stop()
	}
}

// check judges the flood's answers with alice's operations, and writes
// the answers to flood.json in the results (--check does not judge them
// again).
func (t *tenantsRun) check(cfg Config, ops []history.Op, log hclog.Logger) []checker.Result {
	if t == nil {
		return nil
	}
	t.stop()
	if err := writeJSON(filepath.Join(cfg.Results, "flood.json"), t.counts); err != nil {
		log.Warn("flood answers", "error", err)
	}
	return []checker.Result{checker.Tenants(ops, t.counts, tenantFlooder)}
}
