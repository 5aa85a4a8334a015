package main

import (
	"bufio"
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/cluster"
)

var debugCommand = command{
	name:    "debug",
	summary: "read a stopped node's data offline",
	help: `
Commands that read a node's data dir directly, without the cluster: for
audits and post-mortems. The node must be stopped (its Raft log is locked
while it runs); copy the data dir elsewhere to read it without stopping the
node for long.`,
	examples: `
fencectl debug log --data-dir /var/lib/fenced`,
	subs: []command{debugLogCommand},
}

var debugLogCommand = command{
	name:    "debug log",
	args:    "[KEY...]",
	summary: "print every grant in a stopped node's Raft log, as JSON lines",
	help: `
Replays the data dir of a stopped node — its newest snapshot, then every log
entry after it, through the same deterministic state machine the cluster
runs — and prints every grant it finds (of the KEYs only, when given), in log
order, one JSON object per line (whatever --output says):

  {"key":…, "holder":…, "token":"…", "epoch":…, "seq":…, "ttl":…,
   "term":…, "index":…, "source":"log"|"snapshot", "state":…}

This is the audit trail of who held what and with which token. The tokens are
the ones the cluster computed; within a key they increase line after line.

  - source "log": a grant replayed from a log entry; term and index are the
    entry's.
  - source "snapshot": the last grant of a key kept in the node's snapshot,
    with its state then; earlier grants of that key were compacted away
    (see --snapshot-threshold of fenced), and term is 0.

The end of one node's log may hold entries that were never committed (a
leader that crashed before replicating them): an entry is certain only when a
majority of the nodes' logs hold it. Renewals are not listed; neither are
releases and expiries, which end grants without making new ones.`,
	examples: `
fencectl debug log --data-dir /var/lib/fenced
fencectl debug log --data-dir /var/lib/fenced orders-db billing-db
fencectl debug log --data-dir /var/lib/fenced | jq -c 'select(.holder == "worker-7")'`,
	new: func() runner { return &debugLogCmd{} },
}

type debugLogCmd struct {
	dataDir string
}

func (d *debugLogCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&d.dataDir, "data-dir", "", "the data dir of a stopped node (required)")
	completeFlag(fs, "data-dir", completeDirs)
}

func (d *debugLogCmd) run(_ context.Context, e *env, args []string) error {
	if d.dataDir == "" {
		return usageErr("debug log", "--data-dir is required")
	}
	if cluster.StoreKind(d.dataDir) == "" {
		return fmt.Errorf("%s holds neither raft.db nor wal/: not the data dir of a fenced node", d.dataDir)
	}
	only := map[string]bool{}
	for _, k := range args {
		only[k] = true
	}
	w := bufio.NewWriter(e.stdout)
	err := cluster.ReadGrants(d.dataDir, func(r cluster.GrantRecord) error {
		if len(only) > 0 && !only[r.Key] {
			return nil
		}
		return printJSONLine(w, r)
	})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}
