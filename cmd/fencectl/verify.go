package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
)

var verifyCommand = command{
	name:    "verify",
	args:    "KEY TOKEN [PROOF]",
	summary: "check that a token is the current live grant of a key (exit 0 ALLOW, 3 REFUSE)",
	help: `
Asks the cluster, linearizably, whether TOKEN is the current grant of KEY with
a live lease (and, with --holder, that it belongs to that holder).

Exit 0 means ALLOW: the leader proved it. Exit 3 means REFUSE, with the reason
on stderr: superseded, released, expired, unknown_key, not_granted_yet,
holder_mismatch, malformed, or unavailable. verify fails closed: whatever it
cannot prove (no node reachable, no leader, --timeout reached, a malformed
token) is REFUSE with exit 3, never an error a script could mistake for an
allow. Only wrong usage (missing arguments, an unknown flag) exits 2.

A verify answers for the moment it was asked. A resource must still compare
tokens itself, atomically with each write; verify is for gates that cannot.

With --offline --keys FILE, no cluster is asked: PROOF (the grant's proof)
is checked against the public keys of FILE (the JSON of 'fencectl
signing-keys list -o json', or any JWKS of Ed25519 keys) and must be a
genuine proof for KEY and TOKEN (and --holder, and the cluster the file
names). That proves fenced issued the token, not that its lease is live.
Exit 0 ALLOW, 3 REFUSE with one of the reasons proof_missing,
proof_malformed, proof_algorithm, proof_unknown_signer, proof_signature,
proof_wrong_key, proof_wrong_token, proof_wrong_holder, proof_wrong_cluster,
or keys_unusable (FILE unreadable or not a key set).`,
	examples: `
fencectl verify db 4294967297 && run-the-job
fencectl verify --offline --keys keys.json db 4294967297 "$FENCE_PROOF"
fencectl verify db "$FENCE_TOKEN" --holder "$FENCE_HOLDER" || exit 1
fencectl verify db 4294967297 -o json`,
	new: func() runner { return &verifyCmd{} },
}

type verifyCmd struct {
	holder  string
	offline bool
	keys    string
}

func (v *verifyCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&v.holder, "holder", "", "also require the grant to belong to this holder")
	fs.BoolVar(&v.offline, "offline", false, "check the grant's PROOF against --keys instead of asking the cluster")
	fs.StringVar(&v.keys, "keys", "", "with --offline: the JWKS file of the cluster's public signing keys")
	completeFlag(fs, "keys", completeFiles)
}

// verifyResult is the JSON document of fencectl verify.
type verifyResult struct {
	Key           string      `json:"key"`
	Token         string      `json:"token"`
	Holder        string      `json:"holder,omitempty"`
	Allow         bool        `json:"allow"`
	Reason        string      `json:"reason"`
	CurrentToken  fence.Token `json:"current_token,omitempty"`
	CurrentHolder string      `json:"current_holder,omitempty"`
	Error         string      `json:"error,omitempty"`
}

func (v *verifyCmd) run(ctx context.Context, e *env, args []string) error {
	if v.offline {
		return v.runOffline(e, args)
	}
	if v.keys != "" {
		return usageErr("verify", "--keys is used only with --offline")
	}
	if len(args) != 2 {
		return usageErr("verify", "verify takes KEY and TOKEN (and PROOF with --offline)")
	}
	r := v.ask(ctx, e, args[0], args[1])
	if e.jsonOutput() {
		if err := printJSON(e.stdout, r); err != nil {
			return &exitError{code: exitRefused, msg: "REFUSE unavailable: " + err.Error()}
		}
	}
	if !r.Allow {
		return &exitError{code: exitRefused, msg: "REFUSE " + r.Reason + ": " + refusal(r)}
	}
	if !e.jsonOutput() {
		fmt.Fprintf(e.stdout, "ALLOW token %s is the current grant of key %s (holder %s)\n", r.Token, r.Key, r.CurrentHolder)
	}
	return nil
}

// ask gets the verdict. It allows only on an answer of the cluster that says
// allow for this very token; every other outcome is a refusal with a reason.
func (v *verifyCmd) ask(ctx context.Context, e *env, key, tokText string) verifyResult {
	r := verifyResult{Key: key, Token: tokText, Holder: v.holder, Reason: string(cluster.ReasonUnavailable)}
	tok, err := fence.Parse(tokText)
	if err != nil {
		r.Reason, r.Error = string(cluster.ReasonMalformed), err.Error()
		return r
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	resp, err := e.client().Verify(ctx, key, tokText, v.holder)
	r.Reason, r.CurrentToken, r.CurrentHolder = resp.Reason, resp.CurrentToken, resp.Holder
	switch {
	case err != nil:
		r.Allow, r.Error = false, oneLine(explain(err, subject{key: key, token: tokText}, e).Error())
	case resp.Allow && resp.Reason == string(cluster.ReasonOK) && (resp.CurrentToken == 0 || resp.CurrentToken == tok):
		r.Allow = true
	case resp.Allow:
		// An allow that does not add up is not a proof.
		r.Allow, r.Reason = false, string(cluster.ReasonUnavailable)
		r.Error = fmt.Sprintf("inconsistent answer: allow with reason %q and current token %s", resp.Reason, resp.CurrentToken)
	}
	if r.Reason == "" {
		r.Reason = string(cluster.ReasonUnavailable)
	}
	return r
}

// refusal explains a refused verdict in words.
func refusal(r verifyResult) string {
	switch cluster.Reason(r.Reason) {
	case cluster.ReasonSuperseded:
		return fmt.Sprintf("token %s of key %s was replaced by a newer grant (token %s, holder %s)", r.Token, r.Key, r.CurrentToken, r.CurrentHolder)
	case cluster.ReasonReleased:
		return fmt.Sprintf("the grant of key %s with token %s was released", r.Key, r.Token)
	case cluster.ReasonExpired:
		return fmt.Sprintf("the lease of the grant of key %s with token %s has expired", r.Key, r.Token)
	case cluster.ReasonUnknownKey:
		return fmt.Sprintf("key %s was never granted", r.Key)
	case cluster.ReasonNotGrantedYet:
		return fmt.Sprintf("token %s of key %s was never granted: the key's highest token is %s", r.Token, r.Key, r.CurrentToken)
	case cluster.ReasonHolderMismatch:
		return fmt.Sprintf("the grant of key %s with token %s belongs to %s, not %s", r.Key, r.Token, r.CurrentHolder, r.Holder)
	}
	if r.Error != "" {
		return r.Error
	}
	return "the cluster gave no proof that the token is current"
}
