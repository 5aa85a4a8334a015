package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
)

var signingKeysCommand = command{
	name:    "signing-keys",
	summary: "show and rotate the keys that sign grants' proofs",
	help: `
Every grant carries a proof: a JWS signed with Ed25519 by the leader that made
it, over the key, the token, the holder and the cluster's ID. A resource that
pins the cluster's public keys checks a proof offline and refuses a token
fenced never issued (docs/FENCING.md). Each node has its own key (signing.key
in its data dir, or --signing-key-file); the members' public keys are
replicated and published at GET /v1/signing-keys.`,
	examples: `
fencectl signing-keys list
fencectl signing-keys list -o json > /etc/myresource/fenced-keys.json
fencectl signing-keys rotate --overlap 48h`,
	subs: []command{signingKeysListCommand, signingKeysRotateCommand},
}

var signingKeysListCommand = command{
	name:    "signing-keys list",
	summary: "list the published public keys (-o json: the JWKS to pin in a resource)",
	help: `
Lists the public keys a proof may be signed with: each member's current key,
and a key its member replaced until the overlap of the rotation ends. With
-o json the answer is the JWKS (with the cluster's ID) that 'fencectl verify
--offline --keys FILE' and the guards read.`,
	examples: `
fencectl signing-keys list
fencectl signing-keys list -o json > keys.json`,
	new: func() runner { return &signingKeysListCmd{} },
}

type signingKeysListCmd struct{}

func (*signingKeysListCmd) flags(*pflag.FlagSet) {}

func (*signingKeysListCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 0 {
		return usageErr("signing-keys list", "signing-keys list takes no arguments")
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	ks, err := e.client().SigningKeys(ctx)
	if err != nil {
		return explain(err, subject{}, e)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, ks)
	}
	fmt.Fprintf(e.stdout, "cluster %s\n", ks.Cluster)
	fmt.Fprintf(e.stdout, "%-44s %-12s %s\n", "KID", "NODE", "PUBLISHED UNTIL")
	for _, k := range ks.Keys {
		until := "current"
		if k.NotAfter != "" {
			until = k.NotAfter
		}
		fmt.Fprintf(e.stdout, "%-44s %-12s %s\n", k.Kid, k.Node, until)
	}
	return nil
}

var signingKeysRotateCommand = command{
	name:    "signing-keys rotate",
	summary: "give the leader a new signing key; the old one stays published for --overlap",
	help: `
The leader makes a new Ed25519 key, writes it to its data dir, publishes it
and signs every later proof with it. Its replaced key stays published for
--overlap (24h by default, at most 2160h), so resources that refresh their
pinned keys within that time keep checking proofs signed before. Proofs the
old key signed stay genuine: a resource that pinned it may keep it.

A key supplied with --signing-key-file is the operator's: rotate it by
replacing the file and restarting the node. Admin credentials needed.`,
	examples: `
fencectl signing-keys rotate
fencectl signing-keys rotate --overlap 1h`,
	new: func() runner { return &signingKeysRotateCmd{} },
}

type signingKeysRotateCmd struct{ overlap string }

func (r *signingKeysRotateCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&r.overlap, "overlap", "", "how long the replaced key stays published (default 24h)")
}

func (r *signingKeysRotateCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 0 {
		return usageErr("signing-keys rotate", "signing-keys rotate takes no arguments")
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	out, err := e.client().RotateSigningKey(ctx, r.overlap)
	if err != nil {
		return explain(err, subject{}, e)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, out)
	}
	fmt.Fprintf(e.stdout, "node %s signs with key %s; the replaced key stays published for %s\n", out.Node, out.Kid, out.Overlap)
	return nil
}
