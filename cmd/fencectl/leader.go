package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
)

var leaderCommand = command{
	name:    "leader",
	summary: "hand leadership to another member",
	help: `
The leader is the member that orders every write and answers every
linearizable read. It changes on its own when it fails; 'leader transfer'
moves it on purpose, for example off a node about to be restarted, or onto
the node nearest to the clients.`,
	examples: `
fencectl leader transfer
fencectl leader transfer n2`,
	subs: []command{leaderTransferCommand},
}

var leaderTransferCommand = command{
	name:    "leader transfer",
	args:    "[ID]",
	summary: "hand leadership to member ID, or to the most up-to-date member",
	help: `
Asks the leader to hand leadership over: to the member ID, or without one to
the member whose log is the most up to date. The new leader re-arms every
live lease for a full TTL before it serves, as after any election, so no
lease ends early; requests in flight during the hand-over are retried by the
client or answered as not_leader, and acknowledged grants are never lost.

The hand-over takes about one round trip plus the new leader's first commit.
A restart of the leader ('fenced' receiving SIGTERM) transfers leadership by
itself; this command is for moving it without a restart. Asking the current
leader to lead changes nothing.`,
	examples: `
fencectl leader transfer
fencectl leader transfer n2
fencectl leader transfer n2 -o json`,
	new: func() runner { return &leaderTransferCmd{} },
}

type leaderTransferCmd struct{}

func (*leaderTransferCmd) flags(*pflag.FlagSet) {}

// transferResult is the JSON document of leader transfer.
type transferResult struct {
	Previous string `json:"previous_leader"`
	Leader   string `json:"leader"`
	Term     uint64 `json:"term"`
}

func (*leaderTransferCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) > 1 {
		return usageErr("leader transfer", "leader transfer takes at most one ID")
	}
	target := ""
	if len(args) == 1 {
		target = args[0]
		if err := checkMemberID(target); err != nil {
			return usageErr("leader transfer", err.Error())
		}
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	c := e.client()
	before, err := leaderStatus(ctx, c)
	if err != nil {
		return explain(err, subject{}, e)
	}
	if before.LeaderID == "" {
		return errors.New("the cluster has no leader to hand leadership over")
	}
	res := transferResult{Previous: before.LeaderID, Leader: before.LeaderID, Term: before.Term}
	if target != "" && !isVoter(before.Members, target) {
		return fmt.Errorf("%s is not a voting member; the voters are %s", target, voterIDs(before.Members))
	}
	if target != before.LeaderID {
		if target == "" && countVoters(before.Members) < 2 {
			return fmt.Errorf("%s is the only voter: there is no one to hand leadership to", before.LeaderID)
		}
		if _, err := c.Transfer(ctx, target); err != nil {
			return explainTransfer(err, e)
		}
		after, err := awaitNewLeader(ctx, c, before.LeaderID, target)
		if err != nil {
			return explainedf(err, "leadership was handed over, but no new leader was seen within --timeout %v: %v", e.g.timeout, err)
		}
		res.Leader, res.Term = after.LeaderID, after.Term
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, res)
	}
	if res.Leader == res.Previous {
		fmt.Fprintf(e.stdout, "%s already leads (term %d)\n", res.Leader, res.Term)
		return nil
	}
	fmt.Fprintf(e.stdout, "leader: %s (was %s), term %d\n", res.Leader, res.Previous, res.Term)
	return nil
}

// awaitNewLeader polls until a leader other than old (target, when given)
// answers, itself, that it is the ready leader (its first barrier applied, so
// it serves requests): the transfer answer comes from the old leader, which
// may learn of its successor a heartbeat later, and a new leader is elected
// before it is ready.
func awaitNewLeader(ctx context.Context, c *client.Client, old, target string) (*client.Status, error) {
	for {
		st, err := leaderStatus(ctx, c)
		if err == nil && st.LeaderID != "" && st.LeaderID != old && (target == "" || st.LeaderID == target) &&
			st.ID == st.LeaderID && st.Ready {
			return st, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func explainTransfer(err error, e *env) error {
	if errorIsUnknown(err) {
		return explainedf(err, "outcome of the leadership transfer unknown; 'fencectl status' shows the leader: %v", err)
	}
	return explain(err, subject{}, e)
}

func isVoter(ms []client.Member, id string) bool {
	for _, m := range ms {
		if m.ID == id && m.Voter {
			return true
		}
	}
	return false
}

func voterIDs(ms []client.Member) string {
	var ids []string
	for _, m := range ms {
		if m.Voter {
			ids = append(ids, m.ID)
		}
	}
	return strings.Join(ids, ", ")
}

// errorIsUnknown reports a write whose outcome is unknown: it may have been
// applied.
func errorIsUnknown(err error) bool { return errors.Is(err, client.ErrUnknownOutcome) }
