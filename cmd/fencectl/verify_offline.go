package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/proof"
)

// offlineResult is the JSON document of fencectl verify --offline.
type offlineResult struct {
	Key     string `json:"key"`
	Token   string `json:"token"`
	Holder  string `json:"holder,omitempty"`
	Allow   bool   `json:"allow"`
	Reason  string `json:"reason"`
	Kid     string `json:"kid,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	Error   string `json:"error,omitempty"`
}

// runOffline checks a grant's proof against a pinned key set, with no
// cluster: exit 0 ALLOW, 3 REFUSE, like a guard that requires proofs.
func (v *verifyCmd) runOffline(e *env, args []string) error {
	if v.keys == "" {
		return usageErr("verify", "--offline needs --keys FILE (fencectl signing-keys list -o json > FILE)")
	}
	if len(args) != 3 {
		return usageErr("verify", "verify --offline takes KEY, TOKEN and PROOF")
	}
	r := v.checkOffline(args[0], args[1], args[2])
	if e.jsonOutput() {
		if err := printJSON(e.stdout, r); err != nil {
			return &exitError{code: exitRefused, msg: "REFUSE " + r.Reason + ": " + err.Error()}
		}
	}
	if !r.Allow {
		return &exitError{code: exitRefused, msg: "REFUSE " + r.Reason + ": " + r.Error}
	}
	if !e.jsonOutput() {
		fmt.Fprintf(e.stdout, "ALLOW proof of token %s of key %s is genuine (signed by %s of cluster %s); it says nothing of whether the lease is live\n",
			r.Token, r.Key, r.Kid, r.Cluster)
	}
	return nil
}

// checkOffline allows only a genuine proof of this very grant; anything
// else, an unusable key file included, is a refusal with its reason.
func (v *verifyCmd) checkOffline(key, tokText, p string) offlineResult {
	r := offlineResult{Key: key, Token: tokText, Holder: v.holder}
	tok, err := fence.Parse(tokText)
	if err != nil {
		r.Reason, r.Error = "malformed", err.Error()
		return r
	}
	raw, err := os.ReadFile(v.keys)
	var ks *proof.KeySet
	if err == nil {
		ks, err = proof.ParseJWKS(raw)
	}
	if err != nil {
		r.Reason, r.Error = "keys_unusable", fmt.Sprintf("%s: %v", v.keys, err)
		return r
	}
	// The file of fencectl signing-keys list names the cluster; a bare JWKS
	// does not, and the cluster is then not checked.
	var doc struct {
		Cluster string `json:"cluster_id"`
	}
	_ = json.Unmarshal(raw, &doc)
	c, err := proof.Verify(p, ks, proof.Expect{Key: key, Token: tok, Cluster: doc.Cluster, Holder: v.holder})
	if err != nil {
		r.Reason, r.Error = proof.Reason(err), err.Error()
		return r
	}
	r.Allow, r.Reason, r.Kid, r.Cluster = true, "ok", c.Kid, c.Cluster
	return r
}
