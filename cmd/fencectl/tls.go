package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/tlsutil"
)

var tlsCommand = command{
	name:    "tls",
	summary: "make the certificates of a secure cluster",
	help: `
Makes what a cluster with TLS, mutual TLS between nodes and authenticated
clients needs, for development and tests: a CA, and certificates signed by it.
Production clusters should use their own CA; docs/SECURITY.md says what each
certificate must contain.`,
	examples: `
fencectl tls init --dir tls --nodes n1,n2,n3
fencectl tls init --dir tls --nodes n1,n2,n3 --hosts fenced1,fenced2,fenced3`,
	subs: []command{tlsInitCommand},
}

var tlsInitCommand = command{
	name:    "tls init",
	summary: "create a development CA and the certificates of every node and client",
	help: `
Creates, in --dir:

  ca.pem, ca-key.pem             the CA; it signs everything below
  NODE/server.pem, -key.pem      the node's HTTP API certificate
  NODE/peer.pem, -key.pem        the node's peer certificate (OU=peer): mutual
                                 TLS on the Raft transport, and its identity
                                 when it forwards a request or joins
  admin.pem, admin-key.pem       a client certificate with the admin role
  client.pem, client-key.pem     a client certificate with the client role

Node certificates name the node id, localhost, 127.0.0.1, ::1 and every
--hosts entry; a node id that is one of those shared names is refused, since
every node's certificate would then prove it. Keys are readable by their owner
only. Existing files are
never overwritten. It then prints the flags fenced and fencectl need.`,
	examples: `
fencectl tls init --dir tls --nodes n1,n2,n3
fencectl tls init --dir tls --nodes n1,n2,n3 --hosts fenced1,fenced2,fenced3,10.0.0.5`,
	new: func() runner { return &tlsInitCmd{} },
}

type tlsInitCmd struct {
	dir        string
	nodes      []string
	hosts      []string
	adminName  string
	clientName string
	validity   time.Duration
}

func (t *tlsInitCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&t.dir, "dir", "tls", "directory to create the files in")
	completeFlag(fs, "dir", completeDirs)
	fs.StringSliceVar(&t.nodes, "nodes", []string{"n1", "n2", "n3"}, "node ids, comma-separated: one server and one peer certificate each")
	fs.StringSliceVar(&t.hosts, "hosts", nil, "extra host names or IP addresses for every node certificate, comma-separated")
	fs.StringVar(&t.adminName, "admin-name", "admin", "identity name (CN) of the admin certificate")
	fs.StringVar(&t.clientName, "client-name", "client", "identity name (CN) of the client certificate: the holders it may act as are NAME and NAME/…")
	fs.DurationVar(&t.validity, "validity", 365*24*time.Hour, "how long the certificates are valid (the CA ten times longer)")
}

func (t *tlsInitCmd) run(_ context.Context, e *env, args []string) error {
	if len(args) != 0 {
		return usageErr("tls init", "tls init takes no arguments")
	}
	if t.validity <= 0 {
		return usageErr("tls init", "--validity must be positive")
	}
	var nodes []string
	for _, n := range t.nodes {
		if n = strings.TrimSpace(n); n != "" {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return usageErr("tls init", "--nodes: no node id given")
	}
	p, err := tlsutil.WriteDevPKI(t.dir, tlsutil.DevOptions{Nodes: nodes, Hosts: t.hosts,
		AdminName: t.adminName, ClientName: t.clientName, Validity: t.validity})
	if err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, p)
	}
	printTLSInit(e, p, nodes, t.clientName)
	return nil
}

func printTLSInit(e *env, p *tlsutil.DevPKI, nodes []string, clientName string) {
	w := e.stdout
	fmt.Fprintf(w, "Created a development CA and certificates in %s (keys readable by you only):\n\n", p.Dir)
	t := newTable(w, "FILE", "WHAT")
	t.row(p.CA, "the CA: every node and client trusts it; "+filepath.Base(p.CAKey)+" signs new certificates")
	sort.Strings(nodes)
	for _, n := range nodes {
		t.row(p.Nodes[n].Server.Cert, n+"'s HTTP API certificate")
		t.row(p.Nodes[n].Peer.Cert, n+"'s peer certificate (OU=peer): Raft, forwarding, joining")
	}
	t.row(p.Admin.Cert, "client certificate, role admin")
	t.row(p.Client.Cert, fmt.Sprintf("client certificate, role client: holders %q and %q", clientName, clientName+"/…"))
	_ = t.flush()
	fmt.Fprintf(w, "\nStart each node with its own certificates, for example %s:\n\n", nodes[0])
	nf := p.Nodes[nodes[0]]
	fmt.Fprintf(w, "  fenced --id %s ... \\\n", nodes[0])
	fmt.Fprintf(w, "    --tls-cert %s --tls-key %s --tls-ca %s \\\n", nf.Server.Cert, nf.Server.Key, p.CA)
	fmt.Fprintf(w, "    --peer-tls-cert %s --peer-tls-key %s --peer-tls-ca %s\n", nf.Peer.Cert, nf.Peer.Key, p.CA)
	fmt.Fprintf(w, "\nor in its environment:\n\n")
	fmt.Fprintf(w, "  FENCED_TLS_CERT=%s FENCED_TLS_KEY=%s FENCED_TLS_CA=%s\n", nf.Server.Cert, nf.Server.Key, p.CA)
	fmt.Fprintf(w, "  FENCED_PEER_TLS_CERT=%s FENCED_PEER_TLS_KEY=%s FENCED_PEER_TLS_CA=%s\n", nf.Peer.Cert, nf.Peer.Key, p.CA)
	fmt.Fprintf(w, "\nThen talk to the cluster with https, as admin:\n\n")
	fmt.Fprintf(w, "  export FENCE_CACERT=%s FENCE_CERT=%s FENCE_KEY_FILE=%s\n", p.CA, p.Admin.Cert, p.Admin.Key)
	fmt.Fprintf(w, "  fencectl --endpoints https://127.0.0.1:7710 status\n")
	fmt.Fprintf(w, "\nor as a client (holders %q and %q):\n\n", clientName, clientName+"/…")
	fmt.Fprintf(w, "  fencectl --cacert %s --cert %s --key %s acquire orders-db --holder %s/worker-1\n", p.CA, p.Client.Cert, p.Client.Key, clientName)
}
