package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
)

var keysCommand = command{
	name:    "keys",
	args:    "[PREFIX]",
	summary: "list keys with their holder, token, state and remaining lease",
	help: `
Lists the keys whose names start with PREFIX (every key without one), in name
order, read linearizably from the leader. A key stays listed after its grant
ends: fenced never forgets a key, so that its tokens keep growing.

REMAINING is the lease time left on the leader's clock, for held keys.

Without --limit every key is listed, read page by page (each page
linearizable, the whole not one snapshot). With --limit N (at most 10000), at
most N keys are listed; when there were more, fencectl says so on stderr with
the --after KEY that lists the next page (in JSON, "truncated": true and
"next": KEY). --after KEY lists the keys whose names come after KEY.`,
	examples: `
fencectl keys
fencectl keys deploy/
fencectl keys deploy/ --limit 100 --after deploy/web-17
fencectl keys --limit 20 -o json | jq -r '.keys[] | select(.state == "held") | .key'`,
	new: func() runner { return &keysCmd{} },
}

type keysCmd struct {
	limit int
	after string
	state string
}

func (k *keysCmd) flags(fs *pflag.FlagSet) {
	fs.IntVar(&k.limit, "limit", 0, "list at most this many keys (0: all)")
	fs.StringVar(&k.after, "after", "", "list the keys whose names come after this one (the cursor of the previous page)")
	fs.StringVar(&k.state, "state", "", "list only the keys in this state: held, released or expired")
	completeFlag(fs, "state", "held", "released", "expired")
}

func (k *keysCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) > 1 {
		return usageErr("keys", "keys takes at most one PREFIX")
	}
	if k.limit < 0 || k.limit > client.MaxKeysLimit {
		return usageErr("keys", fmt.Sprintf("--limit must be from 0 (every key) to %d", client.MaxKeysLimit))
	}
	switch k.state {
	case "", "held", "released", "expired":
	default:
		return usageErr("keys", "--state must be held, released or expired")
	}
	prefix := ""
	if len(args) == 1 {
		prefix = args[0]
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	q := client.KeysQuery{Prefix: prefix, State: k.state, After: k.after, Limit: k.limit}
	var kr *client.KeysResponse
	var err error
	if k.limit == 0 {
		kr = &client.KeysResponse{}
		kr.Keys, err = e.client().ListAllKeys(ctx, q)
	} else {
		kr, err = e.client().ListKeys(ctx, q)
	}
	if err != nil {
		return explain(err, subject{key: prefix}, e)
	}
	if kr.Keys == nil {
		kr.Keys = []client.KeyInfo{}
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, kr)
	}
	t := newTable(e.stdout, "KEY", "HOLDER", "TOKEN", "EPOCH", "SEQ", "STATE", "TTL", "REMAINING")
	for _, ki := range kr.Keys {
		t.row(ki.Key, ki.Holder, ki.Token.String(), strconv.FormatUint(ki.Epoch, 10), strconv.FormatUint(ki.Seq, 10),
			ki.State, ki.TTL, ki.LeaseRemaining)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if kr.Truncated {
		fmt.Fprintf(e.stderr, "fencectl: listing cut at --limit %d; the next page: --after %s\n", k.limit, kr.Next)
	}
	return nil
}

var keyCommand = command{
	name:    "key",
	args:    "KEY",
	summary: "show one key: holder, token (epoch, seq), state and remaining lease",
	help: `
Shows one key, read linearizably from the leader: its current or last holder,
the token of its last grant with the token's epoch and seq, the state of that
grant (held, released, expired), its TTL and, when held, the lease time left on
the leader's clock.

A key that was never granted is an error (exit 1).`,
	examples: `
fencectl key db
fencectl key db -o json | jq -r .token`,
	new: func() runner { return &keyCmd{} },
}

type keyCmd struct{}

func (*keyCmd) flags(*pflag.FlagSet) {}

func (*keyCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 1 {
		return usageErr("key", "key takes exactly one KEY")
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	ki, err := e.client().Key(ctx, args[0])
	if err != nil {
		return explain(err, subject{key: args[0]}, e)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, ki)
	}
	return printKeyInfo(e, ki)
}

func printKeyInfo(e *env, ki *client.KeyInfo) error {
	return fields(e.stdout,
		"key", ki.Key,
		"holder", ki.Holder,
		"token", tokenText(ki.Token),
		"state", ki.State,
		"ttl", ki.TTL,
		"remaining", ki.LeaseRemaining,
		"index", strconv.FormatUint(ki.Index, 10),
	)
}
