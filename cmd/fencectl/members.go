package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
)

var membersCommand = command{
	name:    "members",
	summary: "list, add and remove the members of the cluster",
	help: `
Shows and changes the Raft configuration: the voting members of the cluster.
Every member keeps a full copy of the state and votes; a cluster of N voters
needs a quorum of N/2+1 of them to grant, release or verify anything, and so
keeps serving while at most (N-1)/2 are down. Run 3 or 5 voters: an even
number tolerates no more failures than the odd number below it.

Change the membership one member at a time, and wait until 'fencectl status'
shows every member ready before the next change.`,
	examples: `
fencectl members list
fencectl members add n4 10.0.0.4:7701 --http 10.0.0.4:7700
fencectl members remove n4`,
	subs: []command{membersListCommand, membersAddCommand, membersRemoveCommand},
}

var membersListCommand = command{
	name:    "members list",
	summary: "list the members with their addresses, role and health",
	help: `
Lists the members of the cluster: id, HTTP and Raft address, whether it votes,
its role and its health, asking every member at its own address as 'fencectl
status' does (which shows the indexes too). A member that does not answer is
unreachable; one that answers but knows no leader is not_ready.

Exit 0 when a node answered with the member list, even if no leader did;
'fencectl status' is the health check.`,
	examples: `
fencectl members list
fencectl members list -o json | jq -r '.members[] | select(.voter) | .id'`,
	new: func() runner { return &membersListCmd{} },
}

type membersListCmd struct{}

func (*membersListCmd) flags(*pflag.FlagSet) {}

func (*membersListCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 0 {
		return usageErr("members list", "members list takes no arguments")
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	h, err := fetchHealth(ctx, e, e.client())
	if err != nil {
		return err
	}
	if e.jsonOutput() {
		return printJSON(e.stdout, h)
	}
	leader := h.Leader
	if leader == "" {
		leader = "none"
	}
	voters := 0
	for _, m := range h.Members {
		if m.Voter {
			voters++
		}
	}
	fmt.Fprintf(e.stdout, "leader: %s  voters: %d  quorum: %d  tolerates: %s\n\n", leader, voters, quorum(voters), failures(voters))
	t := newTable(e.stdout, "ID", "HTTP", "RAFT", "VOTER", "ROLE", "HEALTH")
	for _, m := range h.Members {
		role := ""
		if m.Status != nil {
			role = m.Status.State
		}
		health := m.Health
		if m.Error != "" {
			health += ": " + m.Error
		}
		t.row(m.ID, m.HTTPAddr, m.RaftAddr, yesNo(m.Voter), role, health)
	}
	return t.flush()
}

var membersAddCommand = command{
	name:    "members add",
	args:    "ID RAFT_ADDR",
	summary: "add a voting member (POST /v1/cluster/join)",
	help: `
Adds the node ID, reachable by its peers at RAFT_ADDR (its --raft-addr, or
--raft-advertise), to the cluster as a voter. The leader replicates the whole
state to it; it serves once it has caught up. Adding a member that is already
there with the same address changes nothing, so the command can be repeated.

--http records the node's HTTP address (its --http-addr or --http-advertise),
which followers need to forward requests to it when it leads. A node started
with --join records it itself; give --http anyway, as a node re-added after
'members remove' does not.

Two ways to add a node:

  1. Start it with --join HOST:HTTPPORT of any member: it asks the cluster to
     add it, and 'members add' is not needed.
  2. Run 'members add' first, then start the node with --join: the cluster
     expects it, and it counts towards the quorum from this moment on. A
     node removed by mistake, its data dir intact, is added back this way
     (it may keep running in between).

An ID already used by another address, or an address used by another ID, is
refused unless --replace is given: the cluster would then drop the old member
to add the new one.`,
	examples: `
fencectl members add n4 10.0.0.4:7701 --http 10.0.0.4:7700
fenced --id n4 --data-dir /var/lib/fenced --http-addr 10.0.0.4:7700 \
  --raft-addr 10.0.0.4:7701 --join 10.0.0.1:7700
fencectl members add n2 10.0.0.12:7701 --http 10.0.0.12:7700 --replace`,
	new: func() runner { return &membersAddCmd{} },
}

type membersAddCmd struct {
	http    string
	replace bool
}

func (m *membersAddCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&m.http, "http", "", "the node's HTTP address, HOST:PORT")
	fs.BoolVar(&m.replace, "replace", false, "replace a member with the same ID or Raft address")
}

// memberChange is the JSON document of members add and members remove: the
// member concerned and the configuration after the change, as the leader
// sees it.
type memberChange struct {
	ID       string          `json:"id"`
	RaftAddr string          `json:"raft_addr,omitempty"`
	HTTPAddr string          `json:"http_addr,omitempty"`
	Leader   string          `json:"leader"`
	Voters   int             `json:"voters"`
	Quorum   int             `json:"quorum"`
	Members  []client.Member `json:"members"`
}

func (m *membersAddCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 2 {
		return usageErr("members add", "members add takes ID and RAFT_ADDR")
	}
	id, raftAddr := args[0], args[1]
	if err := checkMemberID(id); err != nil {
		return usageErr("members add", err.Error())
	}
	if err := checkHostPort("RAFT_ADDR", raftAddr); err != nil {
		return usageErr("members add", err.Error())
	}
	if m.http != "" {
		if err := checkHostPort("--http", m.http); err != nil {
			return usageErr("members add", err.Error())
		}
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	c := e.client()
	before, err := leaderStatus(ctx, c)
	if err != nil {
		return explain(err, subject{}, e)
	}
	if !m.replace {
		for _, mb := range before.Members {
			switch {
			case mb.ID == id && mb.RaftAddr != raftAddr:
				return fmt.Errorf("%s is already a member, at %s; to move it to %s, add --replace", id, mb.RaftAddr, raftAddr)
			case mb.ID != id && mb.RaftAddr == raftAddr:
				return fmt.Errorf("%s is the Raft address of member %s; to replace %s by %s, add --replace", raftAddr, mb.ID, mb.ID, id)
			}
		}
	}
	if err := c.Join(ctx, client.JoinRequest{ID: id, RaftAddr: raftAddr, HTTPAddr: m.http}); err != nil {
		return explainMembership(err, "add "+id, e)
	}
	after, err := settledStatus(ctx, c)
	if err != nil {
		return explainedf(err, "%s was added, but the configuration could not be read back: %v", id, err)
	}
	out := changeOf(id, after)
	out.RaftAddr, out.HTTPAddr = raftAddr, m.http
	if e.jsonOutput() {
		return printJSON(e.stdout, out)
	}
	if err := fields(e.stdout,
		"added", id,
		"raft", raftAddr,
		"http", m.http,
		"voters", votersText(out.Voters),
		"leader", out.Leader,
	); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "If %s is not running yet, start it with --join %s; 'fencectl status' shows when it is ready.\n",
		id, joinHint(c.Endpoints()))
	return nil
}

var membersRemoveCommand = command{
	name:    "members remove",
	args:    "ID",
	summary: "remove a member from the cluster (POST /v1/cluster/remove)",
	help: `
Takes the member ID out of the Raft configuration. The remaining members form
the cluster from then on and need a quorum of their own number only. When ID
is the leader, it hands leadership to another member first, so the cluster
does not wait for an election.

Removing a member does not stop its process: stop it afterwards. Its data dir
is still a copy of the state up to the removal: to bring it back, add it again
with 'fencectl members add' (restart it on its data dir if it was stopped); to
reuse the machine for a new member, empty the data dir and start it with
--join.

Remove a member that is down before replacing it, so that it no longer counts
towards the quorum. Removing the last member is refused.`,
	examples: `
fencectl members remove n4
fencectl members remove n2 -o json`,
	new: func() runner { return &membersRemoveCmd{} },
}

type membersRemoveCmd struct{}

func (*membersRemoveCmd) flags(*pflag.FlagSet) {}

func (*membersRemoveCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 1 {
		return usageErr("members remove", "members remove takes one ID")
	}
	id := args[0]
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	c := e.client()
	before, err := leaderStatus(ctx, c)
	if err != nil {
		return explain(err, subject{}, e)
	}
	var ids []string
	found := false
	for _, m := range before.Members {
		ids = append(ids, m.ID)
		found = found || m.ID == id
	}
	switch {
	case !found:
		return fmt.Errorf("%s is not a member; the members are %s", id, strings.Join(ids, ", "))
	case len(before.Members) == 1:
		return fmt.Errorf("%s is the only member: removing it would leave no cluster", id)
	}
	if err := c.Remove(ctx, id); err != nil {
		return explainMembership(err, "remove "+id, e)
	}
	after, err := settledStatus(ctx, c)
	if err != nil {
		return explainedf(err, "%s was removed, but the configuration could not be read back: %v", id, err)
	}
	out := changeOf(id, after)
	if e.jsonOutput() {
		return printJSON(e.stdout, out)
	}
	if err := fields(e.stdout,
		"removed", id,
		"voters", votersText(out.Voters),
		"leader", out.Leader,
	); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%s's process keeps running outside the cluster: stop it.\n", id)
	return nil
}

// leaderStatus returns the leader's own view of the cluster, which is the
// first to show a membership change: ask any node who leads, then the
// leader. When the leader cannot be asked, the first node's view is returned.
func leaderStatus(ctx context.Context, c *client.Client) (*client.Status, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.LeaderID == "" || st.LeaderID == st.ID || st.LeaderHTTP == "" {
		return st, nil
	}
	if ls, err := c.NodeStatus(ctx, schemeOf(c.Endpoints())+"://"+st.LeaderHTTP); err == nil {
		return ls, nil
	}
	return st, nil
}

// settledStatus is leaderStatus once a leader is known again: removing the
// leader hands leadership over, and the others may learn of their new
// leader a heartbeat after the change is made.
func settledStatus(ctx context.Context, c *client.Client) (*client.Status, error) {
	for {
		st, err := leaderStatus(ctx, c)
		if err == nil && st.LeaderID != "" {
			return st, nil
		}
		select {
		case <-ctx.Done():
			if st != nil {
				return st, nil
			}
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func changeOf(id string, st *client.Status) memberChange {
	v := countVoters(st.Members)
	members := st.Members
	if members == nil {
		members = []client.Member{}
	}
	return memberChange{ID: id, Leader: st.LeaderID, Voters: v, Quorum: quorum(v), Members: members}
}

func countVoters(ms []client.Member) int {
	n := 0
	for _, m := range ms {
		if m.Voter {
			n++
		}
	}
	return n
}

// quorum is the number of voters that must agree for anything to commit.
func quorum(voters int) int { return voters/2 + 1 }

// failures says how many voters may be down while the cluster serves.
func failures(voters int) string {
	f := max(voters-quorum(voters), 0)
	if f == 1 {
		return "1 failure"
	}
	return strconv.Itoa(f) + " failures"
}

func votersText(v int) string {
	return fmt.Sprintf("%d (quorum %d, tolerates %s)", v, quorum(v), failures(v))
}

// joinHint is an endpoint to give a new node's --join.
func joinHint(endpoints []string) string {
	if len(endpoints) == 0 {
		return "HOST:HTTPPORT"
	}
	ep := endpoints[0]
	if i := strings.Index(ep, "://"); i >= 0 {
		ep = ep[i+3:]
	}
	return ep
}

func checkMemberID(id string) error {
	if id == "" || len(id) > client.MaxHolderLen || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("ID %q must be 1 to %d characters without spaces or control characters", id, client.MaxHolderLen)
	}
	return nil
}

// checkHostPort refuses anything but HOST:PORT: the cluster stores the
// address as it is given and dials it as such.
func checkHostPort(what, addr string) error {
	if strings.Contains(addr, "://") {
		return fmt.Errorf("%s %q: want HOST:PORT, not a URL", what, addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: want HOST:PORT: %v", what, addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || host == "" {
		return fmt.Errorf("%s %q: want HOST:PORT with a host and a port number", what, addr)
	}
	return nil
}

// explainMembership words the errors of a membership change. A change whose
// outcome is unknown may have been made: the configuration says.
func explainMembership(err error, what string, e *env) error {
	if errorIsUnknown(err) {
		return explainedf(err, "outcome of %s unknown: it may or may not have been made before --timeout %v ran out; "+
			"'fencectl members list' shows the configuration, and repeating the command is safe: %v", what, e.g.timeout, err)
	}
	return explain(err, subject{}, e)
}
