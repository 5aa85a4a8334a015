package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/acl"
	"github.com/fenced/fenced/client"
)

var aclCommand = command{
	name:    "acl",
	summary: "explain the key ACL: which rule lets an identity lock, read or verify a key",
	help: `
With 'fenced --acl-file', each client identity may lock, read or verify only
the keys its rules name (admins every key), and anything no rule allows is
refused (403 forbidden). The file has one rule per line:

  IDENTITY  RIGHTS            PREFIX
  billing   lock,read,verify  billing/
  *         verify            ""

IDENTITY is a client identity's name (a tokens file's NAME, a certificate's
CN) or * for every identity; RIGHTS a comma list of lock (acquire, renew,
release, keepalive, waits), read (keys, key, blocking reads, watch) and
verify; PREFIX the start of the keys it covers ("" for every key). SIGHUP
reloads it; 'fencectl status' flags a node whose file differs.`,
	examples: `
fencectl acl check billing lock billing/db
fencectl acl check bob read alice/db --file /etc/fenced/acl`,
	subs: []command{aclCheckCommand},
}

var aclCheckCommand = command{
	name:    "acl check",
	args:    "IDENTITY RIGHT KEY",
	summary: "say whether IDENTITY may RIGHT (lock, read, verify) KEY, and which rule decides",
	help: `
Asks a node (admin credentials needed: the rules name every team's keys)
whether its ACL lets IDENTITY exercise RIGHT on KEY, and names the rule that
decides: the one with the longest prefix, then the identity's own over *.
With --file, the file is judged locally instead, with no cluster.

Exit 0: allowed; 3: refused (no rule allows it); 1: the question could not
be answered. Admin identities have every right, whatever the file says.`,
	examples: `
fencectl acl check billing lock billing/db
fencectl acl check bob read alice/db --file acl.txt -o json`,
	new: func() runner { return &aclCheckCmd{} },
}

type aclCheckCmd struct{ file string }

func (a *aclCheckCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&a.file, "file", "", "judge this ACL file locally instead of asking a node")
	completeFlag(fs, "file", completeFiles)
}

func (a *aclCheckCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 3 {
		return usageErr("acl check", "acl check takes IDENTITY RIGHT KEY")
	}
	req := client.ACLCheckRequest{Identity: args[0], Right: args[1], Key: args[2]}
	if _, err := acl.ParseRight(req.Right); err != nil {
		return usageErr("acl check", err.Error())
	}
	var out *client.ACLCheckResponse
	var err error
	if a.file != "" {
		out, err = checkFile(a.file, req)
	} else {
		ctx, cancel := e.withTimeout(ctx, 0)
		defer cancel()
		out, err = e.client().ACLCheck(ctx, req)
	}
	if err != nil {
		return explain(err, subject{key: req.Key}, e)
	}
	if e.jsonOutput() {
		if err := printJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		verdict := "ALLOW"
		if !out.Allow {
			verdict = "REFUSE"
		}
		fmt.Fprintf(e.stdout, "%s: %s may %s %q: %s\n", verdict, out.Identity, out.Right, out.Key, out.Reason)
		if out.Rule != "" {
			fmt.Fprintf(e.stdout, "rule (line %d): %s\n", out.Line, out.Rule)
		}
	}
	if !out.Allow {
		return &exitError{code: exitRefused}
	}
	return nil
}

// checkFile judges req against an ACL file, as a node would.
func checkFile(path string, req client.ACLCheckRequest) (*client.ACLCheckResponse, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l, err := acl.Parse(f)
	if err != nil {
		return nil, err
	}
	right, _ := acl.ParseRight(req.Right)
	out := &client.ACLCheckResponse{Identity: req.Identity, Right: right.String(), Key: req.Key, Digest: l.Digest(),
		Reason: "no rule gives this identity this right on this key (default deny)"}
	if r, ok := l.Decide(req.Identity, right, req.Key); ok {
		out.Allow, out.Line, out.Rule, out.Reason = true, r.Line, r.String(), fmt.Sprintf("line %d allows it", r.Line)
	}
	return out, nil
}
